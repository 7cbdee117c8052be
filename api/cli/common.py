"""Helpers shared by the CLI commands: reading inputs and failing with one clear line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from api.cli.group import echo_error
from models import Plan, PlanRequest
from models.wire import WireJSONError, load_wire_json

M = TypeVar("M", bound=BaseModel)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one line on stderr and exit with `code` (2 = bad input or arguments)."""
    echo_error(message)
    raise typer.Exit(code)


def format_validation_error(err: ValidationError, limit: int = 3) -> str:
    """A one-line summary of a pydantic error: `path: message; ...`."""
    parts = []
    for e in err.errors()[:limit]:
        loc = ".".join(str(x) for x in e["loc"]) or "(root)"
        parts.append(f"{loc}: {e['msg']}")
    more = len(err.errors()) - limit
    if more > 0:
        parts.append(f"(+{more} more)")
    return "; ".join(parts)


def read_json(path: Path | str) -> object:
    """Parse a JSON file ('-' = stdin); exit 2 with one line when it cannot be read."""
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror or e}")
    try:
        return load_wire_json(text)
    except WireJSONError as e:
        first = e.problems[0]
        # A parse error's location is a character offset, already in its message.
        fail(f"{path}: invalid JSON: {first.msg if first.type == 'json_invalid' else e}")


def load_model(path: Path | str, model: type[M]) -> M:
    """Read and validate a JSON file as `model`; exit 2 with the field path on failure."""
    data = read_json(path)
    try:
        # Strict JSON validation, as the service's: a string is no boolean or number here
        # either (strict Python validation would also refuse JSON arrays for tuples).
        return model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as e:
        fail(f"{path}: {format_validation_error(e)}")
    except RecursionError:
        fail(f"{path}: JSON nested too deeply to read")


def load_request(path: Path | str) -> PlanRequest:
    """Read a PlanRequest file (exit 2 on unreadable or invalid input)."""
    return load_model(path, PlanRequest)


def load_plan(path: Path | str) -> Plan:
    """Read a Plan file (exit 2 on unreadable or invalid input)."""
    return load_model(path, Plan)
