"""The gpuplan HTTP service: `create_app(settings)` builds the FastAPI application.

Run it with `gpuplan serve`, or `uvicorn --factory api.app:create_app` (settings then come
from `GPUPLAN_*` environment variables, read when the app is created, never at import).
The solver pool and the solve store (SQLite or PostgreSQL) start in the lifespan and stop with it.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.docs import add_docs
from api.errors import error_responses, install_handlers
from api.metrics import Metrics
from api.routers import catalog, health, k8s, plans, sessions, solves, validate, view
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


class TokenMiddleware:
    """401 for a `/v1` request without the right bearer token, before its body is read.

    The routes' `require_token` dependency checks the same token (and documents it in
    OpenAPI), but FastAPI reads and parses a body before it solves dependencies: this
    middleware refuses an unauthenticated request first, whatever its body.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass authorised or non-/v1 requests on; answer the others 401."""
        if scope["type"] != "http" or not (scope["path"] == "/v1"
                                           or scope["path"].startswith("/v1/")):
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, credentials = given.partition(b" ")
        # Constant-time comparison, whatever the scheme, as in `require_token`.
        if hmac.compare_digest(credentials.strip(), self.token) and scheme.lower() == b"bearer":
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {"detail": "missing or invalid bearer token", "code": "unauthorized"},
            status_code=401, headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, _no_receive, send)


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


def _stop_solves_on_signal(service: SolveService, settings: Settings) -> Callable[[], None]:
    """Chain the server's SIGTERM / SIGINT handlers so that no solve outlives the drain.

    On SIGTERM the server waits for the requests in flight before its lifespan shutdown,
    and `SolveService.drain` (api/serving.py) gives async solves `shutdown_grace_s`; a
    request waiting for a synchronous or Kubernetes plan would still hold the server for
    that solve's whole time limit. The chained handler calls the server's own, then, once
    the drain's grace and delay are over, ends every solve still queued or running
    (answered 503). Only where the server installed a handler (the main thread of
    `gpuplan serve` or `uvicorn`); returns the function that restores it.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    bound = settings.shutdown_grace_s + settings.shutdown_delay_s
    chained: dict[int, tuple[Callable[[int, FrameType | None], Any], object]] = {}

    def close_later() -> None:
        loop.call_later(bound, service.pool.begin_close)

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if not callable(previous):
            continue

        def handler(signum: int, frame: FrameType | None,
                    previous: Callable[[int, FrameType | None], Any] = previous) -> None:
            loop.call_soon_threadsafe(close_later)
            previous(signum, frame)

        signal.signal(sig, handler)
        chained[sig] = (handler, previous)

    def restore() -> None:
        for sig, (handler, previous) in chained.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, previous)  # type: ignore[arg-type]

    return restore


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    store = await asyncio.to_thread(open_store, settings.database_url, settings.db_pool_size)
    service = SolveService(settings, store, app.state.metrics)
    await service.start()
    app.state.service = service
    restore_signals = _stop_solves_on_signal(service, settings)
    log.info("gpuplan ready: %d workers, queue %d, db %s",
             settings.workers, settings.queue_size, store.description)
    try:
        yield
    finally:
        restore_signals()
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

    # Without a token the routes declare no security, so the schema says what is checked.
    auth = [Depends(require_token)] if settings.api_token is not None else []
    v1_errors = error_responses(401, 413, 503)  # auth, body limit, pool not running
    for module in (plans, solves, validate, catalog, view, sessions):
        app.include_router(module.router, prefix="/v1", dependencies=auth,
                           responses=v1_errors)
    app.include_router(k8s.router, prefix="/v1/k8s", dependencies=auth, responses=v1_errors)
    app.include_router(health.router)
    add_docs(app)

    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.api_token is not None:  # outside the body limit: 401 before 413
        app.add_middleware(TokenMiddleware, token=settings.api_token)
    origins = settings.cors_origin_list
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_credentials=False,
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    return app
