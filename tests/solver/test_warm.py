"""Warm session plans (solver/warm.py): valid against the session's state, every job
accounted for, the running jobs kept where they run, the new work placed, never worse than
keeping the running jobs alone, and the cold path where the warm start does not apply."""

from __future__ import annotations

import random

import pytest

from benchmarks.generator import generate, generate_custom
from benchmarks.latency import random_events
from models import Plan, PlanRequest
from models.objective import evaluate
from solver import plan as cold_plan
from solver.session import PlanningSession
from solver.validate import validate_plan
from solver.warm import WarmMemo, applies, warm_plan
from tests.solver.test_session import events, snapshot


def _accounted(req: PlanRequest, result: Plan) -> None:
    assert validate_plan(req, result) == []
    names = [j.name for j in req.jobs]
    got = [a.job for a in result.assignments] + [u.job for u in result.unplaced]
    assert sorted(got) == sorted(names)


def _session(req: PlanRequest, **policy: object) -> PlanningSession:
    pol = req.policy.model_copy(update={"solver": "heuristic", "seed": 3, **policy})
    return PlanningSession(req.model_copy(update={"policy": pol}))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_warm_plans_after_random_events_are_valid_and_keep_the_running_jobs(seed: int) -> None:
    """Rounds of random events (finishes, arrivals, cancellations, resizes, a failing GPU,
    a cordon, a new node), each followed by a warm plan: valid, every job accounted for,
    and at least as good as keeping the running jobs and placing nothing else."""
    session = _session(generate_custom(96, 120, seed=seed))
    session.plan(1.0)  # the first plan is cold
    rng = random.Random(seed)
    geometry = None
    for r in range(4):
        session.apply(random_events(session.request, rng, 12, f"r{r}"))
        state = session.request
        assert session.warm(0.5)
        result = session.plan(0.5)
        _accounted(state, result)
        assert session.memo is not None and session.memo.plans == r + 1
        assert {"compile", "greedy", "build", "validate"} <= set(session.memo.last_steps)
        # the MIG geometry (its layout queries cached inside) is carried from plan to plan
        if r:
            assert session.memo.geometry is geometry
        geometry = session.memo.geometry
        # every running job still consistent stays where it runs (no migration needed:
        # nothing forces one), and the new jobs that fit somewhere are placed
        kept = {j.name: j.current for j in state.jobs if j.current}
        only_running = evaluate(state, kept).objective_value
        assert result.objective_value >= only_running - 1e-6
        placed = {a.job for a in result.assignments}
        assert placed - set(kept), "no new job was placed"


def test_warm_plan_of_a_state_with_free_room_places_the_new_job() -> None:
    """A cluster with room: a job submitted after the first plan is placed by the warm
    plan, the running ones stay where they run (no migration, no preemption)."""
    req = snapshot(solver="heuristic", time_limit_s=1)
    session = PlanningSession(req)
    first = session.plan()
    session.apply(events({"kind": "job_submitted", "job": {"name": "new", "gpus": 1}}))
    state = session.request
    result = warm_plan(state, WarmMemo())
    _accounted(state, result)
    assert "new" in {a.job for a in result.assignments}
    assert result.migrated == [] and result.preempted == []
    before = {a.job: a.placements for a in first.assignments}
    after = {a.job: a.placements for a in result.assignments}
    assert all(after[name] == pls for name, pls in before.items())


def test_warm_and_cold_paths_are_chosen_by_policy_and_size() -> None:
    """Warm: `heuristic`, and `auto` beyond its exact tier; cold: the exact policies,
    deterministic mode, small `auto` requests and the first plan of a session."""
    small = snapshot(solver="auto")
    assert not applies(small)
    assert applies(snapshot(solver="heuristic"))
    assert not applies(snapshot(solver="cp_sat"))
    assert not applies(snapshot(solver="heuristic", deterministic=True))
    assert applies(generate("M", 0))
    assert not PlanningSession(snapshot(solver="heuristic")).warm()


def test_conflicting_non_preemptible_jobs_answer_as_the_cold_plan_does() -> None:
    """Two non-preemptible running jobs on one GPU: the warm path hands the request to
    the driver, whose answer is infeasible, as a cold plan of the same state is."""
    req = snapshot(solver="heuristic", time_limit_s=1)
    data = req.model_dump(mode="json", exclude_none=True)
    data["jobs"].append({"name": "clash", "gpus": 1, "preemptible": False,
                         "current": [{"node": "n1", "gpu": 0}]})
    data["jobs"][0]["preemptible"] = False
    state = PlanRequest.model_validate(data)
    memo = WarmMemo()
    result = warm_plan(state, memo)
    assert memo.cold == 1
    assert result.status == cold_plan(state).status == "infeasible"
    _accounted(state, result)


def test_a_committed_warm_plan_equals_a_checked_commit() -> None:
    """The session commits its validated plans without re-running the request's
    cross-checks: the state it builds is the one a checked commit builds, and it passes
    those checks when they run."""
    from solver.session import commit_plan

    session = _session(generate_custom(64, 80, seed=5))
    session.plan(1.0)
    session.apply(random_events(session.request, random.Random(5), 10, "x"))
    state = session.request
    result = session.plan(1.0)
    checked = commit_plan(state, result)
    assert session.request == checked
    assert PlanRequest.model_validate(session.request.model_dump()) == checked
