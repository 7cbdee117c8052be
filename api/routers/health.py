"""Health and metrics: `/healthz` (alive), `/readyz` (workers up), `/metrics` (Prometheus).

These routes are never behind auth: probes and scrapers call them.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict

from api.errors import error_responses

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """A probe's answer."""

    model_config = ConfigDict(extra="forbid")

    status: str


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> Health:
    """The process answers (never blocked by solving, which runs in worker processes)."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, summary="Readiness",
            responses=error_responses(503))
async def readyz(request: Request) -> Response:
    """200 when every solver worker is up and the database answers, else 503 (also from
    the moment a replica starts draining on SIGTERM)."""
    service = getattr(request.app.state, "service", None)
    if service is not None and service.draining:
        return JSONResponse({"detail": "replica shutting down", "code": "unavailable"},
                            status_code=503)
    if service is None or not service.ready:
        return JSONResponse({"detail": "solver pool not ready", "code": "unavailable"},
                            status_code=503)
    if not await service.store.run(service.store.ping):
        return JSONResponse({"detail": "database not answering", "code": "unavailable"},
                            status_code=503)
    return JSONResponse(Health(status="ready").model_dump())


@router.get("/metrics", summary="Prometheus metrics",
            response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}},
                             "description": "Prometheus text exposition."}})
async def metrics(request: Request) -> Response:
    """Solves by backend and status, solve durations, queue depth and in-flight solves."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
