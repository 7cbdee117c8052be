"""Shared builders for the heuristics tests."""

from __future__ import annotations

from typing import Any

from heuristics.result import HeuristicResult
from models import PlanRequest
from solver.build import build_plan
from solver.validate import validate_plan


def violations(request: PlanRequest, result: HeuristicResult) -> list[str]:
    """Validator messages for `result` dressed as a heuristic plan."""
    plan = build_plan(request, result, status="heuristic", solver="greedy")
    return [f"[{v.rule}] {v.message}" for v in validate_plan(request, plan)]


def node(name: str, model: str, n: int = 8, **kw: Any) -> dict[str, Any]:
    """A node dict with `n` GPUs of `model`."""
    gpus = [{"index": i, "model": model} for i in range(n)]
    return {"name": name, "gpus": gpus, **kw}


def request(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]],
            **policy: Any) -> PlanRequest:
    """A validated PlanRequest."""
    return PlanRequest.model_validate({"cluster": {"nodes": nodes}, "jobs": jobs,
                                       "policy": policy})
