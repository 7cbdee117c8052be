"""The gpuplan HTTP service: `create_app(settings)` builds the FastAPI application.

Run it with `gpuplan serve`, or `uvicorn --factory api.app:create_app` (settings then come
from `GPUPLAN_*` environment variables, read when the app is created, never at import).
The solver pool and the solve store (SQLite or PostgreSQL) start in the lifespan and stop with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.docs import add_docs
from api.errors import error_responses, install_handlers
from api.metrics import Metrics
from api.routers import catalog, health, k8s, plans, solves, validate, view
from api.routers.deps import require_token
from api.settings import Settings
from api.store import SolveService, open_store

log = logging.getLogger("gpuplan.api")

DESCRIPTION = """\
gpuplan plans GPU allocations for deep-learning clusters: send a cluster snapshot and a
job queue, get back an allocation plan (placements, MIG reconfigurations, migrations,
preemptions) computed by CP-SAT, MILP or heuristics.

Solves run in a bounded pool of worker processes. `POST /v1/plans` waits for the plan;
`POST /v1/solves` returns at once with an id to poll (the best plan so far is visible while
the solve runs) or cancel. When `GPUPLAN_API_TOKEN` is set, every `/v1` route needs
`Authorization: Bearer <token>`.

To look at a plan, open its plan view: `GET /v1/solves/{id}/view` for an async solve, or
`POST /v1/view` with a request and its plan. The page draws every GPU by node and topology
domain, coloured by job, and marks what the plan starts, moves, preempts and reconfigures.
"""


class BodyLimitMiddleware:
    """413 for request bodies over `max_bytes` (by Content-Length, or counted when chunked)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the declared length, else buffer the body up to the limit and replay it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_bytes:
                await self._reject(send)
                return
            await self.app(scope, receive, send)
            return
        if b"chunked" not in headers.get(b"transfer-encoding", b""):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._reject(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body exceeds {self.max_bytes} bytes", "code": "too_large"},
            status_code=413,
        )
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    store = await asyncio.to_thread(open_store, settings.database_url, settings.db_pool_size)
    service = SolveService(settings, store, app.state.metrics)
    await service.start()
    app.state.service = service
    log.info("gpuplan ready: %d workers, queue %d, db %s",
             settings.workers, settings.queue_size, store.description)
    try:
        yield
    finally:
        app.state.service = None
        await service.stop()
        store.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service; `settings` default to the `GPUPLAN_*` environment."""
    settings = settings if settings is not None else Settings()
    app = FastAPI(
        title="gpuplan", version="0.1.0", summary="GPU allocation planner",
        description=DESCRIPTION, lifespan=_lifespan, docs_url=None, redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = Metrics()
    app.state.service = None
    install_handlers(app)

    auth = [Depends(require_token)]
    v1_errors = error_responses(401, 413, 503)  # auth, body limit, pool not running
    for module in (plans, solves, validate, catalog, view):
        app.include_router(module.router, prefix="/v1", dependencies=auth,
                           responses=v1_errors)
    app.include_router(k8s.router, prefix="/v1/k8s", dependencies=auth, responses=v1_errors)
    app.include_router(health.router)
    add_docs(app)

    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    origins = settings.cors_origin_list
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_credentials=False,
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    return app
