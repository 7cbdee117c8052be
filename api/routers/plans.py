"""`POST /v1/plans`: solve synchronously on the worker pool and return the Plan.

The body is not parsed here: `prepared_body` hands its bytes to the solve service's intake
process (api/intake.py), which validates it with the same rules and limits and answers the
same 422s, so that large bodies never hold the API process's GIL. A synchronous plan that
finds a solver worker idle sends its bytes to that worker instead, which runs the same
checks before it solves (api/intake.py `RawRequest`). The OpenAPI schema still
documents the body as a PlanRequest (`PLAN_REQUEST_BODY`).

The answer carries a `Server-Timing` header (W3C Server Timing): where the request's time
went in the service, in milliseconds by stage (`server_timing`), so that a client or a
benchmark (benchmarks/latency.py) can tell the solve from what the service adds.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from pydantic import TypeAdapter

from api.errors import error_responses
from api.examples import plan_request_examples
from api.intake import PreparedRequest
from api.routers.body import ThreadedBodyRoute, is_json, unparsed_body_errors
from api.routers.deps import ServiceDep
from models import Plan, PlanRequest

router = APIRouter(tags=["plans"], route_class=ThreadedBodyRoute)

PlanRequestBody = Annotated[PlanRequest, Body(openapi_examples=plan_request_examples())]

#: The OpenAPI request body and 422 answer of the routes that take a PlanRequest through
#: the intake (what FastAPI writes for a `PlanRequestBody` parameter).
PLAN_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/PlanRequest"},
            "examples": plan_request_examples(),
        }},
    },
    "responses": {"422": {
        "description": "Validation Error",
        "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/HTTPValidationError"}}},
    }},
}

_ADAPTER: TypeAdapter[PlanRequest] = TypeAdapter(PlanRequest)


def prepared_body(record: bool) -> Callable[..., Awaitable[PreparedRequest]]:
    """A dependency: the request body as a PreparedRequest, parsed, validated and capped in
    the intake process (`record`: keep its JSON, for an async solve's record)."""

    async def prepared(request: Request, service: ServiceDep) -> PreparedRequest:
        body = await request.body()
        if not body or not is_json(request):
            raise unparsed_body_errors(_ADAPTER, body)
        return await service.prepare(body, record)

    return prepared


@router.post(
    "/plans",
    response_model=Plan,
    summary="Plan synchronously",
    responses=error_responses(429, 500, 504),
    openapi_extra=PLAN_REQUEST_BODY,
)
async def create_plan(request: Request, service: ServiceDep) -> Response:
    """Solve the request in a worker process and answer with the validated Plan.

    `policy.time_limit_s` is capped by the server's maximum (`GPUPLAN_MAX_TIME_LIMIT_S`);
    a solve that overruns it (plus a grace period) is stopped and answered 504. When every
    worker is busy and the queue is full the answer is 429 with `Retry-After`. The
    answer's `Server-Timing` header says where the time went, in milliseconds by stage
    (reading the body, validating it, the solve, serialising the plan, the hops between
    the processes).
    """
    began = time.monotonic()
    body = await request.body()
    if not body or not is_json(request):
        raise unparsed_body_errors(_ADAPTER, body)
    stages = {"read": time.monotonic() - began}
    if service.takes_raw_bodies:  # an idle worker validates it: no intake round trip
        result = await service.solve_body(body)
    else:
        intake = time.monotonic()
        prepared = await service.prepare(body, False)
        stages["intake"] = time.monotonic() - intake
        result = await service.solve(prepared)
    stages.update(result.stages)
    stages["total"] = time.monotonic() - began
    # The worker serialised a validated Plan: send its JSON as is (no re-encoding here).
    return Response(content=result.json, media_type="application/json",
                    headers={"Server-Timing": server_timing(stages, result.cpu)})


def server_timing(stages: Mapping[str, float], cpu: Mapping[str, float]) -> str:
    """A `Server-Timing` header value: each stage's wall seconds as `name;dur=`
    milliseconds, with the worker's CPU milliseconds of its own stages as
    `desc="cpu=..."` (the CPU a loaded machine does not inflate).

    Stages of `POST /v1/plans`, in order: `read` (the body, in the API process), `intake`
    (validated and pickled in an intake process, when no worker was idle), `queue` (waiting
    for a worker), `hop` (to the worker), `validate` (a raw body, in the worker) or
    `unpickle` (the intake's request), `solve` (the planner call, whose plan's
    `solve_time_s` is part of it), `serialise` (the plan's JSON), `back` (to the API
    process), and `total` (from the route's start to the answer; the HTTP stack's own
    time, before and after, is outside it)."""
    return ", ".join(
        f"{name};dur={1000 * seconds:.2f}"
        + (f';desc="cpu={1000 * cpu[name]:.2f}"' if name in cpu else "")
        for name, seconds in stages.items())
