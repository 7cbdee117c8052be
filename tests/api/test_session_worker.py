"""Sessions held by solver workers between plans (api/session_worker.py): the whole state
goes to a worker once, then only the event batches since its copy; the worker's copy and
the API process's stay at one state; a worker that does not hold what a task assumes
answers stale."""

from __future__ import annotations

import pickle
import random

import pytest

from api.session_worker import KEPT_BATCHES, Holders, SessionPlan, StaleSession, WorkerSessions
from benchmarks.generator import generate_custom
from benchmarks.latency import random_events
from models import PlanRequest
from solver.session import PlanningSession
from solver.validate import validate_plan


def _api_session() -> PlanningSession:
    req = generate_custom(64, 80, seed=7)
    return PlanningSession(req.model_copy(update={"policy": req.policy.model_copy(
        update={"solver": "heuristic", "seed": 1})}))


def _round(holders: Holders, worker: WorkerSessions, api: PlanningSession, pid: int
           ) -> SessionPlan:
    """One plan as api/sessions.py makes it: dispatch for `pid`, plan in the worker (the
    payload pickled as the pipe would), commit in the API copy."""
    payload = holders.dispatch("s", api, 0.5, 10.0, 1).resolve(pid)
    sent = pickle.loads(pickle.dumps(payload))
    state = api.request
    result = worker.plan(sent, None)
    assert validate_plan(state, result) == []
    api.commit(result, checked=True)
    holders.planned("s", pid, api.version)
    return payload


def test_the_state_goes_once_then_only_the_batches_and_both_copies_agree() -> None:
    holders, worker, api = Holders(), WorkerSessions(), _api_session()
    first = _round(holders, worker, api, pid=11)
    assert first.state is not None and first.batches == ()
    rng = random.Random(3)
    for r in range(3):
        for k in range(2):  # two batches between plans
            batch = random_events(api.request, rng, 6, f"r{r}{k}")
            api.apply(batch)
            holders.applied("s", api.version, batch)
        payload = _round(holders, worker, api, pid=11)
        assert payload.state is None and len(payload.batches) == 2
        held = worker._held["s"]
        assert held.version == api.version
        assert held.request == api.request
        assert held.memo is not None and held.memo.plans == r + 1  # planned warm
        # from the second warm plan on, from the last one's carried jobs and placer
        assert held.memo.carried == r
    # another worker has no copy: the whole state goes to it
    assert holders.dispatch("s", api, 0.5, 10.0, 1).resolve(12).state is not None


def test_a_worker_without_the_assumed_version_answers_stale() -> None:
    holders, worker, api = Holders(), WorkerSessions(), _api_session()
    _round(holders, worker, api, pid=5)
    batch = random_events(api.request, random.Random(1), 4, "x")
    api.apply(batch)
    holders.applied("s", api.version, batch)
    payload = holders.dispatch("s", api, 0.5, 10.0, 1).resolve(5)
    with pytest.raises(StaleSession):
        WorkerSessions().plan(payload, None)  # a replaced worker: nothing held
    stale = SessionPlan("s", payload.version, 0.5, 10.0, 1, base=payload.base - 1,
                        batches=payload.batches)
    with pytest.raises(StaleSession):
        worker.plan(stale, None)
    # the failed task dropped the copy: the next one must go whole, and it plans
    assert "s" not in worker._held
    whole = holders.dispatch("s", api, 0.5, 10.0, 1)
    whole.whole = True
    result = worker.plan(whole.resolve(5), None)
    assert isinstance(result.objective_value, float)


def test_missing_batches_send_the_whole_state() -> None:
    holders, worker, api = Holders(), WorkerSessions(), _api_session()
    _round(holders, worker, api, pid=9)
    rng = random.Random(2)
    for k in range(KEPT_BATCHES + 1):
        batch = random_events(api.request, rng, 1, f"b{k}")
        api.apply(batch)
        holders.applied("s", api.version, batch)
    assert holders.dispatch("s", api, 0.5, 10.0, 1).resolve(9).state is not None
    holders.forget("s")
    assert holders.dispatch("s", api, 0.5, 10.0, 1).resolve(9).state is not None


def test_a_held_session_caps_the_time_limit_as_the_server_does() -> None:
    holders, worker, api = Holders(), WorkerSessions(), _api_session()
    payload = holders.dispatch("s", api, 50.0, 0.5, 1).resolve(3)
    result = worker.plan(payload, None)
    assert result.solve_time_s < 30  # capped at 0.5 s (generous: a loaded machine)
    assert isinstance(worker._held["s"].request, PlanRequest)
