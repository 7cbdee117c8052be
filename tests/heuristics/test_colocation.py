"""Co-location interference (contract 5.2) in the heuristics: the greedy avoids a bad pair,
local search and the share re-pack keep plans valid and never worse, every planner on
random interference requests returns valid plans, and a GPU with too many patterns falls
back to the heuristics."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from models import PlanRequest
from models.objective import evaluate
from solver import plan
from solver.auto import moves
from solver.build import build_plan
from solver.formulation import compile_request
from solver.formulation.patterns import PatternsTooMany
from solver.share_packing import repack
from solver.validate import validate_plan
from tests.solver.strategies import random_request


def _request(jobs: list[dict[str, Any]], pairs: list[tuple[str, str, float]], gpus: int,
             solver: str = "heuristic") -> PlanRequest:
    return PlanRequest.model_validate({
        "cluster": {"nodes": [{"name": "n", "gpus": [
            {"index": i, "model": "A100-SXM4-40GB"} for i in range(gpus)]}]},
        "jobs": jobs,
        "interference": [{"a": a, "b": b, "speed": s} for a, b, s in pairs],
        "policy": {"solver": solver, "time_limit_s": 5, "seed": 1}})


def test_greedy_pairs_the_friendly_classes() -> None:
    # A and B ruin each other (0.1); A with A and B with B are fine. Blind best fit would
    # put the second job beside the first, whatever its class.
    jobs = [{"name": n, "gpu_share": 0.5, "colocation_class": c}
            for n, c in (("a1", "A"), ("b1", "B"), ("a2", "A"), ("b2", "B"))]
    req = _request(jobs, [("A", "B", 0.1), ("B", "A", 0.1)], gpus=2)
    res = plan_greedy(req)
    gpu = {n: pls[0].gpu for n, pls in res.placements.items()}
    assert len(gpu) == 4
    assert gpu["a1"] == gpu["a2"] != gpu["b1"] == gpu["b2"]
    assert evaluate(req, res.placements).interference_loss == 0.0


def test_greedy_leaves_out_a_job_that_only_destroys_value() -> None:
    # One GPU holding a heavy job; a light job beside it would cut the heavy one to 1%.
    jobs = [{"name": "heavy", "gpu_share": 0.5, "colocation_class": "H", "weight": 10},
            {"name": "light", "gpu_share": 0.5, "colocation_class": "L"}]
    req = _request(jobs, [("H", "L", 0.01)], gpus=1)
    res = plan_greedy(req)
    assert set(res.placements) == {"heavy"}
    assert res.reasons["light"][0] == "insufficient_capacity"


def test_local_search_and_repack_never_worse_and_valid() -> None:
    """The local search makes the moves the planners give a request this size
    (`solver.auto.moves`: 300-700 here; a 0.5 s deadline made 600-40,000, as the machine's
    load allowed, in 0.5 s of wall time each whatever the CPU did)."""
    for seed in range(25):
        req = random_request(random.Random(seed), interference=True, max_gpus=8,
                             max_jobs=14, max_nodes=3, solver="heuristic")
        start = plan_greedy(req)
        before = evaluate(req, start.placements).objective_value
        better = improve(req, start, deadline=float("inf"), seed=seed, max_moves=moves(req))
        assert evaluate(req, better.placements).objective_value >= before - 1e-9
        packed = repack(req, better, time.monotonic() + 2)
        for res in (better, packed):
            if res is not None:
                built = build_plan(req, res, status="heuristic", solver="test")
                assert validate_plan(req, built) == []


@pytest.mark.parametrize("solver", ["heuristic", "auto", "cp_sat", "milp"])
def test_every_planner_valid_with_interference(solver: str) -> None:
    for seed in range(8):
        req = random_request(random.Random(700 + seed), interference=True, max_gpus=12,
                             max_jobs=20, max_nodes=3, solver=solver)
        req.policy.time_limit_s = 3
        p = plan(req)
        assert validate_plan(req, p) == [], (seed, solver)
        assert p.solve_time_s < 3 + 30  # the time limit holds (generous on a loaded box)


@pytest.mark.parametrize("solver", ["cp_sat", "milp"])
def test_too_many_patterns_fall_back_to_a_valid_plan(solver: str) -> None:
    # Twelve classes of 1%-shares: far more class mixes per GPU than the exact model lists.
    jobs = [{"name": f"j{k}", "gpu_share": 0.01, "colocation_class": f"c{k % 12}"}
            for k in range(240)]
    pairs = [(f"c{a}", f"c{b}", 0.99) for a in range(12) for b in range(12)]
    req = _request(jobs, pairs, gpus=2, solver=solver)
    with pytest.raises(PatternsTooMany):
        compile_request(req)
    p = plan(req)
    assert validate_plan(req, p) == []
    assert p.status == "heuristic"
    assert p.explanation


def test_pattern_cap_counts_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # Four GPUs with three classes of half shares: a few patterns per GPU, more over all
    # of them. The cap on the model's total refuses the model although no GPU alone
    # exceeds it, and a model at the cap compiles with every pattern.
    import solver.formulation.variables as variables

    jobs = [{"name": f"j{k}", "gpu_share": 0.5, "colocation_class": f"c{k % 3}"}
            for k in range(6)]
    pairs = [("c0", "c1", 0.5), ("c1", "c2", 0.8), ("c2", "c0", 0.9)]
    req = _request(jobs, pairs, gpus=4, solver="cp_sat")
    total = len(compile_request(req).patterns)
    per_gpu = total // 4
    assert per_gpu > 1
    monkeypatch.setattr(variables, "MAX_MODEL_PATTERNS", total - 1)
    with pytest.raises(PatternsTooMany):
        compile_request(req)
    monkeypatch.setattr(variables, "MAX_MODEL_PATTERNS", total)
    assert len(compile_request(req).patterns) == total
