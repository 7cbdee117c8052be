"""Dependencies shared by the routers: settings, the solve service, auth and size limits
(`check_limits`, whose home is api/intake.py: the intake process checks them too)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import Unauthorized, Unavailable
from api.intake import check_limits
from api.settings import Settings
from api.store import SolveService


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


__all__ = ["ServiceDep", "SettingsDep", "check_limits", "get_service", "get_settings",
           "require_token"]

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
