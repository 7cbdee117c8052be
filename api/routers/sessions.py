"""Planning sessions: a snapshot once, then deltas and warm-started plans.

`POST /v1/sessions` (a PlanRequest) -> 201 with the id; `POST /v1/sessions/{id}/events`
(a batch of deltas, applied all or none; 409 naming the event that does not apply);
`POST /v1/sessions/{id}/plan` -> the Plan, solved on the worker pool like `/v1/plans`
and committed as the session's next starting point (409 when the session changed on another
replica meanwhile; its `Server-Timing` header splits its time by stage, as for
`/v1/plans`); `GET` and `DELETE /v1/sessions/{id}`. The session service
(api/sessions.py) starts and stops with the app, through this router's lifespan.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, Body, Depends, FastAPI, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field

from api.errors import Unavailable, error_responses
from api.routers.body import ThreadedBodyRoute
from api.routers.deps import ServiceDep, SettingsDep, check_limits
from api.routers.plans import PlanRequestBody, server_timing
from api.sessions import LiveSession, SessionService, SessionSettings
from api.store import SolveService
from models import Plan, PlanRequest
from models.events import EventBatch


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the session service on the solve service's store (SQLite or PostgreSQL, shared
    by the replicas); the solve service and its store are started by the app's own
    lifespan, which runs around this one."""
    solves: SolveService = app.state.service
    service = SessionService(solves.store, solves, SessionSettings())
    await service.start()
    app.state.sessions = service
    try:
        yield
    finally:
        app.state.sessions = None
        await service.stop()


# Bodies are parsed strictly and off the event loop, as on every other /v1 route.
router = APIRouter(prefix="/sessions", tags=["sessions"], lifespan=_lifespan,
                   route_class=ThreadedBodyRoute)


def get_sessions(request: Request) -> SessionService:
    """The running session service (503 while the app starts or stops)."""
    sessions: SessionService | None = getattr(request.app.state, "sessions", None)
    if sessions is None:
        raise Unavailable("the session service is not running")
    return sessions


SessionsDep = Annotated[SessionService, Depends(get_sessions)]


class SessionRef(BaseModel):
    """A session's id, where to find it, and how many changes it has seen."""

    model_config = ConfigDict(extra="forbid")

    id: str
    url: str = Field(description="Path of the session resource.")
    version: int = Field(description="Event batches applied and plans committed so far.")
    created_at: float = Field(description="Unix time of creation.")
    updated_at: float = Field(description="Unix time of the last change.")
    expires_at: float = Field(description="Unix time it expires unless changed again.")


class SessionState(SessionRef):
    """A session with its current state and its last plan."""

    request: PlanRequest = Field(description="The current state: the snapshot with every "
                                             "event and committed plan applied.")
    last_plan: Plan | None = None


class SessionPlanBody(BaseModel):
    """How long this plan may take (the session's policy time limit when absent)."""

    model_config = ConfigDict(extra="forbid")

    time_limit_s: float | None = Field(default=None, gt=0, le=3600, allow_inf_nan=False)


def _ref(request: Request, sessions: SessionService, sid: str, live: LiveSession
         ) -> SessionRef:
    return SessionRef(id=sid, url=request.url_for("get_session", session_id=sid).path,
                      version=live.session.version, created_at=live.created_at,
                      updated_at=live.updated_at, expires_at=sessions.expires_at(live))


@router.post("", response_model=SessionRef, status_code=status.HTTP_201_CREATED,
             summary="Open a planning session with a snapshot")
async def create_session(body: PlanRequestBody, request: Request, sessions: SessionsDep,
                         settings: SettingsDep) -> SessionRef:
    """Start a session whose state is this snapshot; later calls send only deltas."""
    check_limits(body, settings)
    sid, live = await sessions.create(body)
    return _ref(request, sessions, sid, live)


@router.get("/{session_id}", response_model=SessionState, summary="A session's state",
            responses=error_responses(404))
async def get_session(session_id: str, request: Request, sessions: SessionsDep
                      ) -> SessionState:
    """The session's current state and last plan."""
    live = await sessions.get(session_id)
    ref = _ref(request, sessions, session_id, live)
    return SessionState(**ref.model_dump(), request=live.session.request,
                        last_plan=live.last_plan())


@router.post("/{session_id}/events", response_model=SessionRef,
             summary="Apply deltas to a session", responses=error_responses(404, 409))
async def post_events(session_id: str, body: EventBatch, request: Request,
                      sessions: SessionsDep, settings: SettingsDep) -> SessionRef:
    """Apply the events in order, all or none: when one does not apply (unknown job,
    double finish, unknown node...) the answer is 409 naming it and nothing changes."""
    live = await sessions.apply(session_id, body.events,
                                lambda req: check_limits(req, settings, ("session",)))
    return _ref(request, sessions, session_id, live)


@router.post("/{session_id}/plan", response_model=Plan, summary="Plan a session",
             responses=error_responses(404, 409, 429, 500, 504))
async def plan_session(session_id: str, sessions: SessionsDep, service: ServiceDep,
                       body: Annotated[SessionPlanBody | None, Body()] = None) -> Response:
    """Solve the session's current state on the worker pool, starting from its last plan
    (whose placements are the running jobs' current ones), and commit the new plan; 409
    `session_changed` (nothing committed) when another replica changed the session while
    it was solved."""
    del service  # the pool must be running (503 otherwise); the session service uses it
    began = time.monotonic()
    limit = body.time_limit_s if body is not None else None
    result = await sessions.plan(session_id, limit)
    stages = {**result.stages, "total": time.monotonic() - began}
    return Response(content=result.json, media_type="application/json",
                    headers={"Server-Timing": server_timing(stages, result.cpu)})


@router.delete("/{session_id}", status_code=status.HTTP_204_NO_CONTENT,
               summary="Close a session", responses=error_responses(404))
async def delete_session(session_id: str, sessions: SessionsDep) -> Response:
    """Forget the session."""
    await sessions.delete(session_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
