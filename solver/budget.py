"""The budget of one solve: one deadline, the finishing time kept back from it, the cancel
flag, and (in deterministic mode) a work clock in place of the wall clock.

Every phase of `solver.plan` asks the budget how long it may run (`until`, `limits`) and
whether it should stop (`stopped`); nothing else reads the clock to decide. Whether a
phase fits is decided from what this solve has measured, not from assumed speeds: each
phase has a prior cost in CPU seconds (calibrated on a quiet machine, with the collector
paused), and `pace` records how many wall seconds each prior second really took in the
phases run so far (compiling the jobs, the greedy pass, the LP, a rounding), which covers
both the machine's load and how hard this request is. `estimate` scales a prior by it.
The time kept back for finishing (building and validating the Plan) is such an estimate
too, with a safety factor, and is replaced by the real cost once a plan has been built
(an incumbent report, see solver/portfolio.py).

Deterministic mode (`policy.deterministic`): the decisions that depend on time (how long a
phase may run, whether the next one fits) read a work clock instead: each phase charges
the work it did (CP-SAT's deterministic time, a fixed charge per heuristic phase), so the
same request, seed and `threads: 1` take the same path. The wall deadline stays as a safety
net; when it cuts a phase, `wall_cut` is set and the plan says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from threading import Event

from models import PlanRequest
from models.rules import lexicographic_levels
from solver.linear import Limits

#: CPU seconds to finish a plan (build and validate it, and the work between the last
#: phase's deadline and finishing: the last comparisons of plans, restoring displaced
#: jobs, a cut pass keeping the running jobs it did not reach), measured with the
#: collector paused, per item (job or GPU) and per item squared (the dict and set work
#: of 20,000-80,000 placements grows faster than the items). Quiet measures (session 11,
#: after building and validating a plan were made about twice as fast): M (1,024 GPUs /
#: 1,500 jobs) 0.026-0.035 s, L (16,384 / 20,000) 0.25-0.43 s, XL (65,536 / 80,000)
#: 1.2-2.0 s; the form gives 0.03, 0.42 and 2.0. The form before (0.04, 0.6 and 3.0 s)
#: kept back half again what finishing took: L at 3 s returned 0.5-1.0 s early, and L at
#: 5 s beside four busy processes kept 3.5 s back for 0.8 s of finishing and returned
#: after 2.1 s with only the running jobs placed. The estimate is scaled by the measured
#: pace, and replaced by the real cost once a plan is built (an incumbent report).
#: Session 13 (the validator's read pass reworked): L 3 s quiet finished in 0.21-0.32 s
#: against 0.73 reserved, XL 20 s in 1.59 against 3.09, and beside three or four busy
#: processes L at 3 s kept 1.3-1.85 s back for 0.56-0.65 s of finishing and returned
#: 0.3-1.6 s early with the running jobs alone. The per-item term went from 1.08e-5 to
#: 7.5e-6: 0.28, 0.03 and 1.5 s of CPU (times FINISH_SAFETY) for L, M and XL.
FINISH_CPU_PER_ITEM = 7.5e-6
FINISH_CPU_PER_ITEM2 = 2.0e-11
#: Seconds kept back on top of the measured finishing cost (returning, logging, being
#: scheduled again): a fixed wall part, and a CPU part scaled by the load the solve
#: measured; 0.1 s quiet as before. The whole 0.1 s scaled by the load (0.5 s at load 5)
#: kept 0.8 s of a 1 s budget back on M (1,024 GPUs / 1,500 jobs) beside four busy
#: processes for a finishing that took 0.125 s: the greedy pass did not fit, and the plan
#: kept only the running jobs (60% gap), 0.63 s early.
FINISH_MARGIN_S = 0.07
FINISH_MARGIN_CPU_S = 0.03
#: Safety factor on the finishing estimate (1.25 overran L at 5 s by 0.4 s when the
#: contended CPU was taken as the clock).
FINISH_SAFETY = 1.5
#: Most of the budget kept back for finishing: at least the rest plans, even when the
#: machine is so busy that finishing alone would take the whole budget.
FINISH_MAX_SHARE = 0.8
#: Phases shorter than this (wall seconds) do not update the pace: too noisy.
PACE_MIN_S = 0.02
#: Bounds of the pace (wall seconds per prior CPU second): a phase that ran from a cache
#: must not make the next look free, nor one stalled phase make every other look hopeless.
PACE_RANGE = (0.5, 12.0)
#: Finishing a plan with quotas or priority classes costs about this much more (restoring
#: displaced jobs, the level reasons and stats, their checks). Once 5 (M: 0.29 s of CPU
#: against 0.06 s); since each level pass runs once per plan (session 15), finishing
#: costs 1.3-1.6 times the plain prior at L (16,384 GPUs / 20,000 jobs) for throughput,
#: 2.1-2.6 times for fairness and priority_fifo, and 2.5-4.3 times at M (1,024 GPUs /
#: 1,500 jobs, whose level reasons replay the placer per class): 3, times FINISH_SAFETY,
#: covers each. With 5, L at 10 s kept 4.3-5.1 s back for 1.7-2.0 s of finishing and
#: returned 2-3 s early.
FINISH_LEVELS_FACTOR = 3.0
#: Seconds by which an exact backend may overrun the limit it is given (its result is
#: read back and decoded afterwards), by backend, scaled by the load in `limits`. CP-SAT
#: is stopped at its limit by a watcher even inside presolve (whose own clock checks
#: came 0.5-4.5 s late on M beside busy processes): the stop took 0.03-0.08 s of CPU on
#: M's model, the read-back 0.02 s. CBC is a separate process that writes and reads
#: files, and is killed a grace period past its deadline.
EXACT_EXIT_S = {"cp_sat": 0.1, "cbc": 0.3, "highs": 0.3}
#: Deterministic mode: CP-SAT deterministic time units per second of budget (a loaded
#: 2-core machine does about 0.15 a second on one thread: the work limit must bind
#: before the wall clock does).
DET_UNITS_PER_S = 0.05
#: Deterministic mode: budget seconds charged per job for each pass of a starting
#: heuristic (greedy, rounding, the LP relaxation), as a loaded machine takes.
PASS_S_PER_JOB = 5e-4
#: The local search's fixed part per job (loading the plan into its own state, ordering
#: the jobs per model, comparing the result with the plan it started from), which runs
#: whatever its deadline: 2.8-3.5 times compiling the jobs in the same process (M 0.04 s,
#: L 0.8-0.9 s at load 5 with no move made), so about L 0.6 s at the compile prior's
#: pace. It starts only when that fits before the finishing reserve: on L at 3 s, started
#: 0.13 s before it, it returned 0.6 s past it and the plan 0.37 s past the limit.
SEARCH_SETUP_CPU_PER_JOB = 3e-5
#: ... and its tail after its deadline (its plan read out, compared with the one it
#: started from): L about 0.15 s. Its deadline is brought forward by it.
SEARCH_TAIL_CPU_PER_JOB = 7.5e-6
#: A starting pass cut at its deadline (greedy or rounding) still keeps the running jobs
#: it did not reach where they run and reads out its plan (`Greedy.keep_cut_running`):
#: about L 0.2 s past the deadline, as a pass that keeps them all first costs. The first
#: rounding starts only when that fits beside its share, and is cut that much earlier
#: (L at 3 s under load: a rounding started 0.29 s before its deadline returned 0.79 s
#: past it, and the plan 0.74 s past the limit).
CUT_TAIL_CPU_PER_JOB = 1e-5
#: Deterministic mode: local-search moves per second of budget (a loaded 2-core machine
#: does about 65 a second on M, 115 on 300 jobs).
MOVES_PER_S = 60


def finish_prior(jobs: int, gpus: int) -> float:
    """CPU seconds to finish a plan of `jobs` jobs on `gpus` GPUs (build and validate it,
    and the work between the last phase's deadline and finishing), before any was
    measured (`FINISH_CPU_PER_ITEM`, `FINISH_CPU_PER_ITEM2`)."""
    items = jobs + gpus
    return FINISH_CPU_PER_ITEM * items + FINISH_CPU_PER_ITEM2 * items * items


@dataclass
class Pacing:
    """A paced phase's measure; `void` when the phase did not do all its work."""

    void: bool = False


@dataclass
class Budget:
    """The deadline, the finishing reserve and the cancel flag of one solve."""

    limit_s: float
    jobs: int
    gpus: int
    cancel: Event | None = None
    deterministic: bool = False
    started: float = field(default_factory=time.monotonic)
    wall_cut: bool = False   # deterministic mode: the wall clock cut a phase
    _py_wall: float = 0.0    # wall and CPU seconds of the Python phases so far
    _py_cpu: float = 0.0
    _finish_measured: float | None = None
    _pace: float | None = None   # wall seconds per prior CPU second, recent phases
    _pace_last: float | None = None
    _work: float = 0.0       # deterministic mode: budget seconds charged so far
    finish_factor: float = 1.0  # FINISH_LEVELS_FACTOR for requests with levels

    @classmethod
    def of(cls, request: PlanRequest, cancel: Event | None = None) -> Budget:
        """The budget of `request` (its policy's limit and mode), starting now."""
        pol = request.policy
        factor = FINISH_LEVELS_FACTOR if lexicographic_levels(request) else 1.0
        return cls(pol.time_limit_s, len(request.jobs),
                   sum(len(n.gpus) for n in request.cluster.nodes), cancel,
                   pol.deterministic, finish_factor=factor)

    # ------------------------------------------------------------------ clocks
    @property
    def deadline(self) -> float:
        """The `time.monotonic()` instant by which the Plan must be returned."""
        return self.started + self.limit_s

    def elapsed(self) -> float:
        """Wall seconds since the solve started."""
        return time.monotonic() - self.started

    def remaining(self) -> float:
        """Seconds left before the deadline (work-clock seconds in deterministic mode)."""
        if self.deterministic:
            return max(0.0, self.limit_s - self._work)
        return max(0.0, self.deadline - time.monotonic())

    def wall_left(self) -> float:
        """Wall seconds left before the deadline minus the finishing reserve."""
        return max(0.0, self.deadline - self.finish_reserve() - time.monotonic())

    def cancelled(self) -> bool:
        """Whether the caller asked to stop."""
        return self.cancel is not None and self.cancel.is_set()

    def stopped(self, need: float = 0.0) -> bool:
        """Whether planning must stop: cancelled, or less than `need` seconds left before
        the finishing reserve."""
        if self.cancelled():
            return True
        if self.deterministic and self.wall_left() <= 0.0:
            self.wall_cut = True
            return True
        return self.remaining() - self.reserve <= need

    # ------------------------------------------------------------------ load and reserve
    @contextmanager
    def python_phase(self) -> Iterator[None]:
        """Time a pure-Python phase of this thread: its wall time over its CPU time is
        the machine's current load as this solve sees it."""
        w0, c0 = time.monotonic(), time.thread_time()
        try:
            yield
        finally:
            self._py_wall += time.monotonic() - w0
            self._py_cpu += time.thread_time() - c0

    def load(self) -> float:
        """Wall seconds per CPU second of this solve's Python phases (1 when quiet)."""
        if self._py_cpu < 0.005:
            return 1.0
        return min(8.0, max(1.0, self._py_wall / self._py_cpu))

    def measured_finish(self, seconds: float) -> None:
        """Record what finishing a plan (build and validate) really cost."""
        self._finish_measured = max(self._finish_measured or 0.0, seconds)

    @contextmanager
    def paced(self, prior_cpu_s: float) -> Iterator[Pacing]:
        """Time a phase whose prior cost is `prior_cpu_s` CPU seconds and update the pace
        (module doc), unless the body marks its measure void (a phase cut at its
        deadline did only part of its work). The phase also counts as a Python phase of
        `load`."""
        w0 = time.monotonic()
        pacing = Pacing()
        try:
            with self.python_phase():
                yield pacing
        finally:
            wall = time.monotonic() - w0
            if wall >= PACE_MIN_S and prior_cpu_s > 0 and not pacing.void:
                lo, hi = PACE_RANGE
                ratio = min(hi, max(lo, wall / prior_cpu_s))
                self._pace_last = ratio
                self._pace = ratio if self._pace is None else 0.5 * (self._pace + ratio)

    def pace(self) -> float:
        """Wall seconds per prior CPU second (module doc): the recent phases' average,
        or the latest phase's when that was slower; the load before any phase ran."""
        if self._pace is None or self._pace_last is None:
            return self.load()
        return max(self._pace, self._pace_last)

    def estimate(self, prior_cpu_s: float) -> float:
        """The wall seconds a phase of `prior_cpu_s` prior CPU seconds should take now."""
        return prior_cpu_s * self.pace()

    def fits(self, prior_cpu_s: float) -> bool:
        """Whether a phase of `prior_cpu_s` prior CPU seconds should end before the
        finishing reserve (never when cancelled)."""
        return not self.stopped(need=self.estimate(prior_cpu_s))

    @property
    def reserve(self) -> float:
        """Seconds kept back for finishing the plan (module doc)."""
        if self.deterministic:
            return 0.0   # the wall deadline's own reserve is in `wall_left`
        return self.finish_reserve()

    def finish_reserve(self) -> float:
        """The wall seconds finishing a plan is expected to take, with a safety margin."""
        cpu = finish_prior(self.jobs, self.gpus) * self.finish_factor
        # a pace below 1 says a phase ran faster than its prior, not that finishing
        # will: XL at 60 s, its roundings at 0.66 of their prior, kept 2.7 s back for
        # 4.2 s of finishing and overran by 1.5 s
        est = cpu * max(1.0, self.pace())
        if self._finish_measured is not None:
            est = max(est, self._finish_measured)
        margin = FINISH_MARGIN_S + FINISH_MARGIN_CPU_S * max(1.0, self.load())
        return min(FINISH_SAFETY * est + margin, FINISH_MAX_SHARE * self.limit_s)

    # ------------------------------------------------------------------ phases
    def until(self, share: float = 1.0, cap_s: float | None = None) -> float:
        """The `time.monotonic()` instant a phase given `share` of what is left (at most
        `cap_s` seconds) must end by; never past the deadline minus the reserve."""
        hard = self.deadline - self.finish_reserve()
        if self.deterministic:
            return hard   # the phase is bounded by its work limit; this is the safety net
        left = max(0.0, self.remaining() - self.reserve)
        span = left * share if cap_s is None else min(cap_s, left * share)
        return min(time.monotonic() + span, hard)

    def check_wall(self) -> None:
        """Deterministic mode: note when the wall clock has cut (or is about to cut) a
        phase, which makes the plan depend on timing."""
        if self.deterministic and time.monotonic() >= self.deadline - self.finish_reserve():
            self.wall_cut = True

    def charge(self, seconds: float) -> None:
        """Deterministic mode: charge `seconds` of budget to the work clock (a no-op on
        the wall clock, which charges itself)."""
        if self.deterministic:
            self._work += max(0.0, seconds)

    def limits(self, backend: str, threads: int | None, seed: int | None, mip_gap: float,
               share: float = 1.0) -> Limits:
        """What an exact solve by `backend` given `share` of what is left (before the
        reserve) may use: wall seconds, and in deterministic mode a deterministic-time
        limit."""
        left = max(0.0, self.remaining() - self.reserve)
        # a backend checks its clock at its own pace: on a loaded CPU its exit and the
        # decoding after it take that much longer (M at 10 s beside four busy processes
        # returned 0.37 s late with the quiet allowance)
        exit_s = EXACT_EXIT_S.get(backend, 0.3) * max(1.0, self.load())
        wall = max(0.05, min(left * share, self.wall_left()) - exit_s)
        det = DET_UNITS_PER_S * left * share if self.deterministic else None
        if self.deterministic:
            wall = max(0.05, self.wall_left() - exit_s)
        return Limits(time_limit_s=wall,
                      threads=threads or max(1, os.cpu_count() or 1),
                      seed=seed, mip_gap=mip_gap, deterministic_time=det)
