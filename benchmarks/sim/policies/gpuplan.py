"""`gpuplan`: this project's planner, called once per round through `solver.plan`.

Each round sends the contract's PlanRequest (running jobs with `current` and
`remaining_work`, the queue with `submitted_at`) with objective `jct`: each placed job is
worth `weight * speed(model) * 3600 / remaining_work` (Smith's rule for mean completion
time: short jobs first, each on the model where it runs fastest relative to the others;
docs/semantics.md), minus the migration / preemption costs.

Age weighting: `weight = 1 + age / aging_s` (age = seconds since submission), so a long
job's priority doubles every `aging_s` (default 2 h) it waits or runs: Smith's rule alone
would starve long jobs behind a steady stream of short ones.

Costs. A preemption costs the contract's default 1.0. A migration costs 0.05, not the
contract's default 0.5, calibrated to what it costs here: the simulator stalls a migrated
job for `restart_overhead_s` (30 s), a tenth of a 300 s round, and a job's `jct` term
`w * H / T` (T its remaining run time) is its weighted rate of progress; losing 30 s of a
job worth v costs about v / 10 of one round's objective, and 0.05 is that for the
long-running jobs a consolidation moves (v ~ 0.05-0.5). With 0.5, no move that makes room
for a waiting gang (worth 0.05-0.35 for the long ITP gangs) could ever pay for itself, and
8-GPU gangs waited beside ~15 idle GPUs scattered over several nodes.

The queue sent is the running jobs plus the `max_queue` waiting jobs of highest Smith
index on their best model (a bounded request keeps the round inside its time budget);
after the plan, the waiting jobs it does not place (left out of the request, or left by a
planner that ran out of time) are backfilled best fit (the node with the fewest free GPUs
that fits, so whole nodes stay free for gangs) on their fastest model, in Smith order,
into the capacity the plan leaves free. Every `jct` value is positive, so placing a job
that fits never lowers the objective: the backfill only completes the plan.

Upgrade (`upgrade_min_s`): GPUs still idle after the backfill fit no waiting job; a placed
job whose remaining run time drops by at least `upgrade_min_s` (default 1 h) on a faster
model with such room moves there (longest remaining run time first; a running job pays
the restart overhead), and the GPUs it leaves go to the backfill again. Smith's index
values a long job's speed-up by `speed / remaining`, so the planner leaves it on a slow
GPU next to idle fast ones although every hour it gains is an hour off its own JCT, and
the last such job sets the makespan.

Elasticity (contract 5.1): the requests carry each job's `Job.elastic`, so the planner
picks an elastic gang's size (a running one is sent at its current size, see the engine);
the backfill places waiting jobs at their nominal size. `elastic=False` (registry name
`gpuplan_fixed`) sends every job without `elastic`: fixed sizes, the same planner
otherwise. `deterministic=True` sets `policy.deterministic` (a work-unit budget instead of
wall seconds), so that a simulation's figures do not depend on the machine's load; the
wall deadline stays as the planner's safety net, and the rounds it cut are counted in
`wall_cuts` (the runner reports them): those plans may differ between runs.

Growth of elastic gangs (`grow_idle`, on by default; elastic only). The plan prices every
resize alike (`migration_cost`), whereas in the objective a job's value is its rate
`w * speedup[n] / W` (W its one-GPU remaining work): a long gang (small value) then never
grows into GPUs a completion left idle, since its gain stays below that flat price, and a
gang close to its end (large value) is grown although the restart costs it more time than
the growth saves. Both are judged here by the job's own time instead: a change from n to
m GPUs pays when its remaining run time `W / speedup[n] - W / speedup[m]` (at the speed
of its model) drops by more than the restart it adds (`restart_overhead_s`; none for a
job that starts or changes GPUs this round anyway). So (1) a growth in the plan of a
running gang that keeps its GPUs and does not pay is undone, and (2) the GPUs still idle
after the backfill and the upgrade go, one step at a time, to the placed spanning elastic
gang whose next size that pays has the largest gain `w * (speedup[m] - speedup[n]) /
(m - n) / W` per GPU (AFS's marginal rule, the planner's own `jct` value), on the nodes
it already uses first, within its tenant's quota limit. Shrinks stay the plan's: they
free GPUs for others, which the job's own time does not measure.

Tenants (a cluster with `Cluster.quotas`): the request carries the quotas and each job's
`tenant`, and the planner serves the guarantees first (contract 5.3: a tenant below its
guarantee reclaims GPUs that other tenants borrow). The bounded queue then also holds the
`per_tenant` waiting jobs of highest Smith index of every tenant, so that a tenant's work
is in the request even when the largest tenant's jobs fill the top `max_queue`; the
backfill and the upgrade keep every tenant within its quota limit (`"*"` key).

Sessions (`sessions=True`, `gpuplan simulate --sessions`): the rounds go through one
`solver.session.PlanningSession` instead of a fresh request each: the first round opens it
with the round's request, each later round sends only the events that turn the session's
state into the round's request (`solver.session.diff_events`: arrivals, completions, jobs
leaving the bounded queue, aged weights and remaining work, placements the backfill or the
upgrade changed) and plans the session, which starts from its last plan. Both modes plan
the same state; the jobs keep their arrival order in the session.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from benchmarks.sim.engine import Decision, JobRun, RoundView
from benchmarks.sim.occupancy import Occupancy
from benchmarks.sim.policies.base import fresh_occupancy
from benchmarks.sim.tenants import guarantee, limit
from models import Job, Placement, Plan, PlanRequest, Policy, speed
from models.rules import (
    HORIZON_S,
    HOST_TOL,
    allowed_sizes,
    remaining_on,
    required_levels,
    speedup,
)
from solver import plan
from solver.session import PlanningSession, diff_events

log = logging.getLogger(__name__)


@dataclass
class GpuPlan:
    """gpuplan's `jct` objective with age weighting, via `solver.plan`."""

    solver: Literal["auto", "heuristic", "cp_sat", "milp"] = "heuristic"
    time_limit_s: float = 0.5
    aging_s: float = 2 * 3600.0
    max_queue: int = 160
    per_tenant: int = 8
    deterministic: bool = False
    migration_cost: float = 0.05
    preemption_cost: float = 1.0
    upgrade_min_s: float | None = 3600.0
    sessions: bool = False
    elastic: bool = True
    grow_idle: bool = True
    restart_overhead_s: float = 30.0
    name: str = "gpuplan"
    backend_used: dict[str, int] = field(default_factory=dict)
    session: PlanningSession | None = None
    events_sent: int = 0
    wall_cuts: int = 0

    def weight(self, r: JobRun, now: float) -> float:
        """1 + age / aging_s."""
        return 1.0 + max(0.0, now - r.submit) / self.aging_s

    def _index(self, r: JobRun, now: float) -> float:
        best = max((v for v in (r.job.throughput or {}).values()), default=1.0)
        return self.weight(r, now) * best * HORIZON_S / max(r.remaining, 1.0)

    def schedule(self, view: RoundView) -> Decision:
        """One `solver.plan` call on this round's request."""
        waiting = sorted(view.waiting, key=lambda r: (-self._index(r, view.now),
                                                      r.submit, r.name))
        jobs = [*view.running, *self._queue(waiting, view)]
        policy = Policy(objective="jct", solver=self.solver, time_limit_s=self.time_limit_s,
                        migration_cost=self.migration_cost,
                        preemption_cost=self.preemption_cost, seed=0, threads=1,
                        deterministic=self.deterministic)
        request = view.request(policy, jobs,
                               weights={r.name: self.weight(r, view.now) for r in jobs})
        if not self.elastic:
            request = request.model_copy(update={"jobs": [
                j.model_copy(update={"elastic": None}) for j in request.jobs]})
        placements = self._plan(request)
        decision: Decision = {j: list(p) for j, p in placements.items() if p}
        by_name = {r.name: r for r in view.active}
        occ = fresh_occupancy(view)
        if self.elastic and self.grow_idle:
            self._hold(by_name, decision, occ)
        for name in sorted(decision, key=lambda n: by_name[n].placements is None):
            occ.add(by_name[name].job, decision[name])
        room = self._room(view, decision, by_name)
        self._backfill(waiting, decision, occ, room)
        if self.upgrade_min_s is not None and self._upgrade(view, by_name, decision, occ):
            self._backfill(waiting, decision, occ, room)
        if self.elastic and self.grow_idle:
            self._grow(view, by_name, decision, occ, room)
        return decision

    def _queue(self, waiting: list[JobRun], view: RoundView) -> list[JobRun]:
        """The waiting jobs sent: the top `max_queue`; with quotas also, per tenant, its
        top `per_tenant` and as many more as its guarantee has room for (in Smith order;
        see the module doc)."""
        head = waiting[: self.max_queue]
        quotas = view.cluster.quotas
        if not quotas:
            return head
        room = {t: guarantee(quotas, t) for t in quotas}
        for r in view.running:
            room[r.job.tenant] = room.get(r.job.tenant, 0.0) - r.size
        count: dict[str, int] = {}
        for r in head:
            count[r.job.tenant] = count.get(r.job.tenant, 0) + 1
            room[r.job.tenant] = room.get(r.job.tenant, 0.0) - r.size
        sent = {r.name for r in head}
        for r in waiting[self.max_queue:]:
            t = r.job.tenant
            if count.get(t, 0) < self.per_tenant or r.size <= room.get(t, 0.0) + HOST_TOL:
                count[t] = count.get(t, 0) + 1
                room[t] = room.get(t, 0.0) - r.size
                sent.add(r.name)
        return [r for r in waiting if r.name in sent]

    @staticmethod
    def _room(view: RoundView, decision: Decision,
              by_name: dict[str, JobRun]) -> dict[str, float]:
        """Per tenant, the GPUs its `"*"` limit leaves after the plan (inf: unlimited)."""
        quotas = view.cluster.quotas
        room = {r.job.tenant: limit(quotas, r.job.tenant) for r in view.active}
        for name in decision:
            room[by_name[name].job.tenant] -= by_name[name].size
        return room

    def _backfill(self, waiting: list[JobRun], decision: Decision, occ: Occupancy,
                  room: dict[str, float]) -> None:
        """Place the waiting jobs the plan left out where they fit, in Smith order, within
        their tenant's quota limit."""
        for r in waiting:
            if r.name in decision or r.size > room[r.job.tenant] + HOST_TOL:
                continue
            pl = best_fit(occ, r.job, self._fastest_first(r))
            if pl is not None:
                occ.add(r.job, pl)
                decision[r.name] = pl
                room[r.job.tenant] -= r.size

    def _upgrade(self, view: RoundView, by_name: dict[str, JobRun], decision: Decision,
                 occ: Occupancy) -> bool:
        """Move placed jobs to idle faster GPUs when that saves >= upgrade_min_s of their
        remaining run time (see the module doc); True when one moved."""
        catalog = occ.catalog
        min_s = self.upgrade_min_s or 0.0
        cands = []
        for name, pl in decision.items():
            r = by_name[name]
            if r.job.shape != "whole" or not r.job.throughput:
                continue
            s_here = speed(r.job, occ.model_of(pl), catalog)
            if s_here > 0:
                cands.append((-r.remaining / s_here, name, r, s_here))
        moved = False
        for _, name, r, s_here in sorted(cands):
            faster = [m for m in self._fastest_first(r) or []
                      if speed(r.job, m, catalog) > s_here
                      and r.remaining / s_here - r.remaining / speed(r.job, m, catalog)
                      >= min_s]
            if not faster:
                continue
            old = decision[name]
            occ.remove(name)
            found = best_fit(occ, r.job, faster)
            occ.add(r.job, found if found is not None else old)
            if found is not None:
                decision[name] = found
                moved = True
        return moved

    def _grow(self, view: RoundView, by_name: dict[str, JobRun], decision: Decision,
              occ: Occupancy, room: dict[str, float]) -> None:
        """Give the GPUs still idle to placed elastic gangs, one step at a time, each to the
        step of the largest weighted speedup gain per GPU over the job's one-GPU remaining
        work, when the step shortens the job's remaining run time by more than the restart
        it adds (see the module doc)."""
        while True:
            best: tuple[float, str, int] | None = None
            for name, pl in decision.items():
                r = by_name[name]
                n = len(pl)
                for m in grow_steps(r, pl, occ, room[r.job.tenant],
                                    self._restart_added(r, pl)):
                    gain = (speedup(r.job, m) - speedup(r.job, n)) / (m - n)
                    key = (-self.weight(r, view.now) * gain / one_gpu_work(r), name, m)
                    if best is None or key < best:
                        best = key
            if best is None:
                return
            _, name, m = best
            r = by_name[name]
            grown = grow_placement(occ, decision[name], m)
            occ.remove(name)
            occ.add(r.job, grown)
            room[r.job.tenant] -= m - len(decision[name])
            decision[name] = grown

    def _hold(self, by_name: dict[str, JobRun], decision: Decision, occ: Occupancy) -> None:
        """Undo a growth of a running elastic gang that keeps its GPUs and adds others when
        the growth does not shorten its remaining run time by more than the restart it
        costs (the plan prices every resize alike; see the module doc)."""
        for name, pl in decision.items():
            r = by_name[name]
            old = r.placements
            if (old is None or r.job.elastic is None or len(pl) <= len(old)
                    or not gpu_keys(old) <= gpu_keys(pl)):
                continue
            if not saves(r, len(old), len(pl), occ, occ.model_of(pl), self.restart_overhead_s):
                decision[name] = list(old)

    def _restart_added(self, r: JobRun, pl: list[Placement]) -> float:
        """The restart a resize adds to a job placed at `pl`: none when the job starts or
        changes GPUs this round anyway, else the restart overhead."""
        kept = r.placements is not None and gpu_keys(r.placements) == gpu_keys(pl)
        return self.restart_overhead_s if kept else 0.0

    @staticmethod
    def _fastest_first(r: JobRun) -> list[str] | None:
        thr = r.job.throughput
        return sorted(thr, key=lambda m: (-thr[m], m)) if thr else None

    def _plan(self, request: PlanRequest) -> dict[str, list[Placement]]:
        result = self._session_plan(request) if self.sessions else plan(request)
        self.backend_used[result.solver] = self.backend_used.get(result.solver, 0) + 1
        if any(note.startswith("deterministic mode: the time limit cut")
               for note in result.explanation):
            self.wall_cuts += 1
        return {a.job: a.placements for a in result.assignments}

    def _session_plan(self, request: PlanRequest) -> Plan:
        """Plan this round's request through the session (see the module doc)."""
        if self.session is None:
            self.session = PlanningSession(request)
        else:
            events = diff_events(self.session.request, request)
            self.events_sent += len(events)
            if events:
                self.session.apply(events)
        return self.session.plan()


def gpu_keys(pl: list[Placement]) -> set[tuple[str, int | None]]:
    """The (node, gpu) pairs of a whole-GPU placement list."""
    return {(p.node, p.gpu) for p in pl}


def one_gpu_work(r: JobRun) -> float:
    """The job's remaining work in seconds on one GPU at speed 1 (at least 1 s)."""
    job = r.job.model_copy(update={"remaining_work": max(r.remaining, 0.0)})
    return max(1.0, remaining_on(job, 1) or 0.0)


def grow_steps(r: JobRun, pl: list[Placement], occ: Occupancy, room: float,
               restart_s: float) -> list[int]:
    """The larger sizes an elastic gang placed at `pl` may grow to: allowed, faster than
    its size, within the idle GPUs of its model and its tenant's `room`, and shortening
    its remaining run time by more than `restart_s` (a spanning gang without a topology
    requirement only: the growth takes GPUs on any node)."""
    job = r.job
    if job.elastic is None or job.single_node or required_levels(job):
        return []
    n = len(pl)
    model = occ.model_of(pl)
    idle = sum(1 for g in occ.gpus.values() if g.model == model and not g.mig
               and g.is_empty())
    return [m for m in allowed_sizes(job)
            if n < m <= n + min(idle, room + HOST_TOL)
            and saves(r, n, m, occ, model, restart_s)]


def saves(r: JobRun, n: int, m: int, occ: Occupancy, model: str, restart_s: float) -> bool:
    """True when the gang on m GPUs of `model` finishes more than `restart_s` sooner than
    on n: its remaining run time `W / speedup[size] / speed(model)` (W its one-GPU
    remaining work) drops by more than the restart the change costs."""
    s_model = speed(r.job, model, occ.catalog)
    if s_model <= 0:
        return False
    work = one_gpu_work(r) / s_model
    return work / speedup(r.job, n) - work / speedup(r.job, m) > restart_s


def grow_placement(occ: Occupancy, pl: list[Placement], m: int) -> list[Placement]:
    """`pl` plus idle GPUs of its model up to m GPUs: first on the nodes `pl` uses, then on
    the nodes with the most idle GPUs (node order on ties)."""
    model = occ.model_of(pl)
    mine = {p.node for p in pl}
    rows = [[g for g in row if g.model == model and not g.mig and g.is_empty()]
            for row in occ.node_gpus.values()]
    rows = sorted((row for row in rows if row),
                  key=lambda row: (row[0].node not in mine, -len(row)))
    out = list(pl)
    for row in rows:
        out.extend(Placement(node=g.node, gpu=g.index) for g in row[: m - len(out)])
    return out


def best_fit(occ: Occupancy, job: Job, models: list[str] | None) -> list[Placement] | None:
    """A single-node whole-GPU gang on the node with the fewest free GPUs of the first
    model in `models` that holds it (nodes in file order on ties); other jobs first fit."""
    if job.shape != "whole" or not job.single_node or models is None:
        return occ.find(job, models)
    need = job.gpus or 0
    for m in models:
        best: list[Placement] | None = None
        best_free = 0
        for row in occ.node_gpus.values():
            free = [g for g in row if g.model == m and not g.mig and g.is_empty()]
            if len(free) >= need and (best is None or len(free) < best_free):
                best = [Placement(node=g.node, gpu=g.index) for g in free[:need]]
                best_free = len(free)
        if best is not None:
            return best
    return None
