"""Warm plans of a planning session: the last plan kept, the new work placed into it.

Between two plans of a session only a few jobs and nodes change, and every job the last
plan placed runs where it put it (solver/session.py commits each plan as enacted). A cold
`solver.plan` ignores that: it compiles, bounds, builds a starting plan from nothing and
searches, and at a short limit stops at its first heuristic phase. `warm_plan` starts
from the state instead:

1. the running jobs keep their placements where these are still consistent (finished
   and cancelled jobs are gone, so their GPUs are free; a job the events released is
   pending again), and the pending and new jobs are placed into the free capacity in
   the objective's order: one greedy pass with `keep_running` (heuristics/greedy.py,
   its rules unchanged: best fit, eligibility, MIG, topology, quotas);
2. a re-pack toward the LP relaxation (`_repack`): kept where they run, the running jobs
   never move, and round after round the plans fall behind a cold solve of the same
   state, which starts from the rounded LP and migrates or preempts where the objective
   gains (M, 1,500 jobs, 20 events a round: 1.0000, 0.9975, ... 0.9867 of a cold 5 s
   solve's value after six rounds). So when its measured cost fits in the time left,
   the aggregated LP (solver/bound.py, each LP count rounded to the nearest integer:
   `relax(nearest=True)`) is solved, and its targets are rounded into a plan
   (heuristics/lp_round.py), in the same plan when that fits too, else in one of the
   next `TARGETS_MAX_AGE` plans; the rounded plan replaces the greedy pass's when it
   ranks higher (`solver.outcome.rank`: migration and preemption costs included). At M
   the LP costs 0.06-0.11 s of CPU and a rounding 0.03-0.07 s, so at 0.25 s they
   share a plan on a quiet machine, and alternate when the machine is slower: one plan
   solves the LP (and carries its bound), the next rounds. On a loaded machine neither
   fits beside the greedy pass and the finishing, so the session may also solve the LP
   between plans (`prepare`, called once a plan is answered: in process by the caller,
   in the service by the worker after sending the plan) on the state the plan left;
   the next plan rounds those targets (20 events older than its state: the jobs that
   left are skipped, the new ones placed by best fit) unless the LP and a rounding both
   fit in it;
3. the quick bound (solver/quick_bound.py) when no LP ran and its measured cost fits;
4. in a plan that ran neither the LP nor a rounding, the local search
   (heuristics/local_search.py) improves the plan for what is left of the limit, once
   the search's own start-up (loading the plan into its state) is known to fit: it is
   measured on each plan and kept in the `WarmMemo`; a search that found nothing better
   rests for a few plans (`_search`). After the LP and a rounding (0.15-0.2 s of CPU at
   M) a search filled the rest of a 0.25 s plan, and the plan's building and
   validation, dearer than the last one's, then ran it 0.07 s over;
5. quotas and priority classes: `heuristics.levels.settle_levels`, as the driver does
   (requests with levels skip step 2: the rounding does not serve them);
6. the plan is built (solver/build.py) and checked by the validator (solver/validate.py)
   against the session's current state, like every plan of the driver.

What is carried between plans is the `WarmMemo`: the MIG geometry with its cached layout
queries (`_geometry`), what each step cost last time (CPU seconds) and the pace of this
machine (wall seconds per CPU second, measured again as each plan runs), from which the
time kept back for building and validating and the choice of steps 2 to 4 follow. The
greedy pass is cut at the time kept back for finishing, but not before it had
`GREEDY_SHARE` of the limit to itself (a large state's fixed steps before it may take
that much and more: at 20,000 jobs the pass would otherwise place nothing).

It also carries the last warm plan's compiled jobs and its placer (`_Carry`: the
`heuristics.greedy.Greedy` with its occupancy, `models.instance.ClusterState`, at the
plan's placements), used when the session committed that very plan. The next plan brings
them forward by the deltas (`_advance`) instead of rebuilding them: the session shares
the request objects of unchanged jobs and nodes between versions, so the deltas are found
by name and identity in one pass over the jobs and one over the nodes. A job keeps its
JobInfo (which does not depend on its position in the request), or gets a copy with its
new `current` when the commit alone changed it; any other changed or new job is compiled
(`models.instance.compile_some`). The occupancy drops the jobs that left or changed,
refreshes the nodes that were cordoned or whose GPUs' health or MIG layouts changed (the
commit's MIG changes included) and appends the nodes that joined; the running jobs that
joined or changed are then kept as the greedy keeps them, and the pass places the pending
jobs on it (`heuristics.greedy.place_pending`). A plan after 20 events at 16,384 GPUs /
20,000 jobs compiles a few dozen jobs instead of 20,000 and updates the occupancy instead
of rebuilding it and re-keeping 6,800 running jobs. What the carried state cannot follow
(the catalog, topology levels, quotas, interference, objective or MIG policy changed; a
node left or changed otherwise; a GPU model or MIG mode new to the cluster; a policy
whose pass does not keep every running job up front) is rebuilt from scratch, as is
everything after a plan the session did not make warm, unless the state was made between
plans (`prepare_carry`: the committed state compiled, its running jobs kept and its
pending jobs priced in a new placer, off the next plan's path). The placer's pricing
keeps its rows (`heuristics.prices.PriceRows`), and `hard_conflicts` is asked of a
carried plan only when the deltas brought a non-preemptible running job
(`_conflicts_checked`). Building the plan reads the job classes of the fragmentation
figure, which the carried state brings forward by the jobs that left and joined
(heuristics/fragmentation.py `carry_job_classes`: a pass over the first jobs instead of
all, 0.03 s of CPU at 20,000 jobs); the new jobs are compiled with the carried models
present (the nodes that may change do not change them), without the usable-GPU summary
of the whole cluster. When no node changed (events on jobs alone, a commit without MIG
changes), the plan starts with the last plan's reads of the cluster (`CLUSTER_SLOTS`).
Otherwise building and validating the plan are not carried: each plan is built and
validated whole against the session's state (the validator reads nothing carried).

The cold path (`solver.plan` with the time left) answers when the warm start does not
apply: in deterministic mode (its path must not depend on timing), when non-preemptible
running jobs conflict (`hard_conflicts`: the driver's infeasible answer), and when the
greedy stopped a running job the policy forbids stopping (the validator's `running`
rule: the driver then asks CP-SAT for a plan that keeps it). Any other violation is a
bug and raises `PlanningError`, as in the driver.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from dataclasses import dataclass, field
from threading import Event

from heuristics.fragmentation import carry_job_classes, request_job_classes
from heuristics.greedy import Greedy, keeps_all_running, place_pending
from heuristics.levels import settle_levels
from heuristics.local_search import improve
from heuristics.lp_round import plan_lp_round
from heuristics.result import HeuristicResult
from models import Job, Node, Plan, PlanRequest
from models.cache import cached
from models.instance import (
    ClusterState,
    JobInfo,
    MigGeometry,
    compile_jobs,
    compile_some,
    mig_geometry,
    models_by_mode,
    per_request,
)
from models.rules import lexicographic_levels
from solver.auto import EXACT_VARS, estimate_vars
from solver.bound import CUT, Relaxation, relax
from solver.budget import FINISH_MARGIN_S, finish_prior
from solver.build import build_plan
from solver.driver import PlanningError, note_overrun
from solver.driver import plan as cold_plan
from solver.gcpause import gc_paused
from solver.outcome import LP_ROUND_OBJECTIVES, label, rank
from solver.portfolio import QUICK_CPU_PER_JOB, ROUNDING_CPU_PER_JOB
from solver.quick_bound import quick_bound
from solver.reasons import hard_conflicts
from solver.validate import validate_plan

log = logging.getLogger(__name__)

#: Safety factor on the estimated finishing time (build and validate).
FINISH_SAFETY = 1.3
#: The local search runs only when at least this many seconds of search are left once
#: its start-up (measured) is paid.
SEARCH_MIN_S = 0.02
#: The local search's start-up (loading the plan into its state, the final comparison)
#: before it was measured, CPU seconds per job: M 0.04 s, L (20,000 jobs) 0.8 s.
SEARCH_START_CPU_PER_JOB = 4e-5
#: Plans a local search that keeps finding nothing rests at most (`_search`).
SEARCH_REST_MAX = 8
#: The quick bound runs when the time left is at least this many times its estimate
#: (plus the finishing reserve): the plan's quality comes first.
BOUND_ROOM = 4.0
#: Bounds of the measured pace (wall seconds per CPU second).
PACE_RANGE = (1.0, 12.0)
#: CPU seconds of measured steps below which the pace of this plan is not trusted yet
#: (the last plan's pace stands in).
PACE_MIN_CPU_S = 0.01
#: The greedy pass may run for this share of the limit from its start even when the
#: finishing reserve would stop it earlier: placing the new work is what a session plan
#: is for (finishing then runs past the limit by at most the rest of its reserve).
GREEDY_SHARE = 0.6
#: The LP relaxation of a session's state before it was measured, CPU seconds per job
#: (grouping, rows, one LP solve; the integer re-solve runs only when its slice is worth
#: it): M (1,500 jobs) 0.06-0.115 s measured in sessions. The portfolio's prior
#: (`RELAX_CPU_PER_JOB`, 0.075 s at M) adds a fixed 0.1 s for the first solve of a
#: process, which a session has paid; without it, a first LP of 0.114 s at pace 1.6 ran
#: a 0.25 s plan 0.06 s over. Higher, the first LP would not fit at 0.25 s even on a
#: quiet machine (and, never measured, would never run).
REPACK_RELAX_CPU_PER_JOB = 6.5e-5
#: One rounding of the LP's targets before it was measured: M 0.03-0.15 s.
REPACK_ROUND_CPU_PER_JOB = 2 * ROUNDING_CPU_PER_JOB
#: Safety factor on the estimated cost of the LP and of the rounding (`_repack`).
REPACK_SAFETY = 1.3
#: Plans the LP's targets wait for a rounding that fits, at most (then the LP runs
#: again): the jobs that left since are skipped, the new ones placed by best fit.
TARGETS_MAX_AGE = 3
#: CPU seconds the LP between two plans (`prepare`) may be expected to take, at most (its
#: last measured cost): M 0.1-0.35 s runs (with the integer re-solve of its gangs), L
#: (1-2 s) does not. Its wall time is that times the machine's pace (up to 12 at load 12
#: on two cores), and a plan asked meanwhile waits for it.
PREPARE_MAX_CPU_S = 0.5
#: The time limit of the LP between two plans, seconds (solver/bound.py `relax`: half of
#: it at most goes to the integer re-solve).
PREPARE_LP_S = 0.5
#: The per-request precomputations (`models.cache.per_request` slots) that read the
#: cluster alone, and of the policy at most `allow_mig_reconfiguration` (in `_context`):
#: the GPU table (models/gpu_table.py), the fragmentation figure's GPUs and MIG layouts
#: (heuristics/fragmentation.py), the MIG facts of finishing (solver/build.py), the GPU
#: models by key (models/objective.py `gpu_models_of`), the usable-GPU summary
#: (models/capacity.py) and a fresh state's node facts (models/instance.py). A warm plan
#: whose nodes are all the last plan's objects starts with the last plan's (L: 0.04 s of
#: CPU of building the plan). The validator reads none of them.
CLUSTER_SLOTS = ("gpu_table", "fragmentation_gpus", "mig_facts", "gpu_models", "capacity",
                 "cluster_facts")


@dataclass
class _Carry:
    """What a warm plan leaves to the next one (module doc, "carried"): the state it
    planned, its compiled jobs by name, the placer holding the plan's occupancy (None
    when a pass does not keep every running job up front: `keeps_all_running`), the plan
    itself (the next plan starts from it only when the session committed it) and what
    the compiled jobs depend on beyond each job (`_context`)."""

    request: PlanRequest
    infos: dict[str, JobInfo]
    greedy: Greedy | None
    plan: Plan
    context: tuple[object, ...]
    #: models the cluster has on non-MIG GPUs and on MIG GPUs (the compiled values)
    present: tuple[frozenset[str], frozenset[str]]
    #: the job classes of the plan's fragmentation figure (heuristics/fragmentation.py
    #: `request_job_classes`; None: not made)
    classes: object | None = None
    #: what the plan's request kept of its cluster alone (`CLUSTER_SLOTS`), by slot
    cluster: dict[str, object] = field(default_factory=dict)


@dataclass
class _Advanced:
    """The carried state brought to the next request (`_advance`)."""

    infos: list[JobInfo]
    greedy: Greedy | None
    #: the running jobs that joined or changed, to keep where they run
    touched: list[JobInfo]
    present: tuple[frozenset[str], frozenset[str]]
    #: the carried JobInfos of the jobs that left or were compiled again, and the
    #: JobInfos compiled for the jobs that joined or changed
    left: list[JobInfo]
    joined: list[JobInfo]
    #: every node is the carried state's own object, in its place
    same_nodes: bool


@dataclass
class _Pass:
    """The greedy pass of a warm plan (`_start`): its placer (None when it cannot be
    carried: `keeps_all_running` is false), the compiled jobs, the models present and
    the pass's result."""

    placer: Greedy | None
    infos: list[JobInfo]
    present: tuple[frozenset[str], frozenset[str]]
    result: HeuristicResult


@dataclass
class WarmMemo:
    """What a session keeps from one warm plan to the next: what the steps cost (CPU
    seconds; None: not measured yet), the machine's pace, the MIG geometry."""

    finish_cpu: float | None = None
    bound_cpu: float | None = None
    #: how far the local search ran past the deadline it was given (its start-up and
    #: its final comparison), as CPU seconds at the pace it ran at
    search_extra_cpu: float | None = None
    #: searches in a row that found nothing better, and the plans left to rest (`_search`)
    search_idle: int = 0
    search_wait: int = 0
    #: plans whose search rested
    rested: int = 0
    #: wall seconds per CPU second over the whole last warm plan
    pace: float | None = None
    #: warm plans made so far, and those that fell back to the cold path
    plans: int = 0
    cold: int = 0
    #: CPU seconds of each step of the last warm plan (benchmarks report them)
    last_steps: dict[str, float] = field(default_factory=dict)
    #: the MIG geometry of the last plan and what it depends on (`_geometry`)
    geometry: MigGeometry | None = None
    geometry_key: tuple[object, ...] | None = None
    #: the last warm plan's compiled jobs and placer (`_Carry`), and how many plans
    #: started from them
    carry: _Carry | None = None
    carried: int = 0
    #: the LP's CPU seconds and a rounding's (`_repack`, None: not measured yet), the
    #: targets of an LP whose rounding did not fit beside it (job -> model, the
    #: elastic gangs' sizes), for the next plan, and the plans whose rounding won
    relax_cpu: float | None = None
    round_cpu: float | None = None
    targets: tuple[dict[str, str], dict[str, float]] | None = None
    targets_age: int = 0
    repacked: int = 0
    #: `targets` came from the LP solved between plans (`prepare`), on the committed state
    #: before the events since; the LPs solved so far between plans
    prepared: bool = False
    prepares: int = 0
    #: CPU seconds of the last LP between plans (apart from `relax_cpu`: it may run the
    #: integer re-solve, which a plan's LP, given what is left of its limit, does not)
    prepare_cpu: float | None = None


class _Clock:
    """The deadline of one warm plan and the pace measured so far."""

    def __init__(self, limit_s: float, cancel: Event | None, pace: float | None) -> None:
        self.t0 = time.monotonic()
        self.cpu0 = time.process_time()
        self.limit_s = limit_s
        self.deadline = self.t0 + limit_s
        self.cancel = cancel
        self.prior_pace = pace if pace is not None else 1.0
        self._wall = 0.0
        self._cpu = 0.0

    @property
    def pace(self) -> float:
        """Wall seconds per CPU second of the steps measured so far (the last plan's
        pace until they add up to `PACE_MIN_CPU_S`)."""
        if self._cpu < PACE_MIN_CPU_S:
            return self.prior_pace
        lo, hi = PACE_RANGE
        return min(hi, max(lo, self._wall / self._cpu))

    def left(self) -> float:
        """Wall seconds left until the deadline."""
        return self.deadline - time.monotonic()

    def cancelled(self) -> bool:
        """Whether the caller cancelled the plan."""
        return self.cancel is not None and self.cancel.is_set()

    def measure(self, wall: float, cpu: float) -> None:
        """Count a step that took `wall` seconds and `cpu` CPU seconds in the pace."""
        self._wall += wall
        self._cpu += cpu

    def overall_pace(self) -> float:
        """Wall seconds per CPU second since the plan started."""
        cpu = time.process_time() - self.cpu0
        lo, hi = PACE_RANGE
        return min(hi, max(lo, (time.monotonic() - self.t0) / cpu)) if cpu > 0 else lo


def applies(request: PlanRequest) -> bool:
    """Whether a session plan of `request` (with a last plan) starts warm: under the
    `auto` and `heuristic` policies, outside deterministic mode, when `auto` would not
    solve the full model exactly (solver/auto.py: `estimate_vars` over twice
    `EXACT_VARS`, the rule of `full_model`). Smaller requests, and the exact policies,
    are solved cold: there the exact solve is quick and proves what it returns."""
    policy = request.policy
    if policy.deterministic or policy.solver not in ("auto", "heuristic"):
        return False
    if policy.solver == "heuristic":
        return True
    # estimate_vars is (distinct pending job shapes + running jobs) x nodes: the running
    # jobs alone often decide, without a pass over the pending jobs' shapes, and the count
    # stops once they do (at 16,384 GPUs, 2,048 nodes: after 20 running jobs)
    nodes = len(request.cluster.nodes)
    running = 0
    for job in request.jobs:
        if job.current:
            running += 1
            if running * nodes > 2 * EXACT_VARS:
                return True
    return estimate_vars(request) > 2 * EXACT_VARS


def warm_plan(request: PlanRequest, memo: WarmMemo | None = None, *,
              cancel: Event | None = None, last: Plan | None = None) -> Plan:
    """A validated plan of `request` within `policy.time_limit_s`, started from its running
    jobs' placements (module doc); `memo` carries the measured costs from plan to plan,
    and the compiled jobs and placer of the last warm plan when that plan is `last`
    (the plan the session committed: `request` is its state after the deltas since).
    The cyclic collector is paused meanwhile (solver/gcpause.py)."""
    memo = memo if memo is not None else WarmMemo()
    carry, memo.carry = memo.carry, None  # consumed; a warm plan leaves its own
    if carry is not None and (last is None or carry.plan is not last):
        carry = None
    with gc_paused():
        clock = _Clock(request.policy.time_limit_s, cancel, memo.pace)
        if request.policy.deterministic:
            return _cold(request, clock, memo, cancel)
        steps: dict[str, float] = {}
        first = _start(request, clock, memo, steps, carry)
        if first is None:  # non-preemptible running jobs conflict: the driver's answer
            return _cold(request, clock, memo, cancel)
        repacked = memo.repacked
        result, bound = _repack(request, first.result, clock, memo, steps)
        if bound is None:
            bound = _bound(request, clock, memo, steps)
        rested = memo.rested
        if "relax" not in steps and "round" not in steps:
            result = _search(request, result, clock, memo, steps)
        if lexicographic_levels(request):
            # the guarantee step stops at the finishing reserve, as on the cold path
            result = settle_levels(request, result,
                                   clock.deadline - _reserve(request, clock, memo))
        plan = _finish(request, result, bound, clock, memo, steps,
                       rested=memo.rested > rested, repacked=memo.repacked > repacked)
        if plan is None:
            return _cold(request, clock, memo, cancel)
        memo.carry = _carry_over(request, first, result is not first.result, plan)
        memo.plans += 1
        memo.last_steps = steps
        memo.pace = clock.overall_pace()
        log.debug("warm plan in %.3f s (limit %.3f s, pace %.1f): CPU per step %s",
                  plan.solve_time_s, clock.limit_s, memo.pace,
                  {k: round(v, 4) for k, v in steps.items()})
        return plan


class _Step:
    """Records the CPU seconds of step `name` of a warm plan in `steps` (and, with
    `clock`, the pace it ran at)."""

    def __init__(self, steps: dict[str, float], name: str, clock: _Clock | None = None
                 ) -> None:
        self.steps, self.name, self.clock = steps, name, clock

    def __enter__(self) -> _Step:
        self.wall, self.cpu = time.monotonic(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        cpu = time.process_time() - self.cpu
        self.steps[self.name] = self.steps.get(self.name, 0.0) + cpu
        if self.clock is not None:
            self.clock.measure(time.monotonic() - self.wall, cpu)


def _reserve(request: PlanRequest, clock: _Clock, memo: WarmMemo) -> float:
    """Wall seconds kept back for building and validating the plan."""
    cpu = memo.finish_cpu if memo.finish_cpu is not None else finish_prior(
        len(request.jobs), _gpus(request))
    return FINISH_SAFETY * cpu * clock.pace + FINISH_MARGIN_S / 10


def _start(request: PlanRequest, clock: _Clock, memo: WarmMemo, steps: dict[str, float],
           carry: _Carry | None) -> _Pass | None:
    """The running jobs kept, the other jobs placed by one greedy pass: on the placer
    carried from the last plan (`carry`, brought to `request` by the deltas) or on a new
    one. None when non-preemptible running jobs conflict (`hard_conflicts`), which is
    asked only when it may have changed (`_conflicts_checked`)."""
    keep_all = keeps_all_running(request, True)
    with _Step(steps, "compile", clock):
        _geometry(request, memo)
        ahead = _advance(carry, request) if carry is not None else None
        if not _conflicts_checked(ahead, keep_all) and hard_conflicts(request):
            return None
        if ahead is not None:
            infos, present = ahead.infos, ahead.present
            per_request(request, "jobs", lambda _r: infos)
            if carry is not None and carry.classes is not None:
                carry_job_classes(request, carry.classes, infos, ahead.left, ahead.joined)
            if carry is not None and ahead.same_nodes:
                for slot, value in carry.cluster.items():
                    per_request(request, slot, functools.partial(_kept, value))
        else:
            infos, present = compile_jobs(request), models_by_mode(request)
    with _Step(steps, "greedy", clock):
        if ahead is not None and ahead.greedy is not None and keep_all:
            g = ahead.greedy
            failed = g.keep_running(among=ahead.touched)
            memo.carried += 1
        else:
            g = Greedy(request, infos)
            failed = g.keep_running(preemptible=keep_all)
        stop = max(clock.deadline - _reserve(request, clock, memo),
                   time.monotonic() + GREEDY_SHARE * clock.limit_s)
        result = place_pending(g, failed, order=None, seed=request.policy.seed,
                               deadline=stop, keep_all=keep_all)
    return _Pass(g if keep_all else None, infos, present, result)


def _kept(value: object, _request: PlanRequest) -> object:
    """`value`, as the per-request cache builds it (`_start`: a carried slot)."""
    return value


def _conflicts_checked(ahead: _Advanced | None, keep_all: bool) -> bool:
    """Whether the carried state (`ahead`) already tells that no two non-preemptible
    running jobs conflict (`hard_conflicts` would find nothing; a pass over every job,
    0.02 s of CPU at 20,000 jobs): its occupancy holds the last plan, which passed the
    validator and which the session committed (or, made between plans, every running job
    of the committed state, all kept: `prepare_carry`), so the running jobs it holds fit
    together, host resources included; the nodes changed since only by cordons, GPU
    health and MIG layouts (`_refreshable`: none of these is a conflict, and a job on a
    vanished instance is pending again), and every running job that joined or changed is
    in `touched`. So a conflict needs a non-preemptible job among those."""
    return ahead is not None and ahead.greedy is not None and keep_all and \
        not any(i.pinned for i in ahead.touched)


def _geometry(request: PlanRequest, memo: WarmMemo) -> None:
    """Seed the last plan's MIG geometry (kept in `memo`) into the per-request cache
    (`models.instance.per_request`) when the catalog and `allow_mig_reconfiguration` are
    the same: its layout queries, cached inside it, are then not asked again."""
    key = (request.cluster.gpu_models, request.policy.allow_mig_reconfiguration)
    if memo.geometry is not None and memo.geometry_key == key:
        kept = memo.geometry
        per_request(request, "mig_geometry", lambda _r: kept)
    memo.geometry, memo.geometry_key = mig_geometry(request), key


# ------------------------------------------------------- carried from plan to plan


def _context(request: PlanRequest) -> tuple[object, ...]:
    """What the compiled jobs and the placer's occupancy depend on beyond the jobs and
    nodes: the catalog's overrides, the topology levels, quotas, interference pairs, the
    objective and whether MIG layouts may change."""
    c, p = request.cluster, request.policy
    return (c.gpu_models, c.topology_levels, c.quotas, request.interference, p.objective,
            p.allow_mig_reconfiguration)


def _carry_over(request: PlanRequest, first: _Pass, moved: bool, plan: Plan) -> _Carry:
    """What this plan leaves to the next one; `moved`: the search or the levels changed
    the greedy pass's placements, which the placer's occupancy then follows (the plan
    passed the validator, so every placement it adds fits)."""
    placer = first.placer
    if placer is not None and moved:
        final = {a.job: a.placements for a in plan.assignments}
        st = placer.state
        for name, pls in list(st.placed.items()):
            if final.get(name) != pls:
                st.remove(placer.by_name[name])
        for name, pls in final.items():
            if name not in st.placed:
                st.place(placer.by_name[name], list(pls))
    kept = {slot: value for slot in CLUSTER_SLOTS
            if (value := cached(request, slot)) is not None}
    return _Carry(request, {i.name: i for i in first.infos}, placer, plan,
                  _context(request), first.present, request_job_classes(request), kept)


def _advance(carry: _Carry, request: PlanRequest) -> _Advanced | None:
    """The carried compiled jobs and placer brought to `request`, the carried state after
    the session's deltas and the commit of the carried plan (module doc). Jobs are told
    apart by name and their request objects, which the session shares between versions
    for what did not change: an unchanged job keeps its JobInfo; one whose `current`
    alone changed (the commit) gets a copy with it; any other is compiled again, and
    the placer's occupancy drops the jobs that left or changed and did not stay where
    it holds them. None when the carried state cannot follow (`_context` changed, a node
    left or changed beyond `_refreshable`, a node brought a GPU model or MIG mode the
    cluster did not have): the plan then compiles and places from scratch."""
    if _context(request) != carry.context:
        return None
    nodes = _node_deltas(carry, request)
    if nodes is None:
        return None
    g = carry.greedy
    st = g.state if g is not None else None
    infos: list[JobInfo | None] = []
    fresh: list[tuple[int, Job]] = []
    touched: list[JobInfo] = []
    dropped: list[str] = []  # jobs that left or were compiled again
    left: list[JobInfo] = []  # their carried JobInfos
    matched = 0
    for job in request.jobs:
        old = carry.infos.get(job.name)
        if old is None:
            fresh.append((len(infos), job))
            infos.append(None)
            continue
        matched += 1
        if old.job is job:
            infos.append(old)
        elif _same_but_current(old.job, job):
            info = _with_current(old, job)
            infos.append(info)
            if st is not None and not _holds(st, old, info):
                st.remove(old)
                touched.append(info)
        else:
            if st is not None:
                st.remove(old)
            dropped.append(job.name)
            left.append(old)
            fresh.append((len(infos), job))
            infos.append(None)
    if matched < len(carry.infos):
        names = {j.name for j in request.jobs}
        for name, old in carry.infos.items():
            if name not in names:
                dropped.append(name)
                left.append(old)
                if st is not None:
                    st.remove(old)
    # the models present are the carried ones: `_node_deltas` let no node change them
    joined = compile_some(request, [j for _, j in fresh], carry.present)
    for (at, _), info in zip(fresh, joined, strict=True):
        infos[at] = info
        if info.current:
            touched.append(info)
    compiled = [i for i in infos if i is not None]
    refreshed, added = nodes
    if g is not None:
        for node in refreshed:
            g.state.refresh_node(node)
        for node in added:
            g.state.add_node(node)
        g.rebase(request, compiled, dropped, bool(refreshed or added))
    same = not refreshed and not added and all(
        a is b for a, b in zip(request.cluster.nodes, carry.request.cluster.nodes,
                               strict=True))
    return _Advanced(compiled, g, touched, carry.present, left, joined, same)


def _node_deltas(carry: _Carry, request: PlanRequest) -> tuple[list[Node], list[Node]] | None:
    """(nodes changed within `_refreshable`, nodes added) from the carried state to
    `request`; None when a node left, changed otherwise, or brings a GPU model or MIG
    mode the cluster did not have (the compiled jobs' values would change)."""
    old = {n.name: n for n in carry.request.cluster.nodes}
    whole, mig = carry.present
    refreshed: list[Node] = []
    added: list[Node] = []
    seen = 0
    for node in request.cluster.nodes:
        before = old.get(node.name)
        if before is None:
            if not all(g.model in (mig if g.mig_enabled else whole) for g in node.gpus):
                return None
            added.append(node)
            continue
        seen += 1
        if before is not node:
            if not _refreshable(before, node):
                return None
            refreshed.append(node)
    return (refreshed, added) if seen == len(old) else None


def _refreshable(a: Node, b: Node) -> bool:
    """Whether node `a` became `b` by a cordon, GPU health or MIG layout changes alone
    (`models.instance.ClusterState.refresh_node`)."""
    if (a.labels, a.topology_domain, a.topology, a.cpu_millicores, a.memory_gib) != \
            (b.labels, b.topology_domain, b.topology, b.cpu_millicores, b.memory_gib):
        return False
    return len(a.gpus) == len(b.gpus) and all(
        (x.index, x.model, x.mig_enabled) == (y.index, y.model, y.mig_enabled)
        for x, y in zip(a.gpus, b.gpus, strict=True))


def _same_but_current(a: Job, b: Job) -> bool:
    """Whether jobs `a` and `b` differ in their `current` placement alone."""
    other = b.__dict__
    return a.__dict__.keys() == other.keys() and all(
        k == "current" or v is other[k] or v == other[k] for k, v in a.__dict__.items())


def _with_current(info: JobInfo, job: Job) -> JobInfo:
    """`info` for `job`, which differs from its job in `current` alone."""
    out = copy.copy(info)
    out.job, out.current = job, job.current
    return out


def _holds(st: ClusterState, old: JobInfo, new: JobInfo) -> bool:
    """Whether the occupancy `st`, which holds `old`'s job as the last plan placed it,
    holds `new` (the same job with its `current` changed by the commit) as it is: placed
    at its current placement or not at all, and charged to the quotas as it now counts
    (a non-preemptible running job's usage is kept apart: ClusterState.place)."""
    placed = st.placed.get(new.name)
    if not placed:
        return not new.current
    if placed != new.current:
        return False
    return not st.quotas or old.pinned == new.pinned


def _repack(request: PlanRequest, result: HeuristicResult, clock: _Clock, memo: WarmMemo,
            steps: dict[str, float]) -> tuple[HeuristicResult, float | None]:
    """`result`, or the LP's targets rounded into a plan (heuristics/lp_round.py) when
    that ranks higher; and the LP's bound when the LP ran in this plan (module doc, step
    2). The LP runs when its measured cost fits in the time left; the rounding follows
    in the same plan when it fits too, else in one of the next `TARGETS_MAX_AGE` plans
    on these targets (the jobs that left since are skipped, the new ones placed by best
    fit), which run no LP. Targets solved between plans (`prepare`) are rounded unless
    the LP and a rounding both fit in this plan (then the LP of this state is solved)."""
    pending, memo.targets = memo.targets, None
    prepared, memo.prepared = memo.prepared and pending is not None, False
    age = memo.targets_age + 1 if pending is not None else 0
    if clock.cancelled() or request.policy.objective not in LP_ROUND_OBJECTIVES or \
            lexicographic_levels(request):
        return result, None
    bound = None
    round_prior = memo.round_cpu if memo.round_cpu is not None else \
        REPACK_ROUND_CPU_PER_JOB * len(request.jobs)
    if pending is None or age > TARGETS_MAX_AGE or (
            prepared and _relax_fits(request, clock, memo, round_prior)):
        rel = _relax(request, clock, memo, steps)
        if rel is not None and rel.targets:
            age, bound, pending = 0, rel.bound, (rel.targets, rel.amounts)
        elif not prepared or age > TARGETS_MAX_AGE:
            # no LP solution within its time (the capacity-free fallback, looser than
            # the quick bound) or nothing to round: the quick bound may stand in
            return result, None
    assert pending is not None
    stop = clock.deadline - _reserve(request, clock, memo)
    if stop - time.monotonic() < REPACK_SAFETY * round_prior * clock.pace:
        memo.targets, memo.targets_age = pending, age  # they wait for the next plan
        memo.prepared = prepared and bound is None
        return result, bound
    targets, sizes = pending
    with _Step(steps, "round", clock):
        rounded = plan_lp_round(request, targets, deadline=stop, sizes=sizes)
        better = rank(request, rounded.placements) > rank(request, result.placements)
    memo.round_cpu = steps["round"]
    if better:
        memo.repacked += 1
        return rounded, bound
    return result, bound


def _relax_fits(request: PlanRequest, clock: _Clock, memo: WarmMemo, round_cpu: float
                ) -> bool:
    """Whether the LP (`_relax`'s estimate) and a rounding of `round_cpu` CPU seconds
    both fit in the time left."""
    est = (memo.relax_cpu if memo.relax_cpu is not None
           else REPACK_RELAX_CPU_PER_JOB * len(request.jobs)) + round_cpu
    room = clock.deadline - _reserve(request, clock, memo) - time.monotonic()
    return room >= REPACK_SAFETY * est * clock.pace


def _relax(request: PlanRequest, clock: _Clock, memo: WarmMemo,
           steps: dict[str, float]) -> Relaxation | None:
    """The LP relaxation of `request` (solver/bound.py) when its measured cost fits in
    the time left; None when it does not (or the relaxation is infeasible)."""
    if not _relax_fits(request, clock, memo, 0.0):
        return None
    prior = REPACK_RELAX_CPU_PER_JOB * len(request.jobs) * clock.pace
    room = clock.deadline - _reserve(request, clock, memo) - time.monotonic()
    with _Step(steps, "relax", clock):
        # HiGHS's share of the room: what the grouping and rows (Python) leave of it
        rel = relax(request, time_limit_s=max(0.05, room - prior), nearest=True)
    # cautious: an LP dearer than the last counts whole, a cheaper one half
    cpu, last = steps["relax"], memo.relax_cpu
    memo.relax_cpu = cpu if last is None else max(cpu, (cpu + last) / 2)
    return rel


def prepare_carry(request: PlanRequest, memo: WarmMemo, last: Plan) -> bool:
    """Between two plans of a session: when the next warm plan would have nothing carried
    to start from (`last`, the plan the session committed, was not a warm plan, or left
    none: after the session's first plan, a plan of another planner, the cold path),
    compile the committed state `request` and keep its running jobs in a placer, as the
    carried state of `last` (`_Carry`): the next plan then brings it forward by the
    deltas instead of compiling 20,000 jobs and keeping 6,800 running ones on its path (L:
    0.35-0.45 s of CPU that the first warm plan after a cold one paid). Not when the
    policy's pass does not keep every running job up front, when `last` is infeasible,
    or when a running job does not fit beside the others (the plan then decides).
    Whether it made one."""
    if last.status == "infeasible" or (memo.carry is not None and memo.carry.plan is last) \
            or request.policy.deterministic or not applies(request) \
            or not keeps_all_running(request, True):
        return False
    with gc_paused():
        _geometry(request, memo)  # the placer's and the next plan's, as in a warm plan
        infos = compile_jobs(request)
        placer = Greedy(request, infos)
        if placer.keep_running():
            return False
        placer.price_pending()  # the rows its next pass prices from
        memo.carry = _Carry(request, {i.name: i for i in infos}, placer, last,
                            _context(request), models_by_mode(request))
    return True


def prepare(request: PlanRequest, memo: WarmMemo, stop: Event | None = None) -> bool:
    """Between two plans of a session: solve the LP relaxation of its committed state
    `request` and keep its targets in `memo` for the next warm plan's rounding
    (`_repack`), when the LP is expected (its last measured CPU) to take at most
    `PREPARE_MAX_CPU_S`. On a loaded machine the LP no longer fits in a short
    plan beside the greedy pass and the finishing (M, 0.25 s, four busy processes on
    two cores: no LP in ten plans), and the plans drift from a cold solve's value; the
    time between plans is the session's own. Its bound is not carried (the next state
    differs by the events since). It does not run after a plan whose own LP fitted (a
    quiet machine: 0.1-0.35 s of CPU spent for nothing). Targets from between plans that
    no plan could round yet
    are kept until `TARGETS_MAX_AGE` (a slow machine would otherwise pay an LP per plan
    for nothing). Once `stop` is set the LP gives up (the caller needs the thread for
    the next plan), and nothing of it is kept, its cost neither. Whether it ran to its
    end."""
    if memo.plans == 0 or request.policy.deterministic or not applies(request) or \
            request.policy.objective not in LP_ROUND_OBJECTIVES or \
            lexicographic_levels(request):
        return False
    if "relax" in memo.last_steps:
        return False  # the last plan's own LP fitted: the next one's likely will too
    if memo.prepared and memo.targets is not None and memo.targets_age < TARGETS_MAX_AGE:
        return False  # the last ones still wait for a rounding that fits (`_repack`)
    cpu = memo.prepare_cpu if memo.prepare_cpu is not None else \
        REPACK_RELAX_CPU_PER_JOB * len(request.jobs)
    if cpu > PREPARE_MAX_CPU_S:
        return False
    with gc_paused():
        c0 = time.process_time()
        rel = relax(request, time_limit_s=PREPARE_LP_S, nearest=True, stop=stop)
        if rel is CUT:
            return False  # given up (`stop`): its cost so far is not the LP's
        memo.prepare_cpu = time.process_time() - c0
    memo.prepares += 1
    if rel is None or not rel.targets:
        return False
    memo.targets, memo.targets_age, memo.prepared = (rel.targets, rel.amounts), 0, True
    return True


def _bound(request: PlanRequest, clock: _Clock, memo: WarmMemo,
           steps: dict[str, float]) -> float | None:
    """The quick bound when its estimate fits BOUND_ROOM times in the time left."""
    prior = memo.bound_cpu if memo.bound_cpu is not None else \
        QUICK_CPU_PER_JOB * len(request.jobs)
    room = clock.left() - _reserve(request, clock, memo)
    if clock.cancelled() or room < BOUND_ROOM * prior * clock.pace:
        return None
    with _Step(steps, "bound", clock):
        value = quick_bound(request)
    memo.bound_cpu = steps["bound"]
    return value


def _search(request: PlanRequest, result: HeuristicResult, clock: _Clock,
            memo: WarmMemo, steps: dict[str, float]) -> HeuristicResult:
    """`result` improved by the local search for the time left, when its start-up fits
    and it is not resting: a search that found nothing better rests for the next plan,
    after a second such search for three plans, then seven..., up to `SEARCH_REST_MAX`
    (consecutive plans of a session are alike: at 1,024 GPUs / 1,500 jobs a warm start
    searched for 0.08-0.4 s of CPU per plan and found nothing in any of 10 rounds)."""
    extra = (memo.search_extra_cpu if memo.search_extra_cpu is not None
             else SEARCH_START_CPU_PER_JOB * len(request.jobs)) * clock.pace
    stop = clock.deadline - _reserve(request, clock, memo)
    if clock.cancelled() or stop - time.monotonic() < extra + SEARCH_MIN_S:
        return result
    if memo.search_wait > 0:
        memo.search_wait -= 1
        memo.rested += 1
        return result
    until = stop - extra
    began, cpu0 = time.monotonic(), time.process_time()
    out = improve(request, result, deadline=until, seed=request.policy.seed,
                  cancel=clock.cancel)
    cpu = time.process_time() - cpu0
    steps["search"] = cpu
    if out is result:  # nothing better found: rest 1, 3, 7... plans
        memo.search_idle += 1
        memo.search_wait = min(2 ** memo.search_idle - 1, SEARCH_REST_MAX)
    else:
        memo.search_idle = 0
    wall = time.monotonic() - began
    if wall > 0:
        # the part of the call past its deadline, in CPU seconds at this call's pace
        over = max(0.0, time.monotonic() - until)
        memo.search_extra_cpu = over * cpu / wall if cpu > 0 else over
    return out


def _finish(request: PlanRequest, result: HeuristicResult, bound: float | None,
            clock: _Clock, memo: WarmMemo, steps: dict[str, float], *,
            rested: bool = False, repacked: bool = False) -> Plan | None:
    """The validated Plan of `result` (None: it stops a running job the policy forbids
    stopping: the cold path decides); `rested`: the local search rested (`_search`);
    `repacked`: `result` started from the LP's rounded targets (`_repack`)."""
    with _Step(steps, "build", clock):
        plan = build_plan(request, result, status="heuristic",
                          solver=label(request, "heuristic"), best_bound=bound,
                          explanation=_notes(steps, bound, rested, repacked))
    with _Step(steps, "validate", clock):
        violations = validate_plan(request, plan)
    memo.finish_cpu = steps["build"] + steps["validate"]
    if violations:
        if all(v.rule == "running" for v in violations):
            return None
        raise PlanningError("the warm start produced an invalid plan: " + "; ".join(
            f"[{v.rule}] {v.message}" for v in violations[:5]))
    plan.solve_time_s = round(time.monotonic() - clock.t0, 6)
    note_overrun(plan, request, _gpus(request), clock.pace,
                 (steps["build"] + steps["validate"]) * clock.pace)
    return plan


def _gpus(request: PlanRequest) -> int:
    """The GPUs of `request`'s cluster."""
    return sum(len(n.gpus) for n in request.cluster.nodes)


def _notes(steps: dict[str, float], bound: float | None, rested: bool, repacked: bool
           ) -> list[str]:
    """The plan's explanation of a warm start."""
    notes = ["warm start from the session's last plan: running jobs kept where they run, "
             "the other jobs placed into the free capacity"]
    if "relax" in steps:
        notes.append("LP relaxation of the session's state solved (its bound)")
    if repacked:
        notes.append("re-packed toward the LP relaxation's targets (rounded into a plan "
                     "that ranked higher): running jobs move or stop where that pays")
    if "search" in steps:
        notes.append("local search from that plan for the time left")
    elif rested:
        notes.append("no local search: the last ones found nothing better")
    if bound is None:
        notes.append("no time left for a bound")
    return notes


def _cold(request: PlanRequest, clock: _Clock, memo: WarmMemo, cancel: Event | None
          ) -> Plan:
    """The driver's plan of `request` with the time left (at least a tenth of a second)."""
    memo.cold += 1
    left = max(0.1, clock.left())
    policy = request.policy.model_copy(update={"time_limit_s": left})
    return cold_plan(request.model_copy(update={"policy": policy}), cancel=cancel)
