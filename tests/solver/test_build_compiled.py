"""Reading the jobs through their JobInfos changes no answer: `evaluate`, the plan's
accounts, `hard_conflicts` and the driver's `_breaks_running` give the same on a compiled
request as on an uncompiled copy (models/objective.py: `compiled_infos`), and running jobs
kept with placements equal to, but not the very objects of, their current ones are kept,
not migrated."""

from __future__ import annotations

import random

import pytest

from heuristics.greedy import plan_greedy
from heuristics.result import HeuristicResult
from models import Assignment, Placement, PlanRequest, Unplaced
from models.instance import compile_jobs
from models.objective import compiled_infos, evaluate
from solver.build import _accounts
from solver.driver import _breaks_running
from solver.reasons import hard_conflicts
from tests.solver.strategies import random_request


def _results(request: PlanRequest, rng: random.Random) -> list[HeuristicResult]:
    """Plans of `request`: greedy, every running job kept (the very lists, copies of the
    placements, reversed tuples), nothing placed, and greedy with one running job moved
    to another job's placements."""
    greedy = plan_greedy(request)
    running = [j for j in request.jobs if j.current]
    out = [greedy,
           HeuristicResult({j.name: j.current for j in running}, {}),
           HeuristicResult({j.name: [p.model_copy() for p in j.current or ()]
                            for j in running}, {}),
           HeuristicResult({j.name: tuple(reversed(j.current or ())) for j in running}, {}),
           HeuristicResult({}, {j.name: ("time_limit", "cut") for j in request.jobs})]
    if len(running) > 1:
        a, b = rng.sample(running, 2)
        moved = dict(greedy.placements)
        moved[a.name] = list(b.current or ())
        out.append(HeuristicResult(moved, dict(greedy.reasons)))
    return out


def _pinned_clash() -> PlanRequest:
    """Two non-preemptible running jobs on one GPU, beside a preemptible one."""
    node = {"name": "n0", "cpu_millicores": 1000,
            "gpus": [{"index": 0, "model": "V100-32GB"}, {"index": 1, "model": "V100-32GB"}]}
    jobs = [{"name": "a", "gpus": 1, "preemptible": False, "cpu_millicores": 800,
             "current": [{"node": "n0", "gpu": 0}]},
            {"name": "b", "gpus": 1, "preemptible": False, "cpu_millicores": 800,
             "current": [{"node": "n0", "gpu": 0}]},
            {"name": "c", "gpus": 1, "current": [{"node": "n0", "gpu": 1}]}]
    return PlanRequest.model_validate({"cluster": {"nodes": [node]}, "jobs": jobs})


@pytest.mark.parametrize("seed", range(40))
def test_compiled_and_uncompiled_requests_give_the_same(seed: int) -> None:
    """Each reader answers the same through JobInfos as through the job models."""
    rng = random.Random(seed)
    request = random_request(
        rng, max_gpus=8, max_jobs=8, max_nodes=3,
        objective=rng.choice(["throughput", "jct", "makespan", "fairness", "priority_fifo"]),
        solver="heuristic", elastic=rng.choice([0.0, 0.4]), topology=rng.random() < 0.3,
        interference=rng.random() < 0.5)
    for job in request.jobs:   # some running jobs pinned, so hard_conflicts has work
        if job.current and rng.random() < 0.4:
            job.preemptible = False
    plain = request.model_copy(deep=True)
    compile_jobs(request)
    assert compiled_infos(request) is not None
    assert compiled_infos(plain) is None
    assert hard_conflicts(request) == hard_conflicts(plain)
    for result in _results(request, rng):
        placements = {j: list(p) for j, p in result.placements.items() if p}
        assert _breaks_running(request, result) == _breaks_running(plain, result)
        assert evaluate(request, placements) == evaluate(plain, placements)
        for feasible in (True, False):
            ours = _accounts(request, placements, result.reasons, feasible, True,
                             ("insufficient_capacity", "x"))
            theirs = _accounts(plain, placements, result.reasons, feasible, True,
                               ("insufficient_capacity", "x"))
            assert ours == theirs


def test_running_jobs_kept_on_equal_placements_are_not_migrated() -> None:
    """A running job placed on copies of its current placements, or on them in another
    order, is kept: not migrated, and a pinned one is not broken."""
    request = _pinned_clash()
    compile_jobs(request)
    assert hard_conflicts(request) == hard_conflicts(request.model_copy(deep=True))
    assert any("share GPU n0/0" in c for c in hard_conflicts(request))
    a, c = request.jobs[0], request.jobs[2]
    for pls in ([p.model_copy() for p in a.current or ()], tuple(a.current or ())):
        result = HeuristicResult({"a": pls, "c": c.current or []}, {})
        ev = evaluate(request, result.placements)
        assert ev.migrated == () and ev.preempted == ("b",)
        # b, pinned, left out breaks the plan; kept, it does not
        assert _breaks_running(request, result)
        b = request.jobs[1]
        assert not _breaks_running(
            request, HeuristicResult({**result.placements, "b": b.current or []}, {}))
    moved = HeuristicResult({"a": [Placement(node="n0", gpu=1)], "c": []}, {})
    assert evaluate(request, moved.placements).migrated == ("a",)
    assert _breaks_running(request, moved)


def test_trusted_models_from_any_rows() -> None:
    """`Assignment.many` and `Unplaced.many` take any iterable of rows, also empty."""
    assert Assignment.many([]) == [] and Unplaced.many(iter(())) == []
    rows = ({"job": f"j{k}", "reason": "time_limit", "detail": ""} for k in range(3))
    built = Unplaced.many(rows)
    assert built == [Unplaced(job=f"j{k}", reason="time_limit", detail="") for k in range(3)]
    assert len({id(u.model_fields_set) for u in built}) == 3
