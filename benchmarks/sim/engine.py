"""The discrete-event simulator: a trace replayed against one scheduling policy.

Time advances from event to event: arrivals, completions and scheduling rounds. A round
runs every `round_s` seconds after the previous one (while jobs wait or something
happened since, or while an elastic gang runs), and at once when an arrival or completion
finds jobs waiting and a GPU idle. In a round the policy sees the simulated state
(`RoundView`: running jobs with their placements, waiting jobs with their ages, the MIG
layouts; `view.request()` builds the contract's PlanRequest) and returns a `Decision`:
the placements of every job that runs until the next round. The engine diffs it against
the current state:

- a running job on the same placement is *kept*; on another one it is *migrated*; absent,
  it is *preempted* (back to the queue); a waiting job that gets a placement *starts*;
- a migration or a restart after a preemption costs `restart_overhead_s` (default 30 s)
  of lost progress: the job holds its GPUs but makes no progress for that long;
- a job started on a MIG instance created this round waits `mig_reconfig_s` (default
  60 s) for the node's reconfiguration.

Progress model: a job's `work` is in seconds at relative speed 1.0 on its own demand
(`gpus` GPUs of the reference V100 for a gang, its slice or share otherwise), so on model
m it progresses at `speed(m)` work-seconds per second, i.e. `speed(m) * gpus`
GPU-work-seconds per second for a gang; its JCT is `completion - submission`.

Elastic gangs (contract 5.1, `Job.elastic`): `work` and `remaining` stay in seconds on the
nominal `gpus`; on n GPUs the job progresses at `speed(m) * speedup[n] / speedup[gpus]`
(`gang_factor`, from `models.rules.speedup`), i.e. at `speedup[n]` per second of a one-GPU
run. A decision may give a running elastic gang another allowed size: that is a *resize*
(counted apart from migrations) and, like any change of its GPU set, costs the restart
overhead (default 30 s: Pollux's simulator stalls a re-allocated job for 30 s,
`rescale_time = 30` in petuum/adaptdl `simulator/simulator.py`). Attained service counts
the GPUs a job holds. In the round's request a running elastic gang is sent at its current
size: `gpus = n` and `remaining_work` for n GPUs (`models.rules.remaining_on`), as the
contract reads them for a running job.

Per tenant, each round records (`TenantRound`, after the decision is applied) the GPUs the
tenant's running jobs hold, the GPUs its waiting jobs ask for and its smallest waiting
job: the quota figures of `metrics.tenant_figures` are computed from them.

Invariants asserted every round (`InvariantError`): the decision is rebuilt into an
`Occupancy` that refuses any oversubscribed GPU or ineligible placement; every arrived,
unfinished job is either running or waiting, exactly once; at the end every job of the
trace has completed.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from benchmarks.sim.occupancy import CapacityError, GpuKey, Occupancy
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, GpuModel, Job, MigInstance, Placement, PlanRequest, Policy, speed
from models.objective import same_placement
from models.rules import job_size, remaining_on, speedup

log = logging.getLogger(__name__)

_EPS = 1e-6

#: The 7-slice model whose geometry sizes MIG demands (job_units).
_SIZE_MODEL = "A100-SXM4-80GB"

#: job name -> its placements for the next round (absent = not running).
Decision = dict[str, list[Placement]]


class InvariantError(AssertionError):
    """The simulated state broke an invariant (oversubscription, a lost job, a stall)."""


@dataclass(frozen=True)
class SimConfig:
    """Simulation knobs (seconds)."""

    round_s: float = 300.0
    restart_overhead_s: float = 30.0
    mig_reconfig_s: float = 60.0
    max_rounds: int = 1_000_000


@dataclass
class JobRun:
    """The simulated state of one job (policies read it, only the engine writes it)."""

    trace: TraceJob
    remaining: float
    size: float
    placements: list[Placement] | None = None
    model: str | None = None
    rate: float = 0.0
    stall_until: float = 0.0
    last_update: float = 0.0
    first_start: float | None = None
    finish: float | None = None
    attained: float = 0.0
    service: dict[str, float] = field(default_factory=dict)
    preemptions: int = 0
    migrations: int = 0
    resizes: int = 0
    held: float = 0.0
    needs_restart: bool = False
    last_run_end: float | None = None

    @property
    def name(self) -> str:
        return self.trace.job.name

    @property
    def job(self) -> Job:
        return self.trace.job

    @property
    def submit(self) -> float:
        return self.trace.submit

    @property
    def running(self) -> bool:
        return self.placements is not None

    def finish_estimate(self, now: float) -> float:
        """When it completes if left alone (inf when not running)."""
        if self.placements is None or self.rate <= 0:
            return math.inf
        return max(now, self.stall_until) + self.remaining / self.rate


@dataclass
class RoundView:
    """What a policy sees at a round. Treat as read-only."""

    now: float
    round_s: float
    cluster: Cluster
    occupancy: Occupancy
    running: list[JobRun]
    waiting: list[JobRun]

    @property
    def active(self) -> list[JobRun]:
        """Running then waiting jobs."""
        return [*self.running, *self.waiting]

    @cached_property
    def mig_cluster(self) -> Cluster:
        """The cluster with each MIG GPU's current layout."""
        layouts = self.occupancy.layouts()
        nodes = []
        for node in self.cluster.nodes:
            gpus = [g.model_copy(update={"mig_instances": [
                        MigInstance(profile=i.profile, start=i.start)
                        for i in sorted(layouts[(node.name, g.index)])]})
                    if g.mig_enabled else g for g in node.gpus]
            nodes.append(node.model_copy(update={"gpus": gpus}))
        return self.cluster.model_copy(update={"nodes": nodes})

    def request(self, policy: Policy, jobs: Sequence[JobRun] | None = None,
                weights: Mapping[str, float] | None = None) -> PlanRequest:
        """The contract's PlanRequest for this round: `jobs` (default all active) with
        `current` (running ones), `remaining_work`, `submitted_at` and `weights`."""
        out = []
        for r in self.active if jobs is None else jobs:
            upd: dict[str, object] = {"remaining_work": max(r.remaining, 0.0),
                                      "submitted_at": r.submit}
            if r.placements is not None:
                upd["current"] = list(r.placements)
                n = len(r.placements)
                if r.job.elastic is not None and n != r.job.gpus:
                    nominal = r.job.model_copy(update={"remaining_work": upd["remaining_work"]})
                    upd["gpus"] = n
                    upd["remaining_work"] = remaining_on(nominal, n)
            if weights is not None and r.name in weights:
                upd["weight"] = weights[r.name]
            out.append(r.job.model_copy(update=upd))
        return PlanRequest.model_validate(
            {"cluster": self.mig_cluster, "jobs": out, "policy": policy}, from_attributes=True)


class SchedulingPolicy(Protocol):
    """A scheduling policy: one decision per round."""

    name: str

    def schedule(self, view: RoundView) -> Decision:
        """The placements of every job that runs until the next round."""
        ...


@dataclass
class Sample:
    """The cluster from time `t` on (piecewise constant until the next sample)."""

    t: float
    allocated: float
    queued: int
    running: int


@dataclass
class TenantRound:
    """Per tenant, from time `t` on until the next round: GPU equivalents held by its
    running jobs (`usage`), asked for by its waiting jobs (`pending`), and the size of its
    smallest waiting job (`smallest`; absent when nothing waits)."""

    t: float
    usage: dict[str, float]
    pending: dict[str, float]
    smallest: dict[str, float]


@dataclass
class SimResult:
    """Everything a run measured."""

    policy: str
    jobs: list[JobRun]
    samples: list[Sample]
    round_times: list[float]
    rounds: int
    gpus_total: int
    reconfigurations: int
    wall_s: float
    tenant_rounds: list[TenantRound] = field(default_factory=list)
    #: the period of the rounds (`SimConfig.round_s`)
    round_s: float = 300.0


class Simulator:
    """Replays `trace` on `cluster` under `policy`."""

    def __init__(self, cluster: Cluster, trace: Sequence[TraceJob], policy: SchedulingPolicy,
                 config: SimConfig | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> None:
        self.cluster = cluster
        self.policy = policy
        self.config = config or SimConfig()
        self.on_progress = on_progress
        self.catalog = cluster.catalog()
        self.trace = sorted(trace, key=lambda j: (j.submit, j.name))
        if len({j.name for j in self.trace}) != len(self.trace):
            raise ValueError("job names in a trace must be unique")
        self.occ = Occupancy(cluster)
        self.runs: dict[str, JobRun] = {}
        self.waiting: dict[str, JobRun] = {}
        self.running: dict[str, JobRun] = {}
        self.done: list[JobRun] = []
        self.samples: list[Sample] = []
        self.round_times: list[float] = []
        self.tenant_rounds: list[TenantRound] = []
        self.reconfigurations = 0
        self.now = 0.0

    # ----- time -------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        """Progress every running job to time `t`."""
        for r in self.running.values():
            start = max(r.last_update, r.stall_until)
            if t > start:
                r.remaining -= r.rate * (t - start)
            r.attained += r.held * (t - r.last_update)
            if r.model is not None:
                r.service[r.model] = r.service.get(r.model, 0.0) + (t - r.last_update)
            r.last_update = t
        self.now = t

    def _sample(self) -> None:
        s = Sample(self.now, round(self.occ.allocated(), 9), len(self.waiting),
                   len(self.running))
        if self.samples and self.samples[-1].t == s.t:
            self.samples[-1] = s
        else:
            self.samples.append(s)

    # ----- events -----------------------------------------------------------------
    def _complete(self) -> bool:
        done = [r for r in self.running.values()
                if r.remaining <= _EPS * max(1.0, r.trace.work) and r.stall_until <= self.now]
        for r in sorted(done, key=lambda r: r.name):
            self.occ.remove(r.name)
            del self.running[r.name]
            r.placements, r.model, r.rate, r.finish = None, None, 0.0, self.now
            r.remaining = 0.0
            self.done.append(r)
        return bool(done)

    def _arrive(self, i: int) -> int:
        while i < len(self.trace) and self.trace[i].submit <= self.now:
            tj = self.trace[i]
            r = JobRun(trace=tj, remaining=tj.work,
                       size=job_units(tj.job, self.catalog),
                       last_update=self.now)
            self.runs[r.name] = r
            self.waiting[r.name] = r
            i += 1
        return i

    # ----- rounds -----------------------------------------------------------------
    def _round(self) -> None:
        view = RoundView(self.now, self.config.round_s, self.cluster, self.occ,
                         sorted(self.running.values(), key=lambda r: r.name),
                         sorted(self.waiting.values(), key=lambda r: (r.submit, r.name)))
        t0 = time.perf_counter()
        decision = self.policy.schedule(view)
        self.round_times.append(time.perf_counter() - t0)
        self._apply(decision)
        self._record_tenants()

    def _record_tenants(self) -> None:
        usage: dict[str, float] = {}
        pending: dict[str, float] = {}
        smallest: dict[str, float] = {}
        for r in self.running.values():
            usage[r.job.tenant] = usage.get(r.job.tenant, 0.0) + r.size
        for r in self.waiting.values():
            t = r.job.tenant
            pending[t] = pending.get(t, 0.0) + r.size
            smallest[t] = min(smallest.get(t, math.inf), r.size)
        self.tenant_rounds.append(TenantRound(self.now, usage, pending, smallest))

    def _apply(self, decision: Decision) -> None:
        unknown = [j for j in decision if j not in self.running and j not in self.waiting]
        if unknown:
            raise InvariantError(f"{self.policy.name}: decision names unknown or finished "
                                 f"jobs {unknown[:3]}")
        occ = Occupancy(self.cluster, layouts={k: list(v)
                                               for k, v in self.occ.layouts().items()})
        # Running jobs first: their instances must be claimed before new ones reshape
        # a MIG layout around them.
        order = sorted(decision, key=lambda j: (j not in self.running, j))
        try:
            for name in order:
                occ.add(self.runs[name].job, decision[name])
        except CapacityError as e:
            raise InvariantError(f"{self.policy.name}: {e}") from e
        reconf = occ.reconfigured
        self.reconfigurations += len({k[0] for k in reconf})
        now = self.now
        for name, r in list(self.running.items()):
            pl = decision.get(name)
            if pl is None:
                r.preemptions += 1
                r.needs_restart = True
                r.placements, r.model, r.rate = None, None, 0.0
                r.stall_until = now
                r.last_run_end = now
                del self.running[name]
                self.waiting[name] = r
            elif not same_placement(pl, r.placements or []):
                if len(pl) != len(r.placements or []):
                    r.resizes += 1
                else:
                    r.migrations += 1
                self._start(r, pl, occ, reconf, overhead=True)
        for name, pl in decision.items():
            w = self.waiting.get(name)
            if w is None:
                continue
            del self.waiting[name]
            self.running[name] = w
            if w.first_start is None:
                w.first_start = now
            self._start(w, pl, occ, reconf, overhead=w.needs_restart)
            w.needs_restart = False
        self.occ = occ
        self._check()

    def _start(self, r: JobRun, pl: list[Placement], occ: Occupancy, reconf: set[GpuKey],
               *, overhead: bool) -> None:
        now = self.now
        r.placements = list(pl)
        r.model = occ.model_of(pl)
        r.rate = speed(r.job, r.model, self.catalog) * gang_factor(r.job, len(pl))
        r.held = float(len(pl)) if r.job.shape == "whole" else r.size
        r.last_update = now
        stall = now + (self.config.restart_overhead_s if overhead else 0.0)
        if any(p.mig is not None and (p.node, p.gpu) in reconf for p in pl):
            stall = max(stall, now + self.config.mig_reconfig_s)
        r.stall_until = max(now, stall)

    def _check(self) -> None:
        arrived = set(self.runs)
        finished = {r.name for r in self.done}
        active = set(self.running) | set(self.waiting)
        if set(self.running) & set(self.waiting):
            raise InvariantError("a job is both running and waiting")
        if active | finished != arrived or active & finished:
            raise InvariantError(f"lost jobs: {sorted(arrived - active - finished)[:3]}")
        if set(self.occ.jobs) != set(self.running):
            raise InvariantError("the occupancy and the running set disagree")

    # ----- main loop --------------------------------------------------------------
    def run(self) -> SimResult:
        """Replay the whole trace; every job completes or InvariantError is raised."""
        wall = time.perf_counter()
        n = len(self.trace)
        if n == 0:
            return SimResult(self.policy.name, [], [], [], 0, self._gpus_total(), 0, 0.0)
        i = 0
        self.now = self.trace[0].submit
        next_round = self.now
        dirty = True
        rounds = 0
        last_progress = (-1, -1)
        stuck = 0
        while len(self.done) < n:
            t_arr = self.trace[i].submit if i < n else math.inf
            t_fin = min((r.finish_estimate(self.now) for r in self.running.values()),
                        default=math.inf)
            t_round = next_round if (self.waiting or dirty or self._elastic_running()) \
                else math.inf
            t = min(t_arr, t_fin, max(t_round, self.now))
            if math.isinf(t):
                raise InvariantError(f"{self.policy.name}: jobs wait forever: "
                                     f"{sorted(self.waiting)[:3]}")
            self._advance(t)
            event = self._complete()
            i_new = self._arrive(i)
            event |= i_new > i
            i = i_new
            dirty |= event
            periodic = self.now >= next_round - _EPS
            eager = event and bool(self.waiting) and self.occ.has_idle_gpu()
            if periodic or eager:
                if self.waiting or dirty or self._elastic_running():
                    self._round()
                    rounds += 1
                    if rounds > self.config.max_rounds:
                        raise InvariantError(f"{self.policy.name}: over "
                                             f"{self.config.max_rounds} rounds")
                next_round = self.now + self.config.round_s
                dirty = False
                # No arrival left, nothing running, nothing started: nothing will change.
                progress = (len(self.done), len(self.running))
                if i >= n and not self.running and progress == last_progress:
                    stuck += 1
                    if stuck > 3:
                        raise InvariantError(f"{self.policy.name}: never places "
                                             f"{sorted(self.waiting)[:3]}")
                else:
                    stuck = 0
                last_progress = progress
            self._sample()
            if self.on_progress is not None and event:
                self.on_progress(len(self.done), n)
        return SimResult(self.policy.name, [self.runs[j.name] for j in self.trace],
                         self.samples, self.round_times, rounds, self._gpus_total(),
                         self.reconfigurations, time.perf_counter() - wall,
                         self.tenant_rounds, self.config.round_s)

    def _elastic_running(self) -> bool:
        """Whether a running elastic gang could be resized (rounds then stay periodic)."""
        return any(r.job.elastic is not None for r in self.running.values())

    def _gpus_total(self) -> int:
        return len(self.occ.gpus)


def gang_factor(job: Job, n: int) -> float:
    """speedup[n] / speedup[gpus]: an elastic gang's rate on n GPUs relative to its nominal
    size (1.0 for every other job, which only ever runs at its size)."""
    if job.elastic is None or job.gpus is None or n == job.gpus:
        return 1.0
    return speedup(job, n) / speedup(job, job.gpus)


def job_units(job: Job, catalog: Mapping[str, GpuModel]) -> float:
    """GPU equivalents a job holds: `gpus`, its share, or demanded compute slices / 7."""
    return job_size(job, catalog[_SIZE_MODEL])
