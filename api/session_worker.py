"""Planning sessions held by the solver workers between plans.

Handing a whole session state to a worker for every plan costs a pickle and an unpickle of
the request (at 16,384 GPUs / 20,000 jobs about 0.45 s of CPU: benchmarks/LATENCY.md) and
throws away what the worker learnt while planning it (the warm plan's measured step costs,
solver/warm.py). So a worker keeps the sessions it planned (`WorkerSessions`, the last
`HELD` of them), each at the version it committed, and the API process sends it only what
changed since: the event batches applied after that version (`SessionPlan.batches`), which
the worker applies to its copy as the API process did to its own (`PlanningSession.apply`:
the same events on the same state give the same state, version included). When the
worker does not hold the session at that version (another worker planned it, the worker
was replaced, the session was reloaded from the store, the batches since are no longer
kept), the whole state goes instead (`SessionPlan.state`).

The API process decides which at dispatch, when the pool knows which worker takes the
task (`SessionDispatch.resolve`, given the worker's process id), from what it recorded
of the session's holder (`Holders`). A worker that finds its copy missing or at another
version answers `stale` (`StaleSession`), and the plan is sent again with the whole state.
The worker plans warm when the session has a last plan (solver/session.py), commits the
plan to its copy, and sends the plan's JSON back; the API process commits the same plan to
its own copy (as validated: `commit(plan, checked=True)`), so both stay at one version.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from api.errors import SolveFailed
from api.intake import cap_request
from models import Plan, PlanRequest
from models.events import Event
from solver.gcpause import gc_paused
from solver.session import PlanningSession

#: Sessions a worker keeps between plans (the least recently planned go first); one of
#: 16,384 GPUs / 20,000 jobs takes about 95 MiB in memory, and 15 MiB more for the
#: compiled jobs and placer its next warm plan starts from (solver/warm.py).
HELD = 4
#: Event batches the API process keeps per session for its holder (beyond them, or when
#: they are not all kept, the whole state is sent).
KEPT_BATCHES = 64


class StaleSession(SolveFailed):
    """The worker does not hold the session at the version the task assumed: the task
    is sent again with the whole state (never answered to a client as such)."""

    code = "stale_session"


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """What a worker needs to plan a session: its copy's version `base` plus `batches`,
    or the whole `state`; the time limit asked (None: the session's policy) and the
    server's caps on it and on threads."""

    session_id: str
    version: int                       # the session's version once the batches apply
    time_limit_s: float | None
    max_time_limit_s: float
    threads: int
    base: int = -1                     # the worker's copy's version (with `batches`)
    batches: tuple[tuple[Event, ...], ...] = ()
    state: PlanningSession | None = None


class WorkerSessions:
    """The sessions one worker holds (module doc)."""

    def __init__(self, size: int = HELD) -> None:
        self.size = size
        self._held: OrderedDict[str, PlanningSession] = OrderedDict()

    def plan(self, task: SessionPlan, planner: Callable[[PlanRequest], Plan] | None) -> Plan:
        """Bring the session to `task.version`, plan it (warm when it has a last plan;
        `planner` otherwise, `solver.plan` when None) and commit the plan; raises
        `StaleSession` when this worker does not hold what the task assumes. A session
        whose plan fails is dropped (the next task sends it whole)."""
        session = task.state if task.state is not None else self._held.pop(task.session_id,
                                                                          None)
        if session is None or (task.state is None and session.version != task.base):
            raise StaleSession(f"worker does not hold session {task.session_id} at "
                               f"version {task.base}")
        self._held.pop(task.session_id, None)
        with gc_paused():
            for batch in task.batches:
                # the API process applied this batch to this version and it passed the
                # request's cross-checks there
                session.apply(batch, checked=True)
        if session.version != task.version:
            raise StaleSession(f"session {task.session_id} is at version "
                               f"{session.version}, not {task.version}")
        request = cap_request(session.planning_request(task.time_limit_s),
                              task.max_time_limit_s, task.threads)
        result = session.plan_request(request, planner)
        self._held[task.session_id] = session
        while len(self._held) > self.size:
            self._held.popitem(last=False)
        return result


@dataclass
class _Holder:
    """Which worker holds a session, at which version, and the batches applied since."""

    pid: int | None = None
    version: int = -1
    batches: list[tuple[int, tuple[Event, ...]]] = field(default_factory=list)


class Holders:
    """The API process's record of which worker holds which session (module doc)."""

    def __init__(self) -> None:
        self._by_session: dict[str, _Holder] = {}

    def applied(self, session_id: str, version: int, events: Sequence[Event]) -> None:
        """A batch took the session to `version`: kept for the holder."""
        h = self._by_session.setdefault(session_id, _Holder())
        h.batches.append((version, tuple(events)))
        if len(h.batches) > KEPT_BATCHES:
            self.forget(session_id)

    def planned(self, session_id: str, pid: int, version: int) -> None:
        """Worker `pid` committed a plan: it holds the session at `version`."""
        self._by_session[session_id] = _Holder(pid, version)

    def forget(self, session_id: str) -> None:
        """Nothing is known of the session's holder (reloaded, failed, deleted...)."""
        self._by_session.pop(session_id, None)

    def dispatch(self, session_id: str, session: PlanningSession,
                 time_limit_s: float | None, max_time_limit_s: float, threads: int
                 ) -> SessionDispatch:
        """The late-bound payload of a plan of `session` (at its current version)."""
        return SessionDispatch(self, session_id, session, time_limit_s, max_time_limit_s,
                               threads)

    def since(self, session_id: str, pid: int, version: int
              ) -> tuple[int, tuple[tuple[Event, ...], ...]] | None:
        """(the holder's version, the batches from it to `version`) when worker `pid`
        holds the session and every batch since is kept; None otherwise."""
        h = self._by_session.get(session_id)
        if h is None or h.pid != pid:
            return None
        batches = tuple(b for v, b in h.batches if v > h.version)
        versions = [v for v, _ in h.batches if v > h.version]
        if versions != list(range(h.version + 1, version + 1)):
            return None
        return h.version, batches


@dataclass
class SessionDispatch:
    """A session plan's payload, decided when the pool knows the worker (`resolve`)."""

    holders: Holders
    session_id: str
    session: PlanningSession
    time_limit_s: float | None
    max_time_limit_s: float
    threads: int
    whole: bool = False   # send the whole state whatever the holder (after a stale answer)
    #: the process id of the worker that took the task (set by `resolve`)
    pid: int | None = None

    def resolve(self, pid: int) -> SessionPlan:
        """The payload for worker `pid`: the batches since its copy, or the whole state."""
        self.pid = pid
        version = self.session.version
        since = None if self.whole else self.holders.since(self.session_id, pid, version)
        base, whole = -1, None
        batches: tuple[tuple[Event, ...], ...] = ()
        if since is None:
            whole = PlanningSession(self.session.request, self.session.last_plan, version)
        else:
            base, batches = since
        return SessionPlan(self.session_id, version, self.time_limit_s,
                           self.max_time_limit_s, self.threads, base, batches, whole)
