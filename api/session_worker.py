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
plan to its copy, and sends the plan's JSON back with what the commit changed in its copy
(`CommitDelta`: the jobs and nodes it replaced); the API process makes the same change to
its own copy, so both stay at one state and version, without parsing the plan (at 16,384
GPUs / 20,000 jobs parsing a plan and committing it cost the API process 190-340 ms; the
delta of a warm plan after 20 events holds a few hundred jobs). The API process keeps the
last plan as the worker's JSON (for the store, `GET`, and a worker sent the state whole,
which parses it). Once the plan is sent, the worker solves the LP relaxation of the state
the plan left for the session's next plan (`WorkerSessions.prepare`; solver/warm.py
`prepare`: only when its last cost was at most 0.5 s of CPU), in the time the
cluster manager takes to enact the plan and gather the next events; it gives up as soon
as the next task arrives (api/pool.py `_serve`).

A session plan, whatever its time limit, runs in the worker's own thread at the server's
niceness, not in the solve thread at the pool's lower one: a cluster manager waits for
each in its cycle. At the pool's niceness among four busy processes of niceness 0 on two
cores a plan gets a third of their share of a core: M at 0.25 s took twice the in-process
time, and a session's first plan at L with 5 s kept only the running jobs, so that every
warm plan after it stayed at 0.61 of a cold solve's value (benchmarks/LATENCY.md).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from api.errors import SolveFailed
from api.intake import cap_request
from models import Job, Node, Plan, PlanRequest
from models.events import Event
from solver.gcpause import gc_paused
from solver.session import PlanningSession

log = logging.getLogger(__name__)

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
    #: the last plan's JSON, with a whole `state` (whose `last_plan` is then None)
    plan_json: str | None = None


@dataclass(frozen=True, slots=True)
class CommitDelta:
    """What committing a plan changed in a session's state: the jobs and nodes it replaced
    (by position, with their names as a check) and the state's sizes before. Committing
    replaces the jobs whose placement changes and the nodes whose MIG layouts change and
    keeps every other object (solver/session.py `commit_plan`), so the objects that are not
    the ones before are the change, whatever the plan."""

    jobs: int
    nodes: int
    changed_jobs: tuple[tuple[int, Job], ...]
    changed_nodes: tuple[tuple[int, Node], ...]

    @classmethod
    def between(cls, old: PlanRequest, new: PlanRequest) -> CommitDelta | None:
        """The delta from `old` to `new` (a commit of it); None when the commit changed
        more than the jobs and nodes (the API process then parses the plan)."""
        if (len(old.jobs) != len(new.jobs) or len(old.cluster.nodes) != len(new.cluster.nodes)
                or old.policy is not new.policy or old.interference is not new.interference):
            return None
        jobs = tuple((i, b) for i, (a, b) in enumerate(zip(old.jobs, new.jobs, strict=True))
                     if a is not b)
        nodes = tuple((i, b) for i, (a, b) in enumerate(zip(old.cluster.nodes,
                                                             new.cluster.nodes, strict=True))
                      if a is not b)
        return cls(len(old.jobs), len(old.cluster.nodes), jobs, nodes)

    def apply(self, request: PlanRequest) -> PlanRequest | None:
        """`request` (the state the worker's copy was in) with the change made; None when
        it is not that state (sizes or names differ)."""
        if len(request.jobs) != self.jobs or len(request.cluster.nodes) != self.nodes:
            return None
        jobs, nodes = list(request.jobs), list(request.cluster.nodes)
        for i, job in self.changed_jobs:
            if jobs[i].name != job.name:
                return None
            jobs[i] = job
        for i, node in self.changed_nodes:
            if nodes[i].name != node.name:
                return None
            nodes[i] = node
        cluster = request.cluster.model_copy(update={"nodes": nodes}) \
            if self.changed_nodes else request.cluster
        # as a checked commit builds it: model_copy keeps the record that the request's
        # cross-checks passed (the worker validated the plan against this very state)
        return request.model_copy(update={"cluster": cluster, "jobs": jobs})


class WorkerSessions:
    """The sessions one worker holds (module doc)."""

    def __init__(self, size: int = HELD) -> None:
        self.size = size
        self._held: OrderedDict[str, PlanningSession] = OrderedDict()

    def plan(self, task: SessionPlan, planner: Callable[[PlanRequest], Plan] | None
             ) -> tuple[Plan, CommitDelta | None]:
        """Bring the session to `task.version`, plan it (warm when it has a last plan;
        `planner` otherwise, `solver.plan` when None) and commit the plan; the plan and
        what its commit changed. Raises `StaleSession` when this worker does not hold what
        the task assumes. A session whose plan fails is dropped (the next task sends it
        whole)."""
        session = task.state if task.state is not None else self._held.pop(task.session_id,
                                                                          None)
        if task.state is not None and task.plan_json is not None:
            with gc_paused():
                session = PlanningSession(task.state.request,
                                          Plan.model_validate_json(task.plan_json),
                                          task.state.version, task.state.memo)
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
        before = session.request
        result = session.plan_request(request, planner)
        self._held[task.session_id] = session
        while len(self._held) > self.size:
            self._held.popitem(last=False)
        return result, CommitDelta.between(before, session.request)

    def prepare(self, session_id: str, lp: bool = True, stop: threading.Event | None = None
                ) -> bool:
        """After a plan of `session_id` is answered: the state its next plan starts from
        and (`lp`) the LP of that state (`PlanningSession.prepare`; it gives up once
        `stop` is set), when this worker holds it; whether the LP ran to its end."""
        session = self._held.get(session_id)
        if session is None:
            return False
        try:
            return session.prepare(lp, stop)
        except Exception:
            # the plan's answer is sent: the session is dropped (its next plan goes whole)
            log.exception("the LP between plans of session %s failed", session_id)
            self._held.pop(session_id, None)
            return False


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

    def dispatch(self, session_id: str, session: PlanningSession, plan_json: str | None,
                 time_limit_s: float | None, max_time_limit_s: float, threads: int
                 ) -> SessionDispatch:
        """The late-bound payload of a plan of `session` (at its current version, its last
        plan as `plan_json`)."""
        return SessionDispatch(self, session_id, session, plan_json, time_limit_s,
                               max_time_limit_s, threads)

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
    #: the session's last plan as JSON (the API process does not keep it parsed)
    plan_json: str | None
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
        base, whole, plan_json = -1, None, None
        batches: tuple[tuple[Event, ...], ...] = ()
        if since is None:
            whole = PlanningSession(self.session.request, None, version)
            plan_json = self.plan_json
        else:
            base, batches = since
        return SessionPlan(self.session_id, version, self.time_limit_s,
                           self.max_time_limit_s, self.threads, base, batches, whole,
                           plan_json)
