"""Shared helpers of the foundation tests: example paths and JSON loading."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from models import Plan, PlanRequest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PLANS = EXAMPLES / "plans"


def request_path(stem: str) -> Path:
    """The request a fixture's stem names: examples/<stem> or examples/plans/<stem>."""
    top = EXAMPLES / f"{stem}.request.json"
    return top if top.exists() else PLANS / f"{stem}.request.json"


def load_json(path: Path) -> Any:
    """Parse a JSON file."""
    return json.loads(path.read_text())


def request_dict(stem: str) -> dict[str, Any]:
    """A fresh, mutable copy of a request's JSON."""
    return copy.deepcopy(load_json(request_path(stem)))


def plan_dict(name: str) -> dict[str, Any]:
    """A fresh, mutable copy of examples/plans/<name>.plan.json."""
    return copy.deepcopy(load_json(PLANS / f"{name}.plan.json"))


def as_request(data: dict[str, Any]) -> PlanRequest:
    """Validate a request dict."""
    return PlanRequest.model_validate(data)


def as_plan(data: dict[str, Any]) -> Plan:
    """Validate a plan dict."""
    return Plan.model_validate(data)
