"""The bound of each lexicographic level given the levels above it held at a plan's values
(solver/level_bound.py), against every plan of tiny random instances enumerated by brute
force (with topology levels, unusable GPUs and running jobs: the domain and usable rows),
and in the plans' `stats.levels`."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import Placement, PlanRequest
from models.objective import level_values
from solver import plan
from solver.level_bound import level_bounds
from tests.solver.brute import _plans, _within_limits
from tests.solver.strategies import random_levels_request


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_each_level_bound_holds_over_every_plan_as_good_above(seed: int) -> None:
    rng = random.Random(seed)
    # topology levels half of the time: the bound's domain rows (required levels)
    req = random_levels_request(rng, objective=rng.choice(["throughput", "jct"]),
                                solver="heuristic", topology=rng.random() < 0.5)
    start = {a.job: a.placements for a in plan(req).assignments}  # a valid plan
    ref = level_values(req, start)
    bounds = level_bounds(req, start, time_limit_s=5.0)
    assert len(bounds) == len(ref)
    assert all(b is not None for b in bounds), bounds
    for chosen in _plans(req):
        if not _within_limits(req, chosen):
            continue
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
