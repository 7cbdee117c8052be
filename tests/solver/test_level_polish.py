"""The final level polished exactly (solver/level_polish.py): with every job of a higher
class kept where a plan has it and no less guaranteed usage served, the lowest class
reaches the brute-forced best of the plans that keep them so (tiny random instances
enumerated by brute force), the levels never fall, and the answer passes the validator."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heuristics.levels import restore_displaced
from heuristics.result import HeuristicResult
from models.objective import level_values, same_placement
from solver.build import build_plan
from solver.context import Context
from solver.level_polish import polish_final
from solver.validate import validate_plan
from tests.solver.brute import _plans, _within_limits
from tests.solver.strategies import random_levels_request


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_the_lowest_class_reaches_its_best_beside_the_higher_classes(seed: int) -> None:
    rng = random.Random(seed)
    req = random_levels_request(rng, objective=rng.choice(["throughput", "jct"]),
                                solver="heuristic")
    req = req.model_copy(update={"policy": req.policy.model_copy(
        update={"time_limit_s": 10.0})})
    lowest = min(j.priority for j in req.jobs)
    if len({j.priority for j in req.jobs}) < 2:
        return  # one class: nothing above it to keep (polish_final returns the plan)
    feasible = [c for c in _plans(req) if _within_limits(req, c)]
    if not feasible:
        return  # running jobs that cannot all keep their GPUs: no plan to start from
    start = dict(rng.choice(feasible))
    if rng.random() < 0.5:  # the lowest class left out: the polish has work to do
        start = {n: pl for n, pl in start.items()
                 if next(j for j in req.jobs if j.name == n).priority != lowest}
        if not _within_limits(req, start) or start not in feasible:
            start = dict(rng.choice(feasible))
    # settled as every answer is (solver/driver.py): no stopped higher-class running job
    # that taking out lower-class work would keep
    start = restore_displaced(req, HeuristicResult(start, {})).placements
    before = level_values(req, start)
    got = polish_final(Context.start(req, None, None), HeuristicResult(start, {}))
    after = level_values(req, got.placements)
    higher = [j for j in req.jobs if j.priority != lowest]

    def keeps(chosen: dict) -> bool:
        """The higher classes where `start` has them, no less guarantee served."""
        return (all(same_placement(chosen.get(j.name, []), start.get(j.name, []))
                    for j in higher)
                and (not req.cluster.quotas
                     or level_values(req, chosen)[0][1] >= before[0][1] - 1e-9))

    rounded = [round(v, 9) for _, v in after], [round(v, 9) for _, v in before]
    assert rounded[0] >= rounded[1], (seed, before, after)
    if rounded[0][:-1] == rounded[1][:-1] and keeps(got.placements):
        best = max(level_values(req, c)[-1][1] for c in feasible if keeps(c))
        assert abs(after[-1][1] - best) <= 1e-6 * (1 + abs(best)), (seed, after, best)
    # else restore_displaced (every answer's settling) kept a stopped higher-class job
    # that the re-placed lowest class no longer blocked: the levels above rose
    out = build_plan(req, got, status="heuristic", solver="heuristic")
    assert validate_plan(req, out) == [], seed
