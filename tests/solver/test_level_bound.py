"""The bound of each lexicographic level given the levels above it held at a plan's values
(solver/level_bound.py), against every plan of tiny random instances enumerated by brute
force (with topology levels, unusable GPUs and running jobs: the domain and usable rows),
and in the plans' `stats.levels`."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
