"""The bound of each lexicographic level (solver/level_bound.py): at least the brute-forced
lexicographic optimum's value there, from a good plan or a poor one, and at least every
plan's that keeps the levels above at the plan's values (tiny random instances enumerated
by brute force, with topology levels, unusable GPUs and running jobs: the domain and
usable rows); a level below an unproven one is not held; the bounds in `stats.levels`."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import Placement, PlanRequest
from models.objective import level_values
from solver import plan
from solver.level_bound import level_bounds
from solver.level_report import level_gap
from tests.solver.brute import _plans, _within_limits, levels_key
from tests.solver.strategies import random_levels_request


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_each_level_bound_holds_over_every_plan_as_good_above(seed: int) -> None:
    rng = random.Random(seed)
    # topology levels half of the time: the bound's domain rows (required levels)
    req = random_levels_request(rng, objective=rng.choice(["throughput", "jct"]),
                                solver="heuristic", topology=rng.random() < 0.5)
    feasible = [c for c in _plans(req) if _within_limits(req, c)]
    # the planner's plan, or half of the time any plan (a poor one: levels not proven)
    start = ({a.job: a.placements for a in plan(req).assignments} if rng.random() < 0.5
             else rng.choice(feasible))
    ref = level_values(req, start)
    bounds = level_bounds(req, start, time_limit_s=5.0)
    assert len(bounds) == len(ref)
    assert all(b is not None for b in bounds), bounds
    optimum = level_values(req, max(feasible, key=lambda c: levels_key(req, c)))
    for (name, v), b in zip(optimum, bounds, strict=True):
        assert b is not None and v <= b + 1e-6 * (1 + abs(b)), (seed, name, v, b)
    for chosen in feasible:
        got = level_values(req, chosen)
        for i, ((name, v), b) in enumerate(zip(got, bounds, strict=True)):
            assert b is not None and v <= b + 1e-6 * (1 + abs(b)), (seed, name, v, b)
            if v < ref[i][1] - 1e-9:
                break  # below the plan at this level: the lower bounds do not apply


def test_stats_levels_carry_the_bounds() -> None:
    req = random_levels_request(random.Random(7), objective="throughput", solver="cp_sat")
    out = plan(req.model_copy(update={"policy": req.policy.model_copy(
        update={"time_limit_s": 20.0})}))
    levels = out.stats.model_dump()["levels"]
    assert levels and all("bound" in item for item in levels)
    # the top level of a proven lexicographic optimum meets its bound up to the LP's
    # rounding: no plan serves more guarantee (or places more of the top class's value)
    assert out.status == "optimal"
    top = levels[0]
    assert top["value"] <= top["bound"] + 1e-6


def test_a_gang_of_a_required_level_counts_only_where_a_domain_holds_it() -> None:
    # Racks r1 (two 2-GPU nodes) and r2 (one 2-GPU node); two 3-GPU gangs that must keep
    # to one rack, g1 of class 1, g0 of class 0. Only r1 holds one: the best plan places
    # g1 (worth 3) and g0 nowhere. The pooled GPUs (6) would hold both; the domain rows
    # count one gang of 3 in r1 and none in r2, so class 0's bound given class 1 at 3 is 0.
    v100 = "V100-32GB"
    nodes = [{"name": n, "gpus": [{"index": i, "model": v100} for i in range(2)],
              "topology": {"rack": r}} for n, r in (("n0", "r1"), ("n1", "r1"), ("n2", "r2"))]
    jobs = [{"name": f"g{p}", "gpus": 3, "single_node": False, "priority": p,
             "topology": {"required": "rack"}, "throughput": {v100: 1.0}} for p in (1, 0)]
    req = PlanRequest.model_validate({
        "cluster": {"nodes": nodes, "topology_levels": ["rack"]}, "jobs": jobs,
        "policy": {"objective": "throughput"}})
    best = {"g1": [Placement(node=n, gpu=g) for n in ("n0", "n1") for g in range(2)][:3]}
    assert level_values(req, best) == [("priority 1", 3.0), ("priority 0", 0.0)]
    bounds = level_bounds(req, best, time_limit_s=5.0)
    assert bounds[0] is not None and bounds[1] is not None
    assert bounds[0] == pytest.approx(3.0, abs=1e-4)
    assert bounds[1] == pytest.approx(0.0, abs=1e-4)


def _one_node_three_classes() -> PlanRequest:
    """One node of two V100s; `a` (class 2, one GPU, worth 1), `b` (class 1, a gang of
    two, worth 2 x 5) and `c` (class 0, one GPU, worth 3). The lexicographic optimum
    places a and c: levels (1, 0, 3)."""
    v100 = "V100-32GB"
    jobs = [{"name": n, "gpus": g, "priority": p, "throughput": {v100: t}}
            for n, g, p, t in (("a", 1, 2, 1.0), ("b", 2, 1, 5.0), ("c", 1, 0, 3.0))]
    return PlanRequest.model_validate({
        "cluster": {"nodes": [{"name": "n0", "gpus": [{"index": i, "model": v100}
                                                      for i in range(2)]}]},
        "jobs": jobs, "policy": {"objective": "throughput"}})


def test_a_level_below_an_unproven_one_is_not_held() -> None:
    # The plan placing only b is (0, 10, 0): class 2 is below its bound (1), so the
    # optimum may be above the plan there and below it at class 1; holding class 1 at 10
    # would bound class 0 by 0, below the optimum's 3.
    req = _one_node_three_classes()
    only_b = {"b": [Placement(node="n0", gpu=g) for g in range(2)]}
    assert level_values(req, only_b) == [("priority 2", 0.0), ("priority 1", 10.0),
                                         ("priority 0", 0.0)]
    bounds = level_bounds(req, only_b, time_limit_s=5.0)
    assert bounds[0] == pytest.approx(1.0, abs=1e-4)
    assert bounds[2] is not None and bounds[2] >= 3.0 - 1e-6


def test_proven_levels_are_held_and_the_bounds_meet_the_optimum() -> None:
    # From the optimum (a and c): class 2 meets its bound 1, so class 1 is bounded given
    # a placed (the gang's integral count: 0), and class 0 given both: 3, the optimum's.
    req = _one_node_three_classes()
    best = {"a": [Placement(node="n0", gpu=0)], "c": [Placement(node="n0", gpu=1)]}
    assert level_values(req, best) == [("priority 2", 1.0), ("priority 1", 0.0),
                                       ("priority 0", 3.0)]
    bounds = level_bounds(req, best, time_limit_s=5.0)
    assert [pytest.approx(b, abs=1e-4) for b in bounds] == [1.0, 0.0, 3.0]


def test_the_gap_of_a_level_is_relative_to_its_range_from_placing_none() -> None:
    # Three 1-GPU nodes, each running a class-0 job worth 1 that costs 1 to stop: with
    # none of them placed class 0 is at -3. Two class-1 jobs take two nodes: the optimum
    # keeps one running job, class 0 at 1 - 2 = -1, which is also its bound once class 1
    # is proven. A plan at -1 against a bound of 1 is half way: (1 - (-1)) / (1 - (-3)),
    # where a gap relative to the bound or the value alone would say 200%.
    v100 = "V100-32GB"
    nodes = [{"name": f"n{i}", "gpus": [{"index": 0, "model": v100}]} for i in range(3)]
    jobs = [{"name": f"r{i}", "gpus": 1, "throughput": {v100: 1.0},
             "current": [{"node": f"n{i}", "gpu": 0}]} for i in range(3)]
    jobs += [{"name": f"hi{i}", "gpus": 1, "priority": 1, "throughput": {v100: 1.0}}
             for i in (1, 2)]
    req = PlanRequest.model_validate({
        "cluster": {"nodes": nodes}, "jobs": jobs,
        "policy": {"objective": "throughput", "preemption_cost": 1.0}})
    best = {"r0": [Placement(node="n0", gpu=0)], "hi1": [Placement(node="n1", gpu=0)],
            "hi2": [Placement(node="n2", gpu=0)]}
    assert level_values(req, best) == [("priority 1", 2.0), ("priority 0", -1.0)]
    assert level_values(req, {}) == [("priority 1", 0.0), ("priority 0", -3.0)]
    bounds = level_bounds(req, best, time_limit_s=5.0)
    assert bounds[0] == pytest.approx(2.0, abs=1e-4)
    assert bounds[1] == pytest.approx(-1.0, abs=1e-4)
    assert level_gap(-1.0, 1.0, -3.0) == pytest.approx(0.5)
    assert level_gap(-3.0, -1.0, -3.0) == pytest.approx(1.0)  # nothing of the range
    assert level_gap(-1.0, bounds[1], -3.0) == pytest.approx(0.0, abs=1e-4)
