"""Request bodies parsed and validated off the event loop, with wire-safe values only.

FastAPI reads and validates a JSON body on the event loop, inside the coroutine that serves
the request: a few dozen large bodies at once then hold up every other request (`/healthz`
included). `ThreadedBodyRoute` does both steps in the thread pool first and hands FastAPI the
validated model (which it accepts as is), so the loop only moves bytes. Parsing holds
the GIL, so only `PARSE_CONCURRENCY` bodies are parsed at once and the loop keeps its
turn (it still waits for the validation in progress: see PARSE_CONCURRENCY).
Validation is strict JSON validation, so what the OpenAPI schema calls a boolean or an
integer is one. The largest bodies, the PlanRequests of `POST /v1/plans` and `/v1/solves`,
do not come here: they are parsed (by `parse_body`) in the intake process (api/intake.py).

On the way it refuses what Python's JSON parser accepts but the wire contract does not
(models/wire.py): `NaN`, `Infinity`, numbers so large they become infinite, and lone UTF-16
surrogates. Each is a 422 at its own field path, like any other validation error; a body
nested too deeply to parse, or not text at all, is a 422 at `body`.
"""

from __future__ import annotations

import email.message
import re
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError

from models.wire import WireJSONError, WireProblem, load_wire_json
from solver.gcpause import gc_paused


def _is_json(request: Request) -> bool:
    """Whether FastAPI would parse this body as JSON (application/json or +json)."""
    value = request.headers.get("content-type")
    if not value:
        return False
    message = email.message.Message()
    message["content-type"] = value
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


def is_json(request: Request) -> bool:
    """Whether FastAPI would parse this body as JSON (application/json or +json)."""
    return _is_json(request)


def unparsed_body_errors(adapter: TypeAdapter[Any], body: bytes) -> RequestValidationError:
    """The 422 FastAPI gives a required body that is empty or not JSON: `missing`, or the
    model's verdict on the raw bytes (for a route that takes its body itself)."""
    if not body:
        return RequestValidationError([{"type": "missing", "loc": ("body",),
                                        "msg": "Field required", "input": None}])
    try:
        adapter.validate_python(body, from_attributes=True)  # as FastAPI validates
    except ValidationError as e:
        return RequestValidationError([{**err, "loc": ("body", *err["loc"])}
                                       for err in e.errors(include_url=False)])
    raise AssertionError("a model accepted raw bytes as its input")


def _unprocessable(problems: list[WireProblem]) -> RequestValidationError:
    return RequestValidationError([{"type": p.type, "loc": ("body", *p.loc), "msg": p.msg,
                                    "input": None} for p in problems])


#: A JSON number's exponent of three digits or more, which Python's JSON parser may read as
#: an infinity (`1e400`); in JSON an exponent always follows a digit.
_BIG_EXPONENT = re.compile(rb"\d[eE][+]?0*[1-9]\d{2}")
#: Every digit to `0` and `E` to `e`, so that one search finds a digit followed by an
#: exponent mark.
_ONE_DIGIT = bytes.maketrans(b"123456789E", b"000000000e")


def suspect(body: bytes) -> bool:
    """Whether `body` may hold a token Python's JSON parser reads as a non-finite number:
    `NaN`, `Infinity`, or an exponent of three digits or more. A body without any is
    checked by the strict validator alone; one with some is first read by models/wire.py,
    which names the path of each non-finite number.

    Byte searches, not one regular expression over the body: a pattern that starts with
    `e` tries a match at every `e` of every key (11 ms of CPU for a 0.6 MiB request at
    1,024 GPUs, a quarter of its validation, and 150 ms at 8 MiB); these take about a
    sixth of that, and the expression runs only on a body with a digit followed by `e` or
    `E`."""
    if b"NaN" in body or b"Infinity" in body:
        return True
    if b"0e" not in body.translate(_ONE_DIGIT):
        return False
    return _BIG_EXPONENT.search(body) is not None


def parse_body(adapter: TypeAdapter[Any], body: bytes) -> Any:
    """Parse `body` as JSON and validate it with `adapter`, strictly (blocking).

    Strict JSON validation takes JSON types at their word, as the OpenAPI schema documents
    them: `true` and not `"yes"` or `1` for a boolean, `2` and not `"2"` for an integer.
    Returns the validated value; raises RequestValidationError (answered 422) with the
    field path of every problem.
    """
    if suspect(body):
        _wire_check(body)
    try:
        # The collector paused: a large body makes hundreds of thousands of objects, whose
        # allocation would trigger collections that find nothing (2x the time at L size).
        with gc_paused():
            return adapter.validate_json(body, strict=True)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        if any(err["type"] == "json_invalid" for err in errors):
            _wire_check(body)  # names the path of a lone surrogate, or where JSON breaks
        raise RequestValidationError(
            [{**err, "loc": ("body", *err["loc"])} for err in errors]) from None
    except RecursionError:
        raise _unprocessable([WireProblem((), "json_invalid", "JSON nested too deeply")]
                             ) from None


def _wire_check(body: bytes) -> None:
    """422 for anything models/wire.py refuses, each problem at its path."""
    try:
        load_wire_json(body)
    except WireJSONError as e:
        raise _unprocessable(e.problems) from None


#: Bodies parsed at once. pydantic-core validates with the GIL held (about 100 ms for an
#: M-sized request of 650 KB), so parser threads never run in parallel: more of them only
#: queue more GIL holds ahead of the event loop. One at a time keeps the loop's wait to one
#: validation.
PARSE_CONCURRENCY = 1


def _parse_limiter(request: Request) -> anyio.CapacityLimiter:
    """The app's limiter of concurrent body parses (created on first use, in the loop)."""
    state = request.app.state
    limiter: anyio.CapacityLimiter | None = getattr(state, "parse_limiter", None)
    if limiter is None:
        limiter = state.parse_limiter = anyio.CapacityLimiter(PARSE_CONCURRENCY)
    return limiter


class ThreadedBodyRoute(APIRoute):
    """An APIRoute whose single JSON body is parsed and validated in the thread pool."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, preceded by the threaded parse (routes with one body only)."""
        handler = super().get_route_handler()
        field = self.body_field
        if field is None or self._embed_body_fields:
            return handler
        # typed Any: mypy 2 no longer takes a runtime-built Annotated as a TypeForm
        annotated: Any = Annotated[field.field_info.annotation, field.field_info]
        adapter: TypeAdapter[Any] = TypeAdapter(annotated)

        async def threaded(request: Request) -> Response:
            body = await request.body()
            if body and _is_json(request):
                # Starlette's Request.json() returns this cached value: FastAPI then sees
                # the validated model, which it accepts without validating it again.
                request._json = await anyio.to_thread.run_sync(
                    parse_body, adapter, body, limiter=_parse_limiter(request))
            return await handler(request)

        return threaded
