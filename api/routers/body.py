"""Request bodies parsed and validated off the event loop, with wire-safe values only.

FastAPI reads and validates a JSON body on the event loop, inside the coroutine that serves
the request: a few dozen large bodies at once then hold up every other request (`/healthz`
included). `ThreadedBodyRoute` does both steps in the thread pool first and hands FastAPI the
validated model (which it accepts as is), so the loop only moves bytes. Validation is
strict JSON validation, so what the OpenAPI schema calls a boolean or an integer is one.

On the way it refuses what JSON parsers accept but a wire contract must not: `NaN` and
`Infinity` (and numbers so large they become infinite, such as `1e400`), and strings or
object keys holding lone UTF-16 surrogates (`"\\ud800"`), which no UTF-8 answer could
carry. Each is a 422 at its own field path, like any other validation error; a body nested
too deeply to parse is a 422 at `body`.
"""

from __future__ import annotations

import email.message
import json
import math
from collections.abc import Callable, Coroutine, Iterator
from typing import Annotated, Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

Loc = tuple[str | int, ...]


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


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def non_wire_values(data: object) -> Iterator[tuple[Loc, str, str]]:
    """(path, error type, message) of every non-finite number and every string or key that
    is not valid Unicode (lone surrogates) in parsed JSON; iterative, so any depth is fine."""
    stack: list[tuple[Loc, object]] = [((), data)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            yield loc, "finite_number", "Input should be a finite number"
        elif isinstance(value, str) and not _encodable(value):
            yield loc, "string_unicode", "Input should be valid Unicode (no lone surrogates)"
        elif isinstance(value, dict):
            for key, item in value.items():
                if not _encodable(key):
                    safe = key.encode("utf-8", "backslashreplace").decode("utf-8")
                    yield ((*loc, safe), "string_unicode",
                           "Object keys should be valid Unicode (no lone surrogates)")
                    continue
                stack.append(((*loc, key), item))
        elif isinstance(value, list):
            stack.extend(((*loc, i), item) for i, item in enumerate(value))


def _invalid_json(msg: str, loc: Loc = ("body",)) -> RequestValidationError:
    return RequestValidationError([{"type": "json_invalid", "loc": loc, "msg": msg,
                                    "input": None}])


def parse_body(adapter: TypeAdapter[Any], body: bytes) -> Any:
    """Parse `body` as JSON and validate it with `adapter`, strictly (blocking).

    Strict JSON validation takes JSON types at their word, as the OpenAPI schema documents
    them: `true` and not `"yes"` or `1` for a boolean, `2` and not `"2"` for an integer.
    Returns the validated value; raises RequestValidationError (answered 422) with the
    field path of every problem.
    """
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise _invalid_json(f"JSON decode error: {e.msg} at line {e.lineno} column {e.colno}",
                            ("body", e.pos)) from None
    except RecursionError:
        raise _invalid_json("JSON nested too deeply") from None
    except ValueError as e:  # not UTF-8/16/32, or an integer with too many digits
        raise _invalid_json(f"body is not decodable JSON ({type(e).__name__})") from None
    bad = [{"type": kind, "loc": ("body", *loc), "msg": msg, "input": None}
           for loc, kind, msg in non_wire_values(data)]
    if bad:
        raise RequestValidationError(bad)
    del data
    try:
        return adapter.validate_json(body, strict=True)
    except ValidationError as e:
        raise RequestValidationError(
            [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        ) from None
    except RecursionError:
        raise _invalid_json("JSON nested too deeply") from None


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
