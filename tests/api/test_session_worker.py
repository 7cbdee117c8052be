"""Sessions held by solver workers between plans (api/session_worker.py): the whole state
goes to a worker once, then only the event batches since its copy; the worker's copy and
the API process's stay at one state; a worker that does not hold what a task assumes
answers stale."""

from __future__ import annotations

import pickle
import random
import threading
import time

import pytest

from api.session_worker import (
    KEPT_BATCHES,
    CommitDelta,
    Holders,
    SessionDispatch,
    SessionPlan,
    StaleSession,
    WorkerSessions,
)
from benchmarks.generator import generate_custom
from benchmarks.latency import random_events
from models import PlanRequest
from models.events import Event
from solver.session import PlanningSession, commit_plan
from solver.validate import validate_plan


class _Api:
    """The API process's copy of a session (api/sessions.py): the state, and the last plan
    as the worker's JSON."""

    def __init__(self) -> None:
        req = generate_custom(64, 80, seed=7)
        self.session = PlanningSession(req.model_copy(update={"policy": req.policy.model_copy(
            update={"solver": "heuristic", "seed": 1})}))
        self.plan_json: str | None = None

    @property
    def request(self) -> PlanRequest:
        return self.session.request

    @property
    def version(self) -> int:
        return self.session.version

    def apply(self, batch: list[Event]) -> None:
        self.session.apply(batch)


def _dispatch(holders: Holders, api: _Api, limit: float = 0.5, cap: float = 10.0
              ) -> SessionDispatch:
    return holders.dispatch("s", api.session, api.plan_json, limit, cap, 1)




def _round(holders: Holders, worker: WorkerSessions, api: _Api, pid: int
           ) -> SessionPlan:
    """One plan as api/sessions.py makes it: dispatch for `pid`, plan in the worker (the
    payload and the answer pickled as the pipe would), the worker's commit delta made to
    the API copy, which must be what committing the plan to it gives."""
    # a generous limit: the plans end in a fraction of a second when the machine is
    # quiet, and a plan that placed nothing on a loaded one would change no job
    payload = _dispatch(holders, api, limit=5.0).resolve(pid)
    sent = pickle.loads(pickle.dumps(payload))
    state = api.request
    result, delta = pickle.loads(pickle.dumps(worker.plan(sent, None)))
    assert validate_plan(state, result) == []
    assert delta is not None and len(delta.changed_jobs) > 0
    applied = delta.apply(state)
    assert applied is not None
    assert applied == commit_plan(state, result, checked=True)
    assert applied.__pydantic_private__ == state.__pydantic_private__  # cross-checks kept
    api.session = PlanningSession(applied, None, api.version + 1)
    api.plan_json = result.model_dump_json()
    holders.planned("s", pid, api.version)
    return payload


def test_the_state_goes_once_then_only_the_batches_and_both_copies_agree() -> None:
    holders, worker, api = Holders(), WorkerSessions(), _Api()
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
        # after the answer, the LP of the state the plan left, for the next plan (when the
        # plan's own LP did not fit): the session's state and version stay as they are
        held.memo.last_steps.pop("relax", None)
        assert worker.prepare("s") and held.memo.prepares == r + 1 and held.memo.prepared
        assert held.version == api.version and held.request == api.request
    assert not worker.prepare("other")
    # another worker has no copy: the whole state goes to it
    assert _dispatch(holders, api).resolve(12).state is not None


def test_a_worker_without_the_assumed_version_answers_stale() -> None:
    holders, worker, api = Holders(), WorkerSessions(), _Api()
    _round(holders, worker, api, pid=5)
    batch = random_events(api.request, random.Random(1), 4, "x")
    api.apply(batch)
    holders.applied("s", api.version, batch)
    payload = _dispatch(holders, api).resolve(5)
    with pytest.raises(StaleSession):
        WorkerSessions().plan(payload, None)  # a replaced worker: nothing held
    stale = SessionPlan("s", payload.version, 0.5, 10.0, 1, base=payload.base - 1,
                        batches=payload.batches)
    with pytest.raises(StaleSession):
        worker.plan(stale, None)
    # the failed task dropped the copy: the next one must go whole, and it plans
    assert "s" not in worker._held
    whole = _dispatch(holders, api)
    whole.whole = True
    sent = whole.resolve(5)
    assert sent.state is not None and sent.plan_json is not None  # the last plan as JSON
    result, _ = worker.plan(sent, None)
    assert isinstance(result.objective_value, float)
    held = worker._held["s"]
    assert held.memo is not None and held.memo.plans == 1  # warm, from the plan sent


def test_missing_batches_send_the_whole_state() -> None:
    holders, worker, api = Holders(), WorkerSessions(), _Api()
    _round(holders, worker, api, pid=9)
    rng = random.Random(2)
    for k in range(KEPT_BATCHES + 1):
        batch = random_events(api.request, rng, 1, f"b{k}")
        api.apply(batch)
        holders.applied("s", api.version, batch)
    assert _dispatch(holders, api).resolve(9).state is not None
    holders.forget("s")
    assert _dispatch(holders, api).resolve(9).state is not None


def test_a_held_session_caps_the_time_limit_as_the_server_does() -> None:
    holders, worker, api = Holders(), WorkerSessions(), _Api()
    payload = _dispatch(holders, api, 50.0, 0.5).resolve(3)
    result, _ = worker.plan(payload, None)
    assert result.solve_time_s < 30  # capped at 0.5 s (generous: a loaded machine)
    assert isinstance(worker._held["s"].request, PlanRequest)


def test_the_api_commit_from_the_delta_equals_the_parsed_plan_commit() -> None:
    """api/sessions.py commits a session plan from the worker's delta; without one (or
    with one that does not fit the state) it parses the plan: both give one state."""
    from api.pool import PlanJSON
    from api.sessions import _commit

    holders, worker, api = Holders(), WorkerSessions(), _Api()
    result, delta = worker.plan(_dispatch(holders, api).resolve(1), None)
    text = result.model_dump_json()
    by_delta = _commit(api.session, PlanJSON(text, result.solver, result.status, commit=delta))
    parsed = _commit(api.session, PlanJSON(text, result.solver, result.status))
    assert delta is not None and by_delta.request == parsed.request
    assert by_delta.version == parsed.version == api.version + 1
    assert by_delta.request == commit_plan(api.request, result)
    assert by_delta.last_plan is None and parsed.last_plan is None  # kept as JSON
    misfit = CommitDelta(delta.jobs + 1, delta.nodes, delta.changed_jobs, delta.changed_nodes)
    assert misfit.apply(api.request) is None
    assert _commit(api.session, PlanJSON(text, result.solver, result.status, commit=misfit)
                   ).request == parsed.request


class _Spy(WorkerSessions):
    """Real worker sessions that record the LP runs between plans (`prepared`) and the
    calls that make only the carried state (`carried`)."""

    def __init__(self) -> None:
        super().__init__()
        self.prepared: list[str] = []
        self.carried: list[str] = []

    def prepare(self, session_id: str, lp: bool = True,
                stop: threading.Event | None = None) -> bool:
        (self.prepared if lp else self.carried).append(session_id)
        return super().prepare(session_id, lp, stop)


@pytest.mark.parametrize("waiting", [False, True])
def test_no_lp_between_plans_when_the_next_task_is_already_waiting(waiting: bool) -> None:
    """The worker (api/pool.py `_serve`) answers the session plan either way; it makes the
    state of the session's next plan and solves its LP only when no task waits."""
    from api.pool import _serve, _SolveThread

    holders, worker, api = Holders(), _Spy(), _Api()
    payload = _dispatch(holders, api).resolve(11)
    sent: list[tuple[object, ...]] = []
    _serve(("t1", payload), 0.0, sent.append, lambda *a, **k: None, None, worker,
           _SolveThread(0), lambda timeout: waiting)
    assert [m[0] for m in sent] == ["done"]
    assert worker.prepared == ([] if waiting else ["s"])
    # the next plan's state is made first (at the server's niceness), then the LP
    assert worker.carried == ([] if waiting else ["s"])


def test_the_work_between_plans_gives_way_to_the_next_task() -> None:
    """`_until_task` runs its function in the solve thread and sets its stop as soon as a
    task arrives, and returns what the function returned then."""
    from api.pool import _SolveThread, _until_task

    arrived = threading.Event()
    threading.Timer(0.2, arrived.set).start()
    t0 = time.monotonic()
    # without the stop it would wait 60 s
    assert _until_task(_SolveThread(0), lambda stop: stop.wait(60),
                       lambda timeout: arrived.wait(timeout))
    assert time.monotonic() - t0 < 30  # generous: the stop came at 0.2 s
    # no task comes: the function runs to its end, and its own answer comes back
    assert _until_task(_SolveThread(0), lambda stop: "done", lambda timeout: False) == "done"
