"""The service's errors: a small hierarchy mapped once to HTTP status codes and JSON bodies.

Every error answer is JSON: `{"detail": str, "code": str}` (422 keeps FastAPI's list of
field errors, each with `type`, `loc`, `msg` and, for scalar inputs only, `input`). No
answer ever carries a traceback; unexpected exceptions are logged here and answered with a
500 whose body says only that it is an internal error. A 422 never echoes a value that JSON
cannot carry: non-finite numbers become strings, lone surrogates are escaped, long strings
are cut and objects or lists are left out, so the answer always encodes.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from models.wire import escaped
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


class InvalidBody(ServiceError):
    """A request body its worker found invalid (validated there: api/intake.py `RawRequest`);
    `errors` are the route's 422 errors, field paths from `body`."""

    status = 422
    code = "invalid_body"

    def __init__(self, errors: list[Any]) -> None:
        super().__init__("the request body is invalid")
        self.errors = errors


class Unavailable(ServiceError):
    """The service is starting or shutting down."""

    status = 503
    code = "unavailable"


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the given error status codes, all with the ErrorBody schema."""
    text = {
        401: "Missing or wrong bearer token.",
        404: "Not found.",
        409: "Conflict: the solve was cancelled, or a session's events or state do not "
             "allow the change.",
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


#: Longest string input echoed back in a 422 (longer ones are cut).
ECHO_MAX_CHARS = 200


def wire_safe(value: Any, *, cut: int | None = None) -> Any:
    """`value` with every part JSON can carry as is: non-finite floats as strings, lone
    surrogates escaped, strings cut to `cut` characters when given."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        text = escaped(value)
        return text[:cut] + "..." if cut is not None and len(text) > cut else text
    if isinstance(value, dict):
        return {wire_safe(str(k)): wire_safe(v, cut=cut) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [wire_safe(v, cut=cut) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return wire_safe(str(value), cut=cut)


def _field_error(err: dict[str, Any]) -> dict[str, Any]:
    """One 422 entry: type, loc, msg, ctx, and the input when it is a scalar."""
    out: dict[str, Any] = {
        "type": wire_safe(str(err.get("type", "value_error"))),
        "loc": [wire_safe(x) if isinstance(x, int | str) else wire_safe(str(x))
                for x in err.get("loc", ())],
        "msg": wire_safe(str(err.get("msg", "")), cut=2000),
    }
    value = err.get("input")
    if value is None or isinstance(value, bool | int | float | str):
        out["input"] = wire_safe(value, cut=ECHO_MAX_CHARS)
    ctx = err.get("ctx")
    if isinstance(ctx, dict):
        out["ctx"] = wire_safe(ctx, cut=ECHO_MAX_CHARS)
    return out


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    """422 with the field errors, made safe to encode whatever the input was."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": [_field_error(e) for e in exc.errors()]}, status_code=422)


async def _http_error(request: Request, exc: Exception) -> Response:
    """FastAPI answers 400 when a body cannot be decoded at all (not UTF-8, nested too
    deeply): answer those like any other malformed JSON, 422 at `body`."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.__cause__ is not None:
        return await _validation_error(request, RequestValidationError([{
            "type": "json_invalid", "loc": ("body",), "input": None,
            "msg": f"body is not decodable JSON ({type(exc.__cause__).__name__})",
        }]))
    if exc.status_code == 405:
        # Starlette lists the methods of the first route that matched the path only; a
        # path served by several routes (GET and POST /v1/solves) needs all of them.
        allowed = _allowed_methods(request)
        if allowed is not None:
            exc.headers = {**(exc.headers or {}), "Allow": allowed}
    return await http_exception_handler(request, exc)


_OPERATIONS = ("GET", "PUT", "POST", "DELETE", "OPTIONS", "PATCH", "TRACE")


def _allowed_methods(request: Request) -> str | None:
    """Every method the app's OpenAPI schema documents for the request's path (with HEAD
    beside GET, as Starlette serves it); None for a path the schema does not list."""
    table: list[tuple[re.Pattern[str], set[str]]] | None = getattr(
        request.app.state, "allow_table", None)
    if table is None:
        table = []
        for path, item in request.app.openapi().get("paths", {}).items():
            methods = {m.upper() for m in item} & set(_OPERATIONS)
            if "GET" in methods:
                methods.add("HEAD")
            table.append((compile_path(path)[0], methods))
        request.app.state.allow_table = table
    path = request.scope["path"]
    return next((", ".join(sorted(m)) for regex, m in table if regex.match(path)), None)


def install_handlers(app: FastAPI) -> None:
    """Register the exception handlers on `app`."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(PlanningError, _planning_error)
    app.add_exception_handler(Exception, _unexpected)
