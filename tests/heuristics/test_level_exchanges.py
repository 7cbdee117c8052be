"""The level exchanges of heuristics/levels.py (`restore_running`, `raise_classes`,
`upgrade_classes`, `refill_classes`, `return_running`, `improve_levels`, and
heuristics/level_repack.py's `repack_classes`): hand-made cases
whose best plans are worked out by hand, and on random tiny requests with quotas, classes
and topology levels, that no step lowers the plan lexicographically and that
`improve_levels` adds no violation."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heuristics.greedy import plan_greedy
from heuristics.level_repack import repack_classes
from heuristics.levels import (
    improve_levels,
    raise_classes,
    refill_classes,
    restore_running,
    return_running,
    settle_levels,
    upgrade_classes,
)
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.objective import level_key, level_values
from models.reasons import INSUFFICIENT
from tests.heuristics.helpers import node, violations
from tests.solver.strategies import random_levels_request

V100 = "V100-32GB"


def _request(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]],
             quotas: dict[str, Any] | None = None) -> PlanRequest:
    return PlanRequest.model_validate({
        "cluster": {"nodes": nodes, "quotas": quotas or {}}, "jobs": jobs,
        "policy": {"objective": "throughput"}})


def _on(node_name: str, gpus: range) -> list[Placement]:
    return [Placement(node=node_name, gpu=g) for g in gpus]


def test_refill_trades_a_gang_for_denser_jobs_of_a_tenant_at_its_limit() -> None:
    # Tenant a may use 4 GPUs (guaranteed and limited to 4) of two 4-GPU nodes. The plan
    # holds a's 4-GPU gang (speed 1: worth 4); a's four 1-GPU jobs run at speed 2 (worth
    # 2 each) but a's limit leaves them no room. Best by hand: the four small jobs (8),
    # the gang out.
    small = [{"name": f"s{i}", "tenant": "a", "gpus": 1, "throughput": {V100: 2.0}}
             for i in range(4)]
    gang = {"name": "gang", "tenant": "a", "gpus": 4, "single_node": True,
            "throughput": {V100: 1.0}}
    req = _request([node("n0", V100, 4), node("n1", V100, 4)], [gang, *small],
                   {"a": {"guaranteed": {"*": 4}, "limit": {"*": 4}}})
    start = HeuristicResult({"gang": _on("n0", range(4))}, {})
    assert violations(req, start) == []
    out = refill_classes(req, start)
    assert violations(req, out) == []
    assert "gang" not in out.placements
    assert all(out.placements.get(f"s{i}") for i in range(4))
    assert level_values(req, out.placements) == [("quota", 4.0), ("priority 0", 8.0)]


def test_restore_keeps_a_running_gang_worth_more_than_the_jobs_on_its_quota() -> None:
    # a (guaranteed and limited to 4) runs a 4-GPU gang at speed 3 (worth 12) on n0; the
    # plan stopped it (preemption cost 1) for four new 1-GPU jobs of a at speed 1 on n0
    # (worth 4): a's limit holds either. Best by hand: the gang kept, worth 12, the four
    # left out.
    small = [{"name": f"s{i}", "tenant": "a", "gpus": 1, "throughput": {V100: 1.0}}
             for i in range(4)]
    gang = {"name": "gang", "tenant": "a", "gpus": 4, "single_node": True,
            "throughput": {V100: 3.0}, "current": [{"node": "n0", "gpu": g} for g in range(4)]}
    req = _request([node("n0", V100, 4), node("n1", V100, 4)], [gang, *small],
                   {"a": {"guaranteed": {"*": 4}, "limit": {"*": 4}}})
    start = HeuristicResult({f"s{i}": _on("n0", range(i, i + 1)) for i in range(4)}, {})
    assert level_values(req, start.placements) == [("quota", 4.0), ("priority 0", 3.0)]
    out = restore_running(req, start)
    assert violations(req, out) == []
    assert out.placements["gang"] == _on("n0", range(4))
    assert level_values(req, out.placements) == [("quota", 4.0), ("priority 0", 12.0)]


def test_restore_takes_a_moved_running_job_back_to_its_gpu() -> None:
    # Two GPUs of one node. The plan moved running job r (gpu 0 -> gpu 1: migration cost
    # 0.5) and put new job n on gpu 0. Best by hand: r stays on gpu 0, n on gpu 1, both
    # worth 1, no migration: 2.0 instead of 1.5.
    r = {"name": "r", "tenant": "a", "gpus": 1, "throughput": {V100: 1.0},
         "current": [{"node": "n0", "gpu": 0}]}
    n = {"name": "n", "tenant": "a", "gpus": 1, "throughput": {V100: 1.0}}
    req = _request([node("n0", V100, 2)], [r, n], {"a": {"guaranteed": {"*": 1}}})
    start = HeuristicResult({"r": _on("n0", range(1, 2)), "n": _on("n0", range(1))}, {})
    assert level_values(req, start.placements) == [("quota", 1.0), ("priority 0", 1.5)]
    out = restore_running(req, start)
    assert violations(req, out) == []
    assert out.placements["r"] == _on("n0", range(1))
    assert out.placements["n"] == _on("n0", range(1, 2))
    assert level_values(req, out.placements) == [("quota", 1.0), ("priority 0", 2.0)]


def test_return_puts_a_moved_running_share_back_on_its_gpu() -> None:
    # Two GPUs of one node. Running share r (half a GPU, worth 0.5) was moved from gpu 0
    # to gpu 1 (migration cost 0.5: worth 0 there) and new 1-GPU job n took gpu 0 (worth
    # 1). Best by hand: r back on gpu 0, n on gpu 1: 1.5 instead of 1.0.
    r = {"name": "r", "tenant": "a", "gpu_share": 0.5, "throughput": {V100: 1.0},
         "current": [{"node": "n0", "gpu": 0, "fraction": 0.5}]}
    n = {"name": "n", "tenant": "a", "gpus": 1, "throughput": {V100: 1.0}}
    req = _request([node("n0", V100, 2)], [r, n], {"a": {"guaranteed": {"*": 1}}})
    start = HeuristicResult({"r": [Placement(node="n0", gpu=1, fraction=0.5)],
                             "n": _on("n0", range(1))}, {})
    assert violations(req, start) == []
    assert level_values(req, start.placements) == [("quota", 1.0), ("priority 0", 1.0)]
    out = return_running(req, start)
    assert violations(req, out) == []
    assert out.placements["r"] == [Placement(node="n0", gpu=0, fraction=0.5)]
    assert out.placements["n"] == _on("n0", range(1, 2))
    assert level_values(req, out.placements) == [("quota", 1.0), ("priority 0", 1.5)]


def test_raise_places_a_higher_class_job_on_lower_class_gpus() -> None:
    # One 2-GPU node, full with a class-0 2-GPU job (worth 2). A class-100 1-GPU job
    # (worth 1) is out. Best by hand: class 100 first, so its job in; the class-0 job no
    # longer fits.
    low = {"name": "low", "gpus": 2, "single_node": True, "throughput": {V100: 1.0}}
    high = {"name": "high", "gpus": 1, "priority": 100, "throughput": {V100: 1.0}}
    req = _request([node("n0", V100, 2)], [low, high])
    start = HeuristicResult({"low": _on("n0", range(2))}, {})
    out = raise_classes(req, start)
    assert violations(req, out) == []
    assert out.placements.get("high") and "low" not in out.placements
    assert level_values(req, out.placements) == [("priority 100", 1.0), ("priority 0", 0.0)]
    assert out.reasons["low"][0] == "lower_priority"


def test_upgrade_swaps_a_gang_onto_the_model_where_it_gains_most() -> None:
    # One 2-GPU A100 node, one 2-GPU V100 node. Class 100: a 2-GPU gang worth 2 on V100
    # and 6 on A100, two 1-GPU jobs worth 1 on V100 and 1.5 on A100; the plan has the
    # small jobs on A100 (3) and the gang on V100 (2): 5. Best by hand: the gang on A100,
    # the small jobs on V100: 8. A class-0 job has no room in either plan.
    a100 = "A100-SXM4-80GB"
    gang = {"name": "gang", "gpus": 2, "single_node": True, "priority": 100,
            "throughput": {V100: 1.0, a100: 3.0}}
    small = [{"name": f"s{i}", "gpus": 1, "priority": 100,
              "throughput": {V100: 1.0, a100: 1.5}} for i in range(2)]
    low = {"name": "low", "gpus": 1, "throughput": {V100: 1.0}}
    req = _request([node("fast", a100, 2), node("slow", V100, 2)], [gang, *small, low])
    start = HeuristicResult({"gang": _on("slow", range(2)), "s0": _on("fast", range(1)),
                             "s1": _on("fast", range(1, 2))}, {})
    assert level_values(req, start.placements) == [("priority 100", 5.0), ("priority 0", 0.0)]
    out = upgrade_classes(req, start)
    assert violations(req, out) == []
    assert out.placements["gang"] == _on("fast", range(2))
    assert level_values(req, out.placements) == [("priority 100", 8.0), ("priority 0", 0.0)]


def test_a_guarantee_is_never_traded_for_a_class() -> None:
    # As above, but the class-0 job is b's and b is guaranteed 2: placing the class-100
    # job (of tenant c, no guarantee) would serve less guarantee, the first level.
    low = {"name": "low", "tenant": "b", "gpus": 2, "single_node": True,
           "throughput": {V100: 1.0}}
    high = {"name": "high", "tenant": "c", "gpus": 1, "priority": 100,
            "throughput": {V100: 1.0}}
    req = _request([node("n0", V100, 2)], [low, high], {"b": {"guaranteed": {"*": 2}}})
    start = HeuristicResult({"low": _on("n0", range(2))}, {})
    assert raise_classes(req, start) is start
    assert improve_levels(req, start) is start


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_each_exchange_keeps_the_plan_valid_and_never_lowers_it(seed: int) -> None:
    rng = random.Random(seed)
    req = random_levels_request(rng, objective=rng.choice(["throughput", "jct"]),
                                solver="heuristic")
    greedy = settle_levels(req, plan_greedy(req, seed=rng.choice([None, 0, 1]),
                                            keep_running=rng.choice([False, True])))
    # a poorer start, with room for the exchanges: the greedy plan less some of its jobs
    kept = {n: p for n, p in greedy.placements.items() if rng.random() > 0.4}
    start = HeuristicResult(kept, {j.name: greedy.reasons.get(j.name, INSUFFICIENT)
                                   for j in req.jobs if j.name not in kept})
    # such a plan (and a greedy one) may stop a running job that must run (the driver
    # then asks CP-SAT): the steps must add no violation of their own
    known = set(violations(req, start))
    before = level_key(req, start.placements)
    for step in (restore_running, raise_classes, upgrade_classes, refill_classes,
                 return_running, repack_classes, improve_levels):
        out = step(req, start)
        assert level_key(req, out.placements) >= before, (seed, step.__name__)
        assert all(j.name in out.placements or j.name in out.reasons for j in req.jobs)
    # a single step may put lower-class work on the GPUs of a stopped higher-class
    # running job; improve_levels ends with restore_displaced, which keeps that job
    assert set(violations(req, out)) <= known, seed
