"""Dependencies shared by the routers: settings, the solve service, auth and size limits."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import Unauthorized, Unavailable
from api.settings import Settings
from api.store import SolveService
from models import PlanRequest


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


def get_service(request: Request) -> SolveService:
    """The running solve service (503 while the app starts or stops)."""
    service: SolveService | None = getattr(request.app.state, "service", None)
    if service is None:
        raise Unavailable("the solver pool is not running")
    return service


SettingsDep = Annotated[Settings, Depends(get_settings)]
ServiceDep = Annotated[SolveService, Depends(get_service)]

_bearer = HTTPBearer(
    auto_error=False,
    description="Needed on every /v1 route when the server sets GPUPLAN_API_TOKEN.",
)


def require_token(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """401 unless auth is off or the bearer token matches (constant-time comparison)."""
    token = settings.api_token
    if token is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise Unauthorized("missing or invalid bearer token")


def check_limits(request: PlanRequest, settings: Settings, loc: tuple[str, ...] = ("body",)
                 ) -> None:
    """422 naming the limit when the request has more nodes, GPUs or jobs than allowed."""
    nodes = len(request.cluster.nodes)
    gpus = sum(len(n.gpus) for n in request.cluster.nodes)
    counts = (
        ("max_nodes", settings.max_nodes, nodes, (*loc, "cluster", "nodes"), "nodes"),
        ("max_gpus", settings.max_gpus, gpus, (*loc, "cluster", "nodes"), "GPUs"),
        ("max_jobs", settings.max_jobs, len(request.jobs), (*loc, "jobs"), "jobs"),
    )
    errors = [
        {"type": "limit_exceeded", "loc": where,
         "msg": f"{n} {what} exceed the server limit {name}={limit}",
         "input": None, "ctx": {"limit": name, "max": limit, "actual": n}}
        for name, limit, n, where, what in counts if n > limit
    ]
    if errors:
        raise RequestValidationError(errors)
