"""Incremental planning sessions: a snapshot, deltas applied to it, plans warm-started.

A `PlanningSession` holds the current state of one cluster as a PlanRequest and the last
plan made for it. A cluster manager sends the snapshot once, then per cycle only what
changed (`models.events`), and asks for a plan:

- `apply(events)` applies a batch of deltas to a working copy and commits it only when
  every event applied cleanly and the resulting request passes the request's own checks;
  otherwise `EventError` names the first event that does not apply (its index, kind and
  why) and the session is unchanged.
- `plan(time_limit_s)` plans the current state and commits the plan: the session assumes
  the cluster manager enacts it, so every placed job is then running at its planned
  placement (`current`), a job the plan stops is pending again, and the plan's MIG
  changes become the GPUs' layouts. The next plan therefore starts from the last one.

How a plan starts from the last one: once the session has a plan, and the request is one
that `auto` would not solve exactly (solver/warm.py: `applies`), the plan is a *warm*
plan (solver/warm.py: `warm_plan`): the running jobs keep their placements, finished and
cancelled jobs have freed their GPUs, the pending and new jobs are placed into the free
capacity by the greedy rules and the local search improves the result for the time left;
the session keeps the measured cost of each step (`WarmMemo`) from plan to plan, which
decides the time kept back for building and validating and whether the bound and the
search fit. The first plan, small requests and the exact policies (`cp_sat`, `milp`) go
through `solver.plan`, where CP-SAT and CBC receive the running jobs' placements as their
hint and local search starts from them; moving them costs `policy.migration_cost`. Every
plan, warm or cold, is validated against the session's current state.

What is reused and what is rebuilt: the request objects of unchanged jobs and nodes are
shared between versions (an event rebuilds only what it touches), and the request's
cross-checks run on what the batch changed (`_Draft._changes_pass`: the jobs and nodes
that joined or changed, the jobs running on a changed node), or on the whole request
when that finds an error, so that the error names its field path. Committing a plan
that was validated against the current state (`commit(plan, checked=True)`: the
session's own plans and the service's) copies only the jobs whose placement changed and
the GPUs whose MIG layout changed, without running the request's cross-checks again: the
validator has checked every placement and layout the commit writes. A warm plan that
follows the session's last warm plan starts from that plan's compiled jobs and placer
(its occupancy), brought forward by the deltas, which it finds by name and by these
shared objects (solver/warm.py); it needs the plan it carries from to be the one
committed (`last_plan`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from models import (
    Cluster,
    Gpu,
    Job,
    MigChange,
    MigInstance,
    Node,
    Placement,
    Plan,
    PlanRequest,
)
from models.catalog import layout_violations
from models.events import (
    Event,
    GpuHealthy,
    GpuUnhealthy,
    JobCancelled,
    JobFinished,
    JobResized,
    JobSubmitted,
    JobUpdated,
    MigLayoutChanged,
    NodeAdded,
    NodeCordoned,
    NodeRemoved,
)
from solver.gcpause import gc_paused, promote_survivors

if TYPE_CHECKING:
    from solver.warm import WarmMemo

Planner = Callable[[PlanRequest], Plan]


class EventError(ValueError):
    """A delta that does not apply to the session's state (unknown job, double finish...)."""

    def __init__(self, index: int, kind: str, reason: str) -> None:
        super().__init__(f"event {index} ({kind}): {reason}")
        self.index = index
        self.kind = kind
        self.reason = reason


class _Reject(Exception):
    """Raised by an event handler: why the event does not apply."""


@dataclass
class _Draft:
    """The session state being edited: jobs and nodes by name, in order."""

    base: PlanRequest
    jobs: dict[str, Job] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)

    @classmethod
    def of(cls, request: PlanRequest) -> _Draft:
        return cls(request, {j.name: j for j in request.jobs},
                   {n.name: n for n in request.cluster.nodes})

    def job(self, name: str) -> Job:
        found = self.jobs.get(name)
        if found is None:
            raise _Reject(f"no job {name!r} in the session")
        return found

    def node(self, name: str) -> Node:
        found = self.nodes.get(name)
        if found is None:
            raise _Reject(f"no node {name!r} in the session")
        return found

    def gpu(self, node: str, index: int) -> tuple[Node, int]:
        n = self.node(node)
        for i, g in enumerate(n.gpus):
            if g.index == index:
                return n, i
        raise _Reject(f"node {node!r} has no GPU {index}")

    def set_gpu(self, node: Node, position: int, gpu: Gpu) -> None:
        gpus = list(node.gpus)
        gpus[position] = gpu
        self.nodes[node.name] = node.model_copy(update={"gpus": gpus})

    def release(self, keep: Callable[[Placement], bool]) -> None:
        """Jobs with a current placement failing `keep` lose it (they are pending again)."""
        for name, job in self.jobs.items():
            if job.current and not all(keep(p) for p in job.current):
                self.jobs[name] = job.model_copy(update={"current": None})

    def request(self, checked: bool = False, whole: bool = False) -> PlanRequest:
        """The edited state as a request. The request's cross-checks run here, on what
        the events changed (`_changes_pass`) or, with `whole` or when that finds an
        error, on the whole request (whose errors name their field paths); not at all
        when `checked`: these very events were applied to this very state before and
        passed them, as in a worker's copy of a session (api/session_worker.py)."""
        cluster = self.base.cluster.model_copy(update={"nodes": list(self.nodes.values())})
        jobs = list(self.jobs.values())
        if checked or (not whole and self._changes_pass(cluster, jobs)):
            return self.base.model_copy(update={"cluster": cluster, "jobs": jobs})
        return PlanRequest(cluster=cluster, jobs=jobs, policy=self.base.policy,
                           interference=self.base.interference)

    def _changes_pass(self, cluster: Cluster, jobs: list[Job]) -> bool:
        """Whether the request's cross-checks pass on what the events changed, when the
        state they were applied to passed them: the jobs that joined or changed, and those
        running on a node that changed, against the nodes they name; the nodes that
        joined or changed. The cross-checks are per node, per job against the nodes its
        current placement names, and on cluster-wide fields the events do not touch
        (models/request.py `_request_errors`); the one across jobs, unique names, holds
        by construction (the draft keys jobs and nodes by name). At 16,384 GPUs / 20,000
        jobs this is what makes applying a batch cheap: the whole request's checks cost
        0.15-0.3 s of CPU. False (the caller then checks the whole request) when the base
        was not checked or a changed part fails."""
        if not self.base._cross_checked:
            return False
        before = {n.name: n for n in self.base.cluster.nodes}
        touched = {n.name for n in cluster.nodes if before.get(n.name) is not n}
        touched |= before.keys() - self.nodes.keys()
        old = {j.name: j for j in self.base.jobs}
        changed = [j for j in jobs if old.get(j.name) is not j or (
            touched and j.current and any(p.node in touched for p in j.current))]
        named = touched | {p.node for j in changed for p in j.current or []}
        part = cluster.model_copy(update={"nodes": [n for n in cluster.nodes
                                                    if n.name in named]})
        try:
            PlanRequest(cluster=part, jobs=changed, policy=self.base.policy,
                        interference=self.base.interference)
        except ValidationError:
            return False
        return True


# ---------------------------------------------------------------- one handler per kind


def _job_submitted(d: _Draft, e: JobSubmitted) -> None:
    if e.job.name in d.jobs:
        raise _Reject(f"job {e.job.name!r} is already in the session")
    d.jobs[e.job.name] = e.job


def _job_finished(d: _Draft, e: JobFinished) -> None:
    if not d.job(e.job).current:
        raise _Reject(f"job {e.job!r} is not running (pending jobs are cancelled, "
                      "not finished)")
    del d.jobs[e.job]


def _job_cancelled(d: _Draft, e: JobCancelled) -> None:
    d.job(e.job)
    del d.jobs[e.job]


def _job_resized(d: _Draft, e: JobResized) -> None:
    job = d.job(e.job)
    if (job.gpus, job.gpu_share) == (e.gpus, e.gpu_share):
        return
    # a new size is a new demand: the job is placed afresh (its old GPUs are freed)
    d.jobs[e.job] = job.model_copy(update={
        "gpus": e.gpus, "gpu_share": e.gpu_share, "mig": None, "mig_profile": None,
        "current": None})


def _job_updated(d: _Draft, e: JobUpdated) -> None:
    d.job(e.job.name)
    d.jobs[e.job.name] = e.job


def _node_added(d: _Draft, e: NodeAdded) -> None:
    if e.node.name in d.nodes:
        raise _Reject(f"node {e.node.name!r} is already in the session")
    d.nodes[e.node.name] = e.node


def _node_removed(d: _Draft, e: NodeRemoved) -> None:
    d.node(e.node)
    del d.nodes[e.node]
    d.release(lambda p: p.node != e.node)


def _node_cordoned(d: _Draft, e: NodeCordoned) -> None:
    node = d.node(e.node)
    d.nodes[e.node] = node.model_copy(update={"schedulable": not e.cordoned})


def _gpu_health(d: _Draft, e: GpuUnhealthy | GpuHealthy) -> None:
    node, i = d.gpu(e.node, e.gpu)
    d.set_gpu(node, i, node.gpus[i].model_copy(
        update={"healthy": isinstance(e, GpuHealthy)}))


def _mig_layout_changed(d: _Draft, e: MigLayoutChanged) -> None:
    node, i = d.gpu(e.node, e.gpu)
    old = node.gpus[i]
    spec = d.base.cluster.catalog().get(old.model)
    if e.mig_enabled and (spec is None or not spec.mig_capable):
        raise _Reject(f"GPU {e.node}/{e.gpu} ({old.model}) is not MIG-capable")
    if not e.mig_enabled and e.mig_instances:
        raise _Reject("MIG instances given with mig_enabled false")
    if e.mig_instances and spec is not None:
        bad = layout_violations(spec, [m.key() for m in e.mig_instances])
        if bad:
            raise _Reject("invalid MIG layout: " + "; ".join(bad))
    d.set_gpu(node, i, old.model_copy(update={"mig_enabled": e.mig_enabled,
                                              "mig_instances": list(e.mig_instances)}))
    kept = set(e.mig_instances)

    def still_there(p: Placement) -> bool:
        if (p.node, p.gpu) != (e.node, e.gpu):
            return True
        return p.mig in kept if p.mig is not None else not e.mig_enabled

    d.release(still_there)


#: event kind -> what it does to the draft.
HANDLERS: dict[str, Callable[[_Draft, Any], None]] = {
    "job_submitted": _job_submitted,
    "job_finished": _job_finished,
    "job_cancelled": _job_cancelled,
    "job_resized": _job_resized,
    "job_updated": _job_updated,
    "node_added": _node_added,
    "node_removed": _node_removed,
    "node_cordoned": _node_cordoned,
    "gpu_unhealthy": _gpu_health,
    "gpu_healthy": _gpu_health,
    "mig_layout_changed": _mig_layout_changed,
}


def apply_events(request: PlanRequest, events: Sequence[Event], *, checked: bool = False
                 ) -> PlanRequest:
    """The request after `events`, in order; `EventError` names the first event that does
    not apply (the request is never modified). `checked`: the batch was applied to this
    state before and the result passed the request's cross-checks, which are not run
    again (`_Draft.request`)."""
    draft = _Draft.of(request)
    for i, event in enumerate(events):
        try:
            HANDLERS[event.kind](draft, event)
        except _Reject as e:
            raise EventError(i, event.kind, str(e)) from None
    try:
        return draft.request(checked)
    except ValidationError:
        pass
    # Some event broke a cross-check (a current placement naming a missing GPU, an
    # unknown GPU model...): replay one event at a time to name the first culprit.
    draft = _Draft.of(request)
    for i, event in enumerate(events):
        HANDLERS[event.kind](draft, event)
        try:
            draft.request(whole=True)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise EventError(i, event.kind, f"{where}: {err['msg']}") from None
    raise AssertionError("unreachable: the whole batch failed but no prefix did")


def diff_events(old: PlanRequest, new: PlanRequest) -> list[Event]:
    """Events that turn `old` into `new` (jobs and nodes; `old`'s policy and GPU model
    overrides are kept): what a cluster manager holding full snapshots would send. Jobs
    gone from `new` are finished when they were running, cancelled otherwise; a changed
    job is `job_updated`; a changed node is its GPU health, MIG and cordon events, or a
    removal and an addition when more than that changed."""
    out: list[Event] = []
    new_jobs = {j.name: j for j in new.jobs}
    old_jobs = {j.name: j for j in old.jobs}
    old_nodes = {n.name: n for n in old.cluster.nodes}
    new_nodes = {n.name: n for n in new.cluster.nodes}
    replaced: set[str] = set()  # removed and added again: their jobs lose `current`
    for name, node in new_nodes.items():
        before = old_nodes.get(name)
        if before is None:
            out.append(NodeAdded(node=node))
        elif before != node:
            delta = _node_delta(before, node)
            if isinstance(delta[0], NodeRemoved):
                replaced.add(name)
            out.extend(delta)
    for name, job in old_jobs.items():
        if name not in new_jobs:
            out.append(JobFinished(job=name) if job.current else JobCancelled(job=name))
    for name, job in new_jobs.items():
        before_job = old_jobs.get(name)
        if before_job is None:
            out.append(JobSubmitted(job=job))
        elif before_job != job or any(p.node in replaced for p in job.current or []):
            out.append(JobUpdated(job=job))
    out.extend(NodeRemoved(node=name) for name in old_nodes if name not in new_nodes)
    return out


def _node_delta(old: Node, new: Node) -> list[Event]:
    """The events of one node that changed (see `diff_events`)."""
    same_rest = old.model_copy(update={"gpus": [], "schedulable": True}) == \
        new.model_copy(update={"gpus": [], "schedulable": True})
    if not same_rest or [g.index for g in old.gpus] != [g.index for g in new.gpus] or \
            any(a.model != b.model for a, b in zip(old.gpus, new.gpus, strict=True)):
        return [NodeRemoved(node=old.name), NodeAdded(node=new)]
    out: list[Event] = []
    if old.schedulable != new.schedulable:
        out.append(NodeCordoned(node=new.name, cordoned=not new.schedulable))
    for a, b in zip(old.gpus, new.gpus, strict=True):
        if a.healthy != b.healthy:
            out.append(GpuHealthy(node=new.name, gpu=b.index) if b.healthy
                       else GpuUnhealthy(node=new.name, gpu=b.index))
        if (a.mig_enabled, a.mig_instances) != (b.mig_enabled, b.mig_instances):
            out.append(MigLayoutChanged(node=new.name, gpu=b.index,
                                        mig_enabled=b.mig_enabled,
                                        mig_instances=list(b.mig_instances)))
    return out


def commit_plan(request: PlanRequest, plan: Plan, *, checked: bool = False) -> PlanRequest:
    """The state once `plan` is enacted: placed jobs run at their planned placements, the
    other jobs are pending, and the plan's MIG changes are the GPUs' layouts. Jobs whose
    placement does not change are kept as they are. `checked`: `plan` passed the
    validator against `request`, so the new state is built without running the
    request's cross-checks again (module doc); otherwise they run."""
    placed = {a.job: a.placements for a in plan.assignments}
    changes = {(c.node, c.gpu): c for c in plan.mig_changes}
    nodes = request.cluster.nodes
    if changes:
        touched = {node for node, _ in changes}
        nodes = [_with_mig_changes(n, changes) if n.name in touched else n for n in nodes]
    jobs = [j if _same(j.current, placed.get(j.name))
            else j.model_copy(update={"current": placed.get(j.name)})
            for j in request.jobs]
    cluster = request.cluster.model_copy(update={"nodes": nodes}) if changes \
        else request.cluster
    if checked:
        # model_copy validates nothing and keeps the request's record that its
        # cross-checks passed
        return request.model_copy(update={"cluster": cluster, "jobs": jobs})
    return PlanRequest(cluster=cluster, jobs=jobs, policy=request.policy,
                       interference=request.interference)


def _same(a: list[Placement] | None, b: list[Placement] | None) -> bool:
    """Whether two placement lists are equal, element by element: by identity, else by
    their fields (what pydantic's `==` compares, without its per-call checks: a plan
    parsed from JSON has no placement object in common with the state, and at 20,000
    jobs comparing them with `==` cost a fifth of committing it)."""
    if a is b:
        return True
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is y or x.__dict__ == y.__dict__ for x, y in zip(a, b, strict=True))


def _with_mig_changes(node: Node, changes: dict[tuple[str, int], MigChange]) -> Node:
    """`node` with the plan's MIG changes applied (destroys first, then creates)."""
    gpus = []
    touched = False
    for g in node.gpus:
        ch = changes.get((node.name, g.index))
        if ch is None:
            gpus.append(g)
            continue
        touched = True
        gone: set[MigInstance] = set(ch.destroy)
        layout = [m for m in g.mig_instances if m not in gone]
        layout += list(ch.create)
        gpus.append(g.model_copy(update={"mig_instances": layout}))
    return node.model_copy(update={"gpus": gpus}) if touched else node


class PlanningSession:
    """One cluster's state across planning cycles: the current request and its last plan."""

    def __init__(self, request: PlanRequest, last_plan: Plan | None = None,
                 version: int = 0, memo: WarmMemo | None = None) -> None:
        self._request = request
        self.last_plan = last_plan
        #: batches of events applied and plans committed so far
        self.version = version
        #: what the steps of the warm plans cost (solver/warm.py), from plan to plan;
        #: made by the first warm plan (solver/warm.py loads the heuristics)
        self.memo = memo

    @property
    def request(self) -> PlanRequest:
        """The current state (the snapshot with every delta and plan committed)."""
        return self._request

    def apply(self, events: Sequence[Event],
              check: Callable[[PlanRequest], None] | None = None, *,
              checked: bool = False) -> None:
        """Apply a batch of deltas: all of them, or none (`EventError`, or whatever `check`
        raises when it refuses the resulting state). `checked`: this batch was applied to
        this very state before and passed (a copy of the session replaying it:
        `apply_events`)."""
        with gc_paused():  # the request's cross-checks allocate per job (solver/gcpause.py)
            new = apply_events(self._request, events, checked=checked)
        if check is not None:
            check(new)
        self._request = new
        self.version += 1

    def planning_request(self, time_limit_s: float | None = None) -> PlanRequest:
        """The current state with its policy's time limit replaced by `time_limit_s`."""
        if time_limit_s is None:
            return self._request
        policy = self._request.policy.model_copy(update={"time_limit_s": time_limit_s})
        return self._request.model_copy(update={"policy": policy})

    def commit(self, plan: Plan, *, checked: bool = False) -> None:
        """Record `plan` as enacted: the next plan starts from it. `checked`: `plan` passed
        the validator against the current state (`commit_plan`)."""
        self._request = commit_plan(self._request, plan, checked=checked)
        self.last_plan = plan
        self.version += 1

    def warm(self, time_limit_s: float | None = None) -> bool:
        """Whether the next plan starts warm (module doc)."""
        return self._warm(self.planning_request(time_limit_s))

    def _warm(self, request: PlanRequest) -> bool:
        if self.last_plan is None:
            return False
        from solver.warm import applies

        return applies(request)

    def plan(self, time_limit_s: float | None = None, planner: Planner | None = None
             ) -> Plan:
        """Plan the current state and commit the plan: with `planner` when given, else
        warm when `warm` says so (module doc), else with `solver.plan`. The session's own
        plans are validated against the current state before they are committed (a
        `planner`'s are committed with the request's cross-checks)."""
        return self.plan_request(self.planning_request(time_limit_s), planner)

    def plan_request(self, request: PlanRequest, planner: Planner | None = None) -> Plan:
        """`plan` for `request`: the current state under another policy (a time limit,
        a server's caps), as `planning_request` gives it. The collector is paused for the
        whole call, the commit included, and what the call made and keeps (the new state,
        the plan, the carried placer) joins the collector's oldest generation unwalked
        (solver/gcpause.py `promote_survivors`)."""
        with gc_paused():
            plan = self._plan_request(request, planner)
            promote_survivors()
            return plan

    def prepare(self, lp: bool = True, stop: threading.Event | None = None) -> bool:
        """Between plans: make the state the next warm plan starts from when the last plan
        left none (solver/warm.py `prepare_carry`: after the first plan, say), and (`lp`)
        solve the LP relaxation of the current state for it (`prepare`), when the session
        has made a warm plan and the LP's measured cost is small; whether the LP ran to
        its end. A caller that has idle time after a plan calls it then; the next plan is
        valid either way. The carried state is made once per plan, so a caller may make it
        first (`lp=False`, at a better priority) and call again for the LP, with a `stop`
        it sets when it needs the thread back (the LP then gives up at once)."""
        if self.last_plan is None or not self.warm():
            return False
        from solver.warm import WarmMemo, prepare, prepare_carry

        if self.memo is None:
            self.memo = WarmMemo()
        prepare_carry(self._request, self.memo, self.last_plan)  # pauses the collector
        return lp and prepare(self._request, self.memo, stop)

    def _plan_request(self, request: PlanRequest, planner: Planner | None) -> Plan:
        if planner is None and self._warm(request):
            from solver.warm import WarmMemo, warm_plan

            if self.memo is None:
                self.memo = WarmMemo()
            result = warm_plan(request, self.memo, last=self.last_plan)
        else:
            solve: Planner
            if planner is None:
                from solver import plan as solve
            else:
                solve = planner
            result = solve(request)
        self.commit(result, checked=planner is None)
        return result
