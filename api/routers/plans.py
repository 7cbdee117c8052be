"""`POST /v1/plans`: solve synchronously on the worker pool and return the Plan."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response

from api.errors import error_responses
from api.examples import plan_request_examples
from api.routers.body import ThreadedBodyRoute
from api.routers.deps import ServiceDep, SettingsDep, check_limits
from models import Plan, PlanRequest

router = APIRouter(tags=["plans"], route_class=ThreadedBodyRoute)

PlanRequestBody = Annotated[PlanRequest, Body(openapi_examples=plan_request_examples())]


@router.post(
    "/plans",
    response_model=Plan,
    summary="Plan synchronously",
    responses=error_responses(429, 500, 504),
)
async def create_plan(body: PlanRequestBody, service: ServiceDep,
                      settings: SettingsDep) -> Response:
    """Solve the request in a worker process and answer with the validated Plan.

    `policy.time_limit_s` is capped by the server's maximum (`GPUPLAN_MAX_TIME_LIMIT_S`);
    a solve that overruns it (plus a grace period) is stopped and answered 504. When every
    worker is busy and the queue is full the answer is 429 with `Retry-After`.
    """
    check_limits(body, settings)
    result = await service.solve(body)
    # The worker serialised a validated Plan: send its JSON as is (no re-encoding here).
    return Response(content=result.json, media_type="application/json")
