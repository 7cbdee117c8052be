"""`solver.level_bound.held_bound`: a level's LP with given values held above it bounds
that level over every plan that reaches them (tiny random instances enumerated by brute
force), and holding more never raises it."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.objective import level_values
from solver.level_bound import held_bound
from tests.solver.brute import _plans, _within_limits
from tests.solver.strategies import random_levels_request


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_held_bound_holds_over_every_plan_reaching_the_held_values(seed: int) -> None:
    rng = random.Random(seed)
    req = random_levels_request(rng, objective=rng.choice(["throughput", "jct"]),
                                solver="heuristic", topology=rng.random() < 0.5)
    feasible = [c for c in _plans(req) if _within_limits(req, c)]
    if not feasible:
        return  # running jobs that cannot all keep their GPUs: no plan to start from
    start = rng.choice(feasible)
    values = level_values(req, start)
    if len(values) < 2:
        return
    final = values[-1][0]
    held = dict(values[:-1])
    got = held_bound(req, final, held, 5.0)
    free = held_bound(req, final, {}, 5.0)
    assert got is not None and free is not None
    assert got <= free + 1e-6 * (1 + abs(free)), (seed, got, free)
    for chosen in feasible:
        v = level_values(req, chosen)
        if all(v[i][1] >= values[i][1] - 1e-9 for i in range(len(values) - 1)):
            assert v[-1][1] <= got + 1e-6 * (1 + abs(got)), (seed, v, got)
