"""The service's errors: a small hierarchy mapped once to HTTP status codes and JSON bodies.

Every error answer is JSON: `{"detail": str, "code": str}` (422 keeps FastAPI's list of
field errors). No answer ever carries a traceback; unexpected exceptions are logged here and
answered with a 500 whose body says only that it is an internal error.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from solver import PlanningError

log = logging.getLogger("gpuplan.api")


class ErrorBody(BaseModel):
    """The JSON body of every non-422 error answer."""

    model_config = ConfigDict(extra="forbid")

    detail: str
    code: str | None = None


class ServiceError(Exception):
    """Base of the service's own errors; `status` and `code` say how to answer."""

    status: int = 500
    code: str = "internal"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def headers(self) -> dict[str, str] | None:
        """Extra response headers (e.g. Retry-After)."""
        return None


class Unauthorized(ServiceError):
    """A /v1 route called without the right bearer token."""

    status = 401
    code = "unauthorized"

    def headers(self) -> dict[str, str] | None:
        return {"WWW-Authenticate": "Bearer"}


class NotFound(ServiceError):
    """An unknown solve id or GPU model."""

    status = 404
    code = "not_found"


class QueueFull(ServiceError):
    """Every worker is busy and the wait queue is full."""

    status = 429
    code = "queue_full"

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(self.retry_after_s)}


class SolveTimeout(ServiceError):
    """A solve overran its time limit plus the grace period and was killed."""

    status = 504
    code = "solve_timeout"


class SolveCancelled(ServiceError):
    """A solve was cancelled before it finished."""

    status = 409
    code = "cancelled"


class ShuttingDown(SolveCancelled):
    """The server is stopping: queued and running solves are cancelled."""

    status = 503
    code = "shutting_down"


class SolveFailed(ServiceError):
    """The planner raised or its worker process died: a server-side bug."""

    status = 500
    code = "solve_failed"


class PlannerBug(SolveFailed):
    """The planner raised PlanningError (its plan failed validation): a bug, reported as is."""

    code = "planning_error"


class Unavailable(ServiceError):
    """The service is starting or shutting down."""

    status = 503
    code = "unavailable"


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the given error status codes, all with the ErrorBody schema."""
    text = {
        401: "Missing or wrong bearer token.",
        404: "Not found.",
        409: "The solve was cancelled.",
        413: "Request body too large.",
        429: "Worker queue full; retry after the Retry-After seconds.",
        500: "Internal error (a planner bug); the body carries no traceback.",
        503: "Service not ready.",
        504: "The solve overran its time limit and was stopped.",
    }
    return {c: {"model": ErrorBody, "description": text[c]} for c in codes}


def _body(detail: str, code: str) -> dict[str, str]:
    return ErrorBody(detail=detail, code=code).model_dump()


async def _service_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    if exc.status >= 500:
        log.error("%s: %s", exc.code, exc.detail)
    return JSONResponse(_body(exc.detail, exc.code), status_code=exc.status,
                        headers=exc.headers())


async def _planning_error(_: Request, exc: Exception) -> JSONResponse:
    log.error("planner produced an invalid plan: %s", exc)
    return JSONResponse(_body(f"planner error: {exc}", "planning_error"), status_code=500)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(_body("internal server error", "internal"), status_code=500)


async def _http_error(request: Request, exc: Exception) -> Response:
    """FastAPI answers 400 when a body cannot be decoded at all (not UTF-8, nested too
    deeply): answer those like any other malformed JSON, 422 at `body`."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.__cause__ is not None:
        return await request_validation_exception_handler(request, RequestValidationError([{
            "type": "json_invalid", "loc": ("body",), "input": None,
            "msg": f"body is not decodable JSON ({type(exc.__cause__).__name__})",
        }]))
    return await http_exception_handler(request, exc)


def install_handlers(app: FastAPI) -> None:
    """Register the exception handlers on `app`."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(PlanningError, _planning_error)
    app.add_exception_handler(Exception, _unexpected)
