"""Async solves: `POST /v1/solves` (202 + id), `GET /v1/solves[/{id}]`, `DELETE` to cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field

from api.errors import error_responses
from api.intake import PreparedRequest
from api.pool import TaskState
from api.routers.body import ThreadedBodyRoute
from api.routers.deps import ServiceDep
from api.routers.plans import PLAN_REQUEST_BODY, prepared_body
from api.store import SolveRecord
from models import Plan

router = APIRouter(prefix="/solves", tags=["solves"],
                   route_class=ThreadedBodyRoute)


class SolveRef(BaseModel):
    """Where to follow an async solve."""

    model_config = ConfigDict(extra="forbid")

    id: str
    url: str = Field(description="Path of the solve's status resource.")
    state: TaskState


class SolveSummary(SolveRef):
    """A solve in the recent-solves list."""

    request_hash: str = Field(description="SHA-256 of the request as solved (time limit capped).")
    backend: str = Field(description="Requested solver until done, then the backend that "
                                     "produced the plan.")
    created_at: float = Field(description="Unix time of submission.")
    started_at: float | None = Field(default=None, description="Unix time a worker took it.")
    finished_at: float | None = Field(default=None, description="Unix time it ended.")
    queued_s: float | None = Field(default=None, description="Seconds spent waiting.")
    run_s: float | None = Field(default=None, description="Seconds on a worker.")
    error: str | None = None


class SolveStatus(SolveSummary):
    """An async solve with its plan: final when done, the best so far while running."""

    plan: Plan | None = None
    plan_is_final: bool = Field(
        description="False while `plan` is the best plan so far of a running solve.")


class SolveList(BaseModel):
    """Recent solves, newest first."""

    model_config = ConfigDict(extra="forbid")

    solves: list[SolveSummary]


def _url(request: Request, solve_id: str) -> str:
    return request.url_for("get_solve", solve_id=solve_id).path


def _summary_fields(request: Request, rec: SolveRecord) -> dict[str, object]:
    started, finished = rec.started_at, rec.finished_at
    left_queue = started if started is not None else finished
    return {
        "id": rec.id, "url": _url(request, rec.id), "state": rec.state,
        "request_hash": rec.request_hash, "backend": rec.backend,
        "created_at": rec.created_at, "started_at": started, "finished_at": finished,
        "queued_s": left_queue - rec.created_at if left_queue is not None else None,
        "run_s": finished - started if finished is not None and started is not None else None,
        "error": rec.error,
    }


def _status(request: Request, rec: SolveRecord) -> SolveStatus:
    plan = Plan.model_validate_json(rec.plan_json) if rec.plan_json is not None else None
    return SolveStatus(**_summary_fields(request, rec), plan=plan,
                       plan_is_final=rec.plan_is_final and rec.state == TaskState.done)


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SolveRef,
    summary="Start an async solve",
    responses=error_responses(429),
    openapi_extra=PLAN_REQUEST_BODY,
)
async def create_solve(
    prepared: Annotated[PreparedRequest, Depends(prepared_body(record=True))],
    request: Request, response: Response, service: ServiceDep,
) -> SolveRef:
    """Queue the request; answer 202 with its id and URL (also in `Location`). The body is
    parsed and validated in the intake process (see api/routers/plans.py)."""
    rec = await service.submit(prepared)
    url = _url(request, rec.id)
    response.headers["Location"] = url
    return SolveRef(id=rec.id, url=url, state=rec.state)


@router.get("", response_model=SolveList, summary="List recent solves")
async def list_solves(
    request: Request, service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=500, description="How many, newest first.")] = 50,
) -> SolveList:
    """The most recent async solves (without their plans)."""
    recs = await service.recent(limit)
    return SolveList(solves=[SolveSummary(**_summary_fields(request, r))
                             for r in recs])


@router.get("/{solve_id}", response_model=SolveStatus, summary="Get a solve",
            responses=error_responses(404))
async def get_solve(solve_id: str, request: Request, service: ServiceDep) -> SolveStatus:
    """State, timings and the plan (final when done, the best so far while running)."""
    return _status(request, await service.get(solve_id))


@router.delete("/{solve_id}", response_model=SolveStatus, summary="Cancel a solve",
               responses=error_responses(404))
async def cancel_solve(solve_id: str, request: Request, service: ServiceDep) -> SolveStatus:
    """Cancel a queued or running solve (its worker process is killed and replaced).

    A solve that already finished is left as it is; the answer is its record either way.
    """
    return _status(request, await service.cancel(solve_id))
