"""The starting plan of a solve and the cache of what it is made from.

One name: the *starting plan* (`Portfolio.start`) is the best heuristic plan known so far.
It is first the best of the greedy plan (heuristics/greedy.py) and the LP relaxation
rounded into plans (heuristics/lp_round.py; throughput-like objectives only, where the
LP's choice is the objective's), its new shared jobs then re-packed exactly by GPU
patterns when that ranks better (solver/share_packing.py). Later phases `offer` better
plans (the local search's, an exact solve's when it seeds a wider one); the starting plan
is what exact solves are warm-started from and what is returned when they find nothing.

Each ingredient (greedy plan, LP relaxation and its bound, static reasons) is computed
once, within the budget (solver/budget.py). Every improvement of the starting plan is
reported through the caller's incumbent hook (`Incumbents`), so that an async solve has a
plan to show, store or return from its first seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

from heuristics.greedy import BOTH_VARIANTS_UP_TO, plan_greedy
from heuristics.lp_round import VARIANTS as ROUNDINGS
from heuristics.lp_round import plan_lp_round
from heuristics.result import HeuristicResult
from models import Plan, PlanRequest, PlanStatus
from solver.bound import Relaxation, relax
from solver.budget import PASS_S_PER_JOB, Budget
from solver.build import build_plan
from solver.outcome import LP_ROUND_OBJECTIVES, label, rank
from solver.reasons import static_reasons
from solver.share_packing import repack
from solver.validate import validate_plan

log = logging.getLogger(__name__)

#: Most of the budget the pattern re-pack of shared jobs may take.
REPACK_SHARE = 0.3
#: The LP bound's slice of the budget: this many seconds or this share of the budget,
#: whichever is larger, and at most half of what is left.
BOUND_MIN_S = 2.0
BOUND_SHARE = 0.1
#: CPU seconds per job of one greedy pass, measured on M and L. With less than
#: `CUT_EARLY` of a pass left, the greedy keeps the running jobs first: measured on a
#: loaded machine, M at 1 s 3,218 instead of 1,832 and L at 10 s 27,829 instead of
#: -3,697, while M at 2 s (0.6 of a pass) keeps the default's 4,330 (3,248 otherwise).
GREEDY_CPU_PER_JOB = 2.5e-4
CUT_EARLY = 0.3
#: CPU seconds per job the whole LP relaxation takes (compiling and grouping the jobs,
#: building the rows, the LP solve): M 1.6e-4, L 6e-5 on a quiet machine, 1.1e-4 on L
#: with the cores shared. Its Python part is not time-boxed, so the bound is skipped when
#: this much (times the load) does not fit. An estimate too high here costs the bound and
#: the rounded starting plan on L (10 s: no bound, 6% lower objective).
RELAX_CPU_PER_JOB = 1.2e-4
#: A rounding pass costs about this share of a greedy pass (quiet L: 1.1 s against
#: 2.4-3.4 s); before the first rounding has been timed, it is the estimate.
ROUNDING_PER_GREEDY = 0.5
#: Seconds between two heuristic incumbent reports, at least (and at least twice what
#: building the last one cost): each report builds and validates a whole plan.
REPORT_EVERY_S = 1.0


class Incumbents:
    """Reports plans better than the last one reported through the caller's hook (a
    validated Plan each; a report never breaks the solve), and measures what building
    and validating a plan costs (the budget's finishing reserve)."""

    def __init__(self, request: PlanRequest, budget: Budget,
                 hook: Callable[[Plan], None] | None) -> None:
        self.request = request
        self.budget = budget
        self.hook = hook
        self._best: tuple[float, ...] | None = None
        self._last = -1e9      # monotonic instant of the last report
        self._cost = 0.0       # what the last report cost

    def report(self, result: HeuristicResult, producer: str, status: PlanStatus,
               throttle: bool = True) -> None:
        """Report `result` (made by `producer`) when it beats the last report, there is
        room to build it before the finishing reserve, and (with `throttle`) the last
        report is not too recent."""
        if self.hook is None:
            return
        now = time.monotonic()
        if throttle and now - self._last < max(REPORT_EVERY_S, 2 * self._cost):
            return
        if self.budget.stopped(need=self.budget.finish_reserve()):
            return
        key = rank(self.request, result.placements)
        if self._best is not None and key <= self._best:
            return
        try:
            plan = build_plan(self.request, result, status=status,
                              solver=label(self.request, producer),
                              solve_time_s=self.budget.elapsed())
            bad = validate_plan(self.request, plan)
            self._cost = time.monotonic() - now
            self.budget.measured_finish(self._cost)
            if bad:  # a bug; the final plan is checked again and raises
                log.error("invalid incumbent skipped: %s", bad[0].message)
                return
            self._best, self._last = key, now
            self.hook(plan)
        except Exception:  # an incumbent report must never break the solve
            log.exception("incumbent report failed")


class Portfolio:
    """The starting plan of one request and its ingredients, each computed once."""

    def __init__(self, request: PlanRequest, budget: Budget, incumbents: Incumbents,
                 notes: list[str]) -> None:
        self.request = request
        self.budget = budget
        self.incumbents = incumbents
        self.notes = notes
        self._greedy: HeuristicResult | None = None
        self._relax: Relaxation | None = None
        self._bound_done = False
        self._start: HeuristicResult | None = None
        self._reasons: dict[str, tuple[str, str]] | None = None

    def reasons(self) -> dict[str, tuple[str, str]]:
        """Static reasons of the jobs no plan can place."""
        if self._reasons is None:
            with self.budget.python_phase():
                self._reasons = static_reasons(self.request)
        return self._reasons

    def greedy(self) -> HeuristicResult:
        """The greedy plan (cut at the deadline: the jobs it did not reach stay out).
        When the time left buys only a small part of one pass (measured load), a single
        pass that keeps the running jobs first is made: cut early, the default pass
        would preempt every running job it did not reach."""
        if self._greedy is None:
            b = self.budget
            one_pass = GREEDY_CPU_PER_JOB * len(self.request.jobs) * b.load()
            short = not b.deterministic and b.stopped(need=CUT_EARLY * one_pass)
            self._greedy = plan_greedy(self.request, seed=self.request.policy.seed,
                                       deadline=self._heuristic_deadline(),
                                       keep_running=True if short else self._one_variant())
        return self._greedy

    def _one_variant(self) -> bool | None:
        """False (the default variant alone) on requests over `BOTH_VARIANTS_UP_TO` jobs
        whose starting plan may come from the rounded LP: there the rounding beats both
        greedy variants (L: 67,312 against 63,201), and a second greedy pass would take
        the time it needs; None (both variants, as time allows) otherwise."""
        large = len(self.request.jobs) > BOTH_VARIANTS_UP_TO
        return False if large and self.request.policy.objective in LP_ROUND_OBJECTIVES else None

    def _heuristic_deadline(self) -> float | None:
        """A starting heuristic runs to completion in deterministic mode (its cut-off and
        its choice of variants would depend on timing), else until the finishing reserve."""
        return None if self.budget.deterministic else self.budget.until()

    def bound(self) -> float | None:
        """The aggregated LP bound (module doc of solver/bound.py); None if unknown."""
        if not self._bound_done:
            self._bound_done = True
            b = self.budget
            left = max(0.0, b.remaining() - b.reserve)
            if b.deterministic:
                limit = max(BOUND_MIN_S, BOUND_SHARE * b.limit_s)
            else:
                limit = min(max(BOUND_MIN_S, BOUND_SHARE * b.limit_s), left / 2)
            build = RELAX_CPU_PER_JOB * len(self.request.jobs) * b.load()
            if b.deterministic or not b.stopped(need=build + 0.05):
                with b.python_phase():
                    self._relax = relax(self.request, time_limit_s=max(0.1, limit))
                b.charge(PASS_S_PER_JOB * len(self.request.jobs))
            else:
                self.notes.append("no time left for the LP bound")
        return None if self._relax is None else self._relax.bound

    def start(self) -> HeuristicResult:
        """The starting plan (module doc): computed on first use, then the best offered."""
        if self._start is None:
            best, rounded = self._first_start()
            if rounded:
                self.notes.append("the starting plan is the rounded LP relaxation")
            self._start = self._repacked(best)
            self.incumbents.report(self._start, "heuristic", "heuristic", throttle=False)
        return self._start

    def offer(self, result: HeuristicResult, producer: str = "heuristic") -> bool:
        """Make `result` the starting plan when it ranks strictly better; True if so."""
        current = self.start()
        if rank(self.request, result.placements) <= rank(self.request, current.placements):
            return False
        self._start = result
        self.incumbents.report(result, producer,
                               "heuristic" if producer == "heuristic" else "feasible")
        return True

    def _first_start(self) -> tuple[HeuristicResult, bool]:
        """The best of the greedy plan and the rounded LP plans, and whether it is a
        rounded one. The greedy runs first, so that a plan exists from the first moment
        (and is reported); the LP bound and the roundings follow while each still fits
        (a rounding's cost is estimated from the greedy pass, then from the last rounding,
        both measured). Ties go to the first rounding, then to the greedy plan."""
        t0 = time.monotonic()
        greedy = self._run(self.greedy)
        spent = ROUNDING_PER_GREEDY * (time.monotonic() - t0)
        targets: dict[str, str] = {}
        if self.request.policy.objective in LP_ROUND_OBJECTIVES:
            self.bound()
            targets = self._relax.targets if self._relax is not None else {}
        rounded: list[HeuristicResult] = []
        for variant in ROUNDINGS:
            if not targets or (self.budget.stopped(need=spent)
                               if not self.budget.deterministic else self.budget.stopped()):
                break
            t0 = time.monotonic()
            rounded.append(self._run(partial(
                plan_lp_round, self.request, targets, variant=variant,
                deadline=self._heuristic_deadline())))
            spent = max(spent, time.monotonic() - t0)
        order = [(p, True) for p in rounded[:1]] + [(greedy, False)] + [
            (p, True) for p in rounded[1:]]
        best, was_rounded = order[0]
        for cand, is_rounded in order[1:]:
            if rank(self.request, cand.placements) > rank(self.request, best.placements):
                best, was_rounded = cand, is_rounded
        return best, was_rounded

    def _run(self, make: Callable[[], HeuristicResult]) -> HeuristicResult:
        """One starting heuristic, timed as a Python phase, its plan reported."""
        with self.budget.python_phase():
            plan = make()
        self.budget.charge(PASS_S_PER_JOB * len(self.request.jobs))
        self.budget.check_wall()
        self.incumbents.report(plan, "heuristic", "heuristic")
        return plan

    def _repacked(self, plan: HeuristicResult) -> HeuristicResult:
        """`plan` with its new shared jobs re-packed exactly by GPU patterns
        (solver/share_packing.py) when that ranks better; throughput-like objectives only,
        with at most `REPACK_SHARE` of the budget. Not in deterministic mode: the re-pack
        is bounded by wall time only. Not with quotas: the pattern model does not count
        usage against the limits."""
        if (self.request.policy.objective not in LP_ROUND_OBJECTIVES
                or self.budget.deterministic or self.request.cluster.quotas):
            return plan
        stop = self.budget.until(cap_s=REPACK_SHARE * self.budget.limit_s)
        if stop - time.monotonic() < 0.05 or self.budget.cancelled():
            return plan
        better = repack(self.request, plan, stop)
        if better is None or rank(self.request, better.placements) <= rank(
                self.request, plan.placements):
            return plan
        self.notes.append("new shared jobs were re-packed by GPU patterns")
        return better
