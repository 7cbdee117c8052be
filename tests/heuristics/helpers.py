"""Shared builders for the heuristics tests."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from benchmarks.generator import generate_custom
from heuristics.greedy import plan_greedy
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


def crowded(gpus: int, jobs: int, seed: int, objective: str, **kw: Any) -> PlanRequest:
    """More demand than GPUs (many fit keys fill up), tight host CPU and memory, small
    gangs that may span nodes, the policy's `objective` and `seed`; `kw`:
    `generate_custom`'s (elastic gangs, topology). Not validated again."""
    rng = random.Random(seed)
    req = generate_custom(gpus, jobs, seed=seed, **kw)
    nodes = [n.model_copy(update={"cpu_millicores": rng.choice((16000.0, 40000.0, None)),
                                  "memory_gib": rng.choice((64.0, 512.0))})
             for n in req.cluster.nodes]
    out = []
    for j in req.jobs:
        update: dict[str, object] = {"cpu_millicores": rng.choice((None, 2000.0, 6000.0)),
                                     "host_memory_gib": rng.choice((None, 8.0, 40.0))}
        if j.gpus in (2, 4) and j.elastic is None and rng.random() < 0.5:
            update["single_node"] = False
        out.append(j.model_copy(update=update))
    policy = req.policy.model_copy(update={"objective": objective, "seed": seed})
    return req.model_copy(update={"policy": policy, "jobs": out, "cluster": req.cluster.model_copy(
        update={"nodes": nodes})})


def same_passes(request: PlanRequest, passes: Sequence[dict[str, Any]],
                reference: Callable[[pytest.MonkeyPatch], None],
                monkeypatch: pytest.MonkeyPatch) -> list[HeuristicResult]:
    """`plan_greedy` on `request` with each keyword set of `passes`, asserted to make
    exactly the placements and give exactly the reasons of the same passes with
    `reference` patched in (the simpler code a speed-up must agree with); the results
    without it."""
    got = [plan_greedy(request, **kw) for kw in passes]
    with monkeypatch.context() as m:
        reference(m)
        want = [plan_greedy(request, **kw) for kw in passes]
    for a, b in zip(got, want, strict=True):
        assert a.placements == b.placements
        assert a.reasons == b.reasons
    return got
