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
2. the quick bound (solver/quick_bound.py) when its measured cost fits in the time left;
3. the local search (heuristics/local_search.py) improves the plan for what is left of
   the limit, once the search's own start-up (loading the plan into its state) is
   known to fit: it is measured on each plan and kept in the `WarmMemo`;
4. quotas and priority classes: `heuristics.levels.settle_levels`, as the driver does;
5. the plan is built (solver/build.py) and checked by the validator (solver/validate.py)
   against the session's current state, like every plan of the driver.

What is carried between plans is the `WarmMemo`: the MIG geometry with its cached layout
queries (`_compiled`), what each step cost last time (CPU seconds) and the pace of this
machine (wall seconds per CPU second, measured again as each plan runs), from which the
time kept back for building and validating and the choice of steps 2 and 3 follow. The
greedy pass is cut at the time kept back for finishing, but not before `GREEDY_SHARE` of
the limit.

The cold path (`solver.plan` with the time left) answers when the warm start does not
apply: in deterministic mode (its path must not depend on timing), when non-preemptible
running jobs conflict (`hard_conflicts`: the driver's infeasible answer), and when the
greedy stopped a running job the policy forbids stopping (the validator's `running`
rule: the driver then asks CP-SAT for a plan that keeps it). Any other violation is a
bug and raises `PlanningError`, as in the driver.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from threading import Event

from heuristics.greedy import plan_greedy
from heuristics.levels import settle_levels
from heuristics.local_search import improve
from heuristics.result import HeuristicResult
from models import Plan, PlanRequest
from models.instance import MigGeometry, compile_jobs, mig_geometry, per_request
from models.rules import lexicographic_levels
from solver.auto import EXACT_VARS, estimate_vars
from solver.budget import FINISH_MARGIN_S, finish_prior
from solver.build import build_plan
from solver.driver import PlanningError, note_overrun
from solver.driver import plan as cold_plan
from solver.gcpause import gc_paused
from solver.outcome import label
from solver.portfolio import QUICK_CPU_PER_JOB
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
#: The quick bound runs when the time left is at least this many times its estimate
#: (plus the finishing reserve): the plan's quality comes first.
BOUND_ROOM = 4.0
#: Bounds of the measured pace (wall seconds per CPU second).
PACE_RANGE = (1.0, 12.0)
#: CPU seconds of measured steps below which the pace of this plan is not trusted yet
#: (the last plan's pace stands in).
PACE_MIN_CPU_S = 0.01
#: The greedy pass may run until this share of the limit even when the finishing
#: reserve would stop it earlier: placing the new work is what a session plan is for
#: (finishing then runs past the limit by at most the rest of its reserve).
GREEDY_SHARE = 0.6


@dataclass
class WarmMemo:
    """What a session keeps from one warm plan to the next: what the steps cost (CPU
    seconds; None: not measured yet), the machine's pace, the MIG geometry."""

    finish_cpu: float | None = None
    bound_cpu: float | None = None
    #: how far the local search ran past the deadline it was given (its start-up and
    #: its final comparison), as CPU seconds at the pace it ran at
    search_extra_cpu: float | None = None
    #: wall seconds per CPU second over the whole last warm plan
    pace: float | None = None
    #: warm plans made so far, and those that fell back to the cold path
    plans: int = 0
    cold: int = 0
    #: CPU seconds of each step of the last warm plan (benchmarks report them)
    last_steps: dict[str, float] = field(default_factory=dict)
    #: the MIG geometry of the last plan and what it depends on (`_compiled`)
    geometry: MigGeometry | None = None
    geometry_key: tuple[object, ...] | None = None


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
    # jobs alone often decide, without a pass over the pending jobs' shapes
    running = sum(1 for j in request.jobs if j.current)
    if running * len(request.cluster.nodes) > 2 * EXACT_VARS:
        return True
    return estimate_vars(request) > 2 * EXACT_VARS


def warm_plan(request: PlanRequest, memo: WarmMemo | None = None, *,
              cancel: Event | None = None) -> Plan:
    """A validated plan of `request` within `policy.time_limit_s`, started from its running
    jobs' placements (module doc); `memo` carries the measured costs from plan to plan.
    The cyclic collector is paused meanwhile (solver/gcpause.py)."""
    memo = memo if memo is not None else WarmMemo()
    with gc_paused():
        clock = _Clock(request.policy.time_limit_s, cancel, memo.pace)
        if request.policy.deterministic or hard_conflicts(request):
            return _cold(request, clock, memo, cancel)
        steps: dict[str, float] = {}
        result = _start(request, clock, memo, steps)
        if result is None:
            return _cold(request, clock, memo, cancel)
        bound = _bound(request, clock, memo, steps)
        result = _search(request, result, clock, memo, steps)
        if lexicographic_levels(request):
            result = settle_levels(request, result)
        plan = _finish(request, result, bound, clock, memo, steps)
        if plan is None:
            return _cold(request, clock, memo, cancel)
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


def _start(request: PlanRequest, clock: _Clock, memo: WarmMemo,
           steps: dict[str, float]) -> HeuristicResult | None:
    """The running jobs kept, the other jobs placed by one greedy pass (None: it stopped
    a running job it may not stop, and the cold path must decide)."""
    with _Step(steps, "compile", clock):
        _compiled(request, memo)
    stop = max(clock.deadline - _reserve(request, clock, memo),
               clock.t0 + GREEDY_SHARE * clock.limit_s)
    with _Step(steps, "greedy", clock):
        result = plan_greedy(request, seed=request.policy.seed, keep_running=True,
                             deadline=max(time.monotonic(), stop))
    return result


def _compiled(request: PlanRequest, memo: WarmMemo) -> None:
    """Compile the jobs of `request` (`compile_jobs`, cached per request object), with
    the last plan's MIG geometry (kept in `memo`) seeded into the per-request cache
    (`models.instance.per_request`) when the catalog and `allow_mig_reconfiguration` are
    the same: its layout queries, cached inside it, are then not asked again.

    The compiled jobs themselves are not carried over: a JobInfo carries its job's
    position in the request, which every finished or cancelled job before it shifts, and
    renumbering a JobInfo costs about what compiling it does (the eligibility rules are
    asked once per job kind: models/instance.py)."""
    key = (request.cluster.gpu_models, request.policy.allow_mig_reconfiguration)
    if memo.geometry is not None and memo.geometry_key == key:
        kept = memo.geometry
        per_request(request, "mig_geometry", lambda _r: kept)
    memo.geometry, memo.geometry_key = mig_geometry(request), key
    compile_jobs(request)


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
    """`result` improved by the local search for the time left, when its start-up fits."""
    extra = (memo.search_extra_cpu if memo.search_extra_cpu is not None
             else SEARCH_START_CPU_PER_JOB * len(request.jobs)) * clock.pace
    stop = clock.deadline - _reserve(request, clock, memo)
    if clock.cancelled() or stop - time.monotonic() < extra + SEARCH_MIN_S:
        return result
    until = stop - extra
    began, cpu0 = time.monotonic(), time.process_time()
    out = improve(request, result, deadline=until, seed=request.policy.seed,
                  cancel=clock.cancel)
    cpu = time.process_time() - cpu0
    steps["search"] = cpu
    wall = time.monotonic() - began
    if wall > 0:
        # the part of the call past its deadline, in CPU seconds at this call's pace
        over = max(0.0, time.monotonic() - until)
        memo.search_extra_cpu = over * cpu / wall if cpu > 0 else over
    return out


def _finish(request: PlanRequest, result: HeuristicResult, bound: float | None,
            clock: _Clock, memo: WarmMemo, steps: dict[str, float]) -> Plan | None:
    """The validated Plan of `result` (None: it stops a running job the policy forbids
    stopping: the cold path decides)."""
    with _Step(steps, "build", clock):
        plan = build_plan(request, result, status="heuristic",
                          solver=label(request, "heuristic"), best_bound=bound,
                          explanation=_notes(steps, bound))
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


def _notes(steps: dict[str, float], bound: float | None) -> list[str]:
    """The plan's explanation of a warm start."""
    notes = ["warm start from the session's last plan: running jobs kept where they run, "
             "the other jobs placed into the free capacity"]
    if "search" in steps:
        notes.append("local search from that plan for the time left")
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
