"""Request bodies parsed and validated off the event loop, with wire-safe values only.

FastAPI reads and validates a JSON body on the event loop, inside the coroutine that serves
the request: a few dozen large bodies at once then hold up every other request (`/healthz`
included). `ThreadedBodyRoute` does both steps in the thread pool first and hands FastAPI the
validated model (which it accepts as is), so the loop only moves bytes. Validation is
strict JSON validation, so what the OpenAPI schema calls a boolean or an integer is one.

On the way it refuses what Python's JSON parser accepts but the wire contract does not
(models/wire.py): `NaN`, `Infinity`, numbers so large they become infinite, and lone UTF-16
surrogates. Each is a 422 at its own field path, like any other validation error; a body
nested too deeply to parse, or not text at all, is a 422 at `body`.
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from models.wire import WireJSONError, WireProblem, load_wire_json


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


def _unprocessable(problems: list[WireProblem]) -> RequestValidationError:
    return RequestValidationError([{"type": p.type, "loc": ("body", *p.loc), "msg": p.msg,
                                    "input": None} for p in problems])


def parse_body(adapter: TypeAdapter[Any], body: bytes) -> Any:
    """Parse `body` as JSON and validate it with `adapter`, strictly (blocking).

    Strict JSON validation takes JSON types at their word, as the OpenAPI schema documents
    them: `true` and not `"yes"` or `1` for a boolean, `2` and not `"2"` for an integer.
    Returns the validated value; raises RequestValidationError (answered 422) with the
    field path of every problem.
    """
    try:
        load_wire_json(body)
    except WireJSONError as e:
        raise _unprocessable(e.problems) from None
    try:
        return adapter.validate_json(body, strict=True)
    except ValidationError as e:
        raise RequestValidationError(
            [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        ) from None
    except RecursionError:
        raise _unprocessable([WireProblem((), "json_invalid", "JSON nested too deeply")]
                             ) from None


class ThreadedBodyRoute(APIRoute):
    """An APIRoute whose single JSON body is parsed and validated in the thread pool."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, preceded by the threaded parse (routes with one body only)."""
        handler = super().get_route_handler()
        field = self.body_field
        if field is None or self._embed_body_fields:
            return handler
        adapter: TypeAdapter[Any] = TypeAdapter(
            Annotated[field.field_info.annotation, field.field_info])

        async def threaded(request: Request) -> Response:
            body = await request.body()
            if body and _is_json(request):
                # Starlette's Request.json() returns this cached value: FastAPI then sees
                # the validated model, which it accepts without validating it again.
                request._json = await run_in_threadpool(parse_body, adapter, body)
            return await handler(request)

        return threaded
