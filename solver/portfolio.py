"""The starting plan of a solve and the cache of what it is made from.

One name: the *starting plan* (`Portfolio.start`) is the best heuristic plan known so far.
It is first the best of the greedy plan (heuristics/greedy.py) and the LP relaxation
rounded into plans (heuristics/lp_round.py, from the LP's counts rounded down and, on
requests up to `BOTH_VARIANTS_UP_TO` jobs, to the nearest integer; throughput-like
objectives only, where the LP's choice is the objective's; with quotas or priority
classes only on small requests, `LEVEL_ROUNDING_UP_TO`), its new shared jobs then
re-packed exactly by GPU patterns when that ranks better (solver/share_packing.py).
Later phases `offer` better plans (the local search's, an exact solve's when it seeds a
wider one); the starting plan is what exact solves are warm-started from and what is
returned when they find nothing.

Each ingredient (greedy plan, LP relaxation and its bound, the quick bound, static
reasons) is computed once, within the budget (solver/budget.py): each phase has a prior
cost in CPU seconds (the constants below) and runs only when the budget, which scales it
by the pace measured so far, says it fits. On large requests the LP and a rounding go
first when both fit (the rounded plan is the better start there, and a greedy pass costs
as much as both), on smaller ones the LP and two roundings whenever the LP fits; else the
greedy goes first. A bound always exists: the quick Lagrangian one of
solver/quick_bound.py stands in when the LP does not fit or its solve is cut. Every
improvement of the starting plan is reported through the caller's incumbent hook
(`Incumbents`), so that an async solve has a plan to show, store or return from its first
seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

from heuristics.greedy import BOTH_VARIANTS_UP_TO, keeps_all_running, plan_greedy
from heuristics.lp_round import VARIANTS as ROUNDINGS
from heuristics.lp_round import plan_lp_round
from heuristics.result import HeuristicResult
from models import Plan, PlanRequest, PlanStatus
from models.instance import compile_jobs
from models.objective import Evaluation, evaluate
from models.rules import lexicographic_levels
from solver.bound import CUT, Relaxation, relax
from solver.budget import CUT_TAIL_CPU_PER_JOB, PASS_S_PER_JOB, Budget
from solver.build import build_plan
from solver.outcome import LP_ROUND_OBJECTIVES, label, rank
from solver.quick_bound import quick_bound
from solver.reasons import static_reasons
from solver.share_packing import repack
from solver.validate import validate_plan

log = logging.getLogger(__name__)

#: Most of the budget the pattern re-pack of shared jobs may take.
REPACK_SHARE = 0.3
#: ... and its prior per movable shared job (queued shares; solver/share_packing.py): a
#: re-pack cut at its deadline returns the plan it was given, so it runs only when this
#: fits in its slice at the measured pace. M (1,024 GPUs / 1,500 jobs, 193 movable)
#: takes 0.34-1.5 CPU s on seeds 0-2 for 0.01-0.07% of the bound (2026-12-02), where a
#: slice of 0.3-0.6 s at 1-2 s always cut it: the time went to nothing, and at 2 s
#: the exact phase found no room after it.
REPACK_CPU_PER_MOVABLE = 2.5e-3
#: The LP bound's slice of the budget: this many seconds or this share of the budget,
#: whichever is larger, and at most half of what is left.
BOUND_MIN_S = 2.0
BOUND_SHARE = 0.1
#: Prior costs of the phases in CPU seconds (module doc of solver/budget.py: scaled by the
#: pace measured in this solve), measured on M and L with the collector paused.
#: Compiling the jobs: L 0.09-0.1 s (0.17-0.19 s before the rules were asked once per class
#: of jobs, 0.27 s before the eligibility rules were asked once per job kind; a prior left
#: at 0.3 s made every later phase look half as costly).
COMPILE_CPU_PER_JOB = 4.7e-6
#: ... and a fixed part: M (1,024 GPUs / 1,500 jobs) compiles in 0.013-0.022 s where
#: the per-job term gives 0.007, while the greedy pass, the LP and a rounding take
#: 0.6-1.9 times their priors in the same process (2026-12-02): the pace measured on it
#: read M at 1 s on a shared host 5-7 times slower than the next phases ran (2-2.5), the
#: LP did not fit after the greedy pass, and the finishing reserve kept 0.34 s back for
#: 0.06-0.1 s of finishing (2.0-2.9% with the quick bound, 0.2 s of the budget unused).
#: L's prior (0.1 s) is left as measured quiet.
COMPILE_CPU_S = 0.007
#: ... and per elastic gang on top (its value on every allowed size and model): L with 30%
#: elastic gangs (4,271 of them) compiles in 0.19 s against 0.09 s (each gang's values on
#: its sizes are its own; before 0.27 s against 0.16 s); a prior without it
#: read the machine as 1.5-1.7 times slower than it was and scaled every estimate by it.
COMPILE_CPU_PER_ELASTIC = 2.5e-5
#: One greedy pass: M 0.1 s, L 1.25 s (1.8 s before the MIG signature ordering was kept
#: between placements), scaled by the setup rework (running jobs kept in bulk, prices and
#: the priced order once per kind: the default pass's CPU, warm and GC paused, min of
#: alternated runs at load 12-14, M 0.044 -> 0.038 s, L 0.74 -> 0.60 s; the per-request
#: work a cold pass adds is unchanged, so about 0.86 of the old prior, set by M). With
#: less than `CUT_EARLY` of a pass left, the
#: greedy keeps the running jobs first: measured on a loaded machine, M at 1 s 3,218
#: instead of 1,832 and L at 10 s 27,829 instead of -3,697, while M at 2 s (0.6 of a
#: pass) keeps the default's 4,330 (3,248 otherwise).
#: Over `BOTH_VARIANTS_UP_TO` jobs it does so whenever a whole pass does not fit: cut
#: after the same time on L (16,384 GPUs / 20,000 jobs), the pass keeping the running jobs
#: first reached 42,726 where the default reached 32,964 (it keeps the running jobs it
#: did not reach once cut, but places the queued ones more slowly).
GREEDY_CPU_PER_JOB = 6e-5
CUT_EARLY = 0.3
#: The LP relaxation as it runs (grouping the jobs, building the rows, the LP solve):
#: M 0.15-0.2 s, L 0.8-1.1 s. Over `BOTH_VARIANTS_UP_TO` jobs HiGHS's integer re-solve
#: overran a short limit (L with a 1 s limit took 1.6 s), hence a second per-job term
#: there; solver/bound.py now runs it only when its slice is worth 5 LP solves, so the
#: term is 0 (L 4 s: the LP and a rounding fit, 0.22% instead of 10%). Its Python part is
#: not time-boxed, so the LP is skipped (the quick bound stands in) when this much does
#: not fit. Session 10 measured, inside quiet L solves at 3 s (its limit below the
#: integer re-solve's), 0.69-0.84 s against the 1.1 s of the earlier form (0.1 s + 5e-5
#: per job): with the priced greedy pass as the alternative, L at 3 s took the LP-first
#: path only at a pace under 1.08 and lost it in one run of four (35% gap, or 4.4% with
#: the quick bound, where the LP path reaches 0.22%). Now M 0.18 s, L 0.9 s.
#: M's 0.18 s counted the integer re-solve, which runs only when its slice is worth
#: `MIP_MIN_LPS` LP solves (solver/bound.py): the LP alone is 0.07-0.08 s of CPU on M
#: (1,024 GPUs / 1,500 jobs; 0.014 s of it HiGHS's), so the fixed part is small: L keeps
#: its 0.9 s, M 0.095 s (the prior of 0.18 s read M at 1 s beside four busy processes as
#: having no room for the LP and a rounding, which cost no more than the greedy pass).
RELAX_CPU_S = 0.03
RELAX_CPU_PER_JOB = 4.35e-5
RELAX_RESOLVE_CPU_PER_JOB = 0.0
RELAX_SAFETY = 1.25
#: ... but the LP runs when this share of its estimate fits: its Python part stops at a
#: deadline that leaves the quick bound its time (solver/bound.py: `relax`), so a cut LP
#: costs only time, and the quick bound is 1-4% looser on M (1,024 GPUs / 1,500 jobs;
#: seed 0: 5,090-5,255 against the LP's 5,047), more than the whole target gap at 1 s.
#: The pace measured on compiling the jobs alone (20 ms) is noisy: on M at 1 s on a
#: shared host it read 5.1 in one run where the LP then ran at 2.3, and the LP, asked to
#: fit 1.25 times its estimate after the greedy pass, was skipped with 0.39 s left for
#: 0.19 s of work (2.87% with the quick bound; 0.20% in the run that took the LP).
RELAX_TRY_SHARE = 0.75
#: ... and in the test of whether the LP and a rounding go first (`_lp_first`), which is
#: made on the pace of one short phase (compiling the jobs, 0.15-0.2 s on L) and whose
#: rounding is anytime. With 1.25, L at 3 s on a quiet machine took the LP-first path in
#: one run of two (pace 0.80-0.96 after compiling against a threshold of 0.95), and the
#: runs that took it returned 0.4-0.7 s early with 0.22% instead of 38.6%.
LP_FIRST_SAFETY = 1.1
#: One rounding pass, which grows faster than the jobs: M 0.05 s, L 0.75 s (0.9-1.0 s before
#: its gang placement stopped ordering the GPUs of every node), XL (65,536 GPUs / 80,000
#: jobs) 13 s before that change: a per job and a per job squared term.
ROUNDING_CPU_PER_JOB = 1.25e-5
ROUNDING_CPU_PER_JOB2 = 1.3e-9
#: ... and a fixed part: without it the two terms give M 0.022 s against the 0.04-0.07 s
#: measured (2026-12-01), and the pace measured on M's first rounding read 2-3 times the
#: load; with quotas and classes the finishing reserve (FINISH_LEVELS_FACTOR times a
#: prior, scaled by that pace) then kept 3.7 s of a 5 s budget back for 0.6 s of work.
#: Most of those 0.04-0.07 s was the first pass's warm-up (`WARM_CPU_S`): a rounding after
#: another pass takes 0.027-0.033 s on M's seeds 0-2, the first one 0.07-0.115 s.
ROUNDING_CPU_S = 0.01
#: What the first starting pass (greedy or rounding) of a request pays on top of its
#: prior: the MIG layout options it asks for are computed and cached then
#: (models/instance.py), 0.04-0.08 CPU s on M. Counted in the first pass's prior only:
#: a prior of 0.052 s per rounding read the first one on M as 1.6 times slower than the
#: machine was, and at 1 s on a loaded host the second rounding (the LP's integer parts,
#: 0.60% where the first reached 1.18% on seed 1) no longer looked as if it fitted.
WARM_CPU_S = 0.05
#: The share of a rounding pass that must fit for the first one to run: cut, it keeps the
#: running jobs it did not reach (heuristics/greedy.py: keep_cut_running), and a third of
#: a pass on L (16,384 GPUs / 20,000 jobs) already gives 40,360, more than the greedy
#: pass that keeps the running jobs first reaches in the same time.
ROUND_MIN_SHARE = 0.3
#: A greedy pass's setup and keeping the running jobs where they run, before its first
#: queued job: L (16,384 GPUs / 20,000 jobs, 6,785 running) 0.29 s quiet. When its deadline
#: leaves less than that, the pass would place nothing but the running jobs: the starting
#: plan is then every running job kept as it runs, unchecked (`Portfolio.unchecked`), and
#: the driver falls back to the real pass only if the validator rejects that plan.
KEEP_CPU_PER_JOB = 1.5e-5
#: ... and once the bound is known, such a pass replaces the unchecked plan when this many
#: times its setup fits before the reserve (2 left L at 3 s at load 5 with the running
#: jobs alone, 1.15 s early, where the greedy pass of the code before placed 1,515 more).
KEEP_AFTER_BOUND = 1.25
#: The quick bound (solver/quick_bound.py): M 0.015 s (its price descent's floor), L 0.13 s
#: (0.25 s before its options were found once per compiled kind of jobs). Since it keeps
#: the pinned jobs and tests gangs against nodes and domains, its descent takes more
#: passes on M (0.02-0.03 s, L unchanged): a fixed part, without which the pace measured
#: on it read M at 1 s beside busy processes as 9 times slower than the machine was.
QUICK_CPU_PER_JOB = 6.5e-6
QUICK_CPU_S = 0.015
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


#: Jobs up to which requests with quotas or priority classes start from the rounded LP
#: too. The rounding does not serve the levels (M, 1,500 jobs: its plans serve 1,552-1,588
#: of guarantee against the greedy's 1,629.7, and are never the best start), and on the
#: level search's path (solver/levels.py) the LP's 0.4 CPU s of M's 1.6 are worth more to
#: the search; small requests keep it (cheap, and one more start for the exact solve).
LEVEL_ROUNDING_UP_TO = 500


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
        self._relax_done = False
        self._quick: float | None = None
        self._compiled = False
        self._warm = False     # whether a starting pass has run (`WARM_CPU_S`)
        #: id(result) -> (the result, its rank, its evaluation): plans are compared
        #: several times, and evaluating one is a pass over every job
        self._judged: dict[int, tuple[HeuristicResult, tuple[float, ...], Evaluation]] = {}
        self._start: HeuristicResult | None = None
        self._reasons: dict[str, tuple[str, str]] | None = None
        #: the starting plan that keeps every running job unchecked, when one was made
        self.unchecked: HeuristicResult | None = None

    def reasons(self) -> dict[str, tuple[str, str]]:
        """Static reasons of the jobs no plan can place. Not a paced phase: their cost
        grows with the GPUs as well as the jobs (L 0.07 s, XL 0.42-0.6 s for four times
        the jobs), and a per-job prior read XL's machine as 1.4 times slower than its
        compile did, which kept 2 s more back for finishing at 20 s."""
        if self._reasons is None:
            self.compiled()
            with self.budget.python_phase():
                self._reasons = static_reasons(self.request)
        return self._reasons

    def compiled(self) -> None:
        """Compile the jobs (cached per request) as the first paced phase: how long it
        takes is the first measure of this solve's pace."""
        if not self._compiled:
            self._compiled = True
            elastic = sum(1 for j in self.request.jobs if j.elastic is not None)
            with self.budget.paced(COMPILE_CPU_S + COMPILE_CPU_PER_JOB * len(self.request.jobs)
                                   + COMPILE_CPU_PER_ELASTIC * elastic):
                compile_jobs(self.request)

    def _jobs_cpu(self, per_job: float) -> float:
        """A prior of `per_job` CPU seconds per job, for this request."""
        return per_job * len(self.request.jobs)

    def _relax_cpu(self) -> float:
        """The prior of the LP relaxation on this request."""
        large = len(self.request.jobs) > BOTH_VARIANTS_UP_TO
        return RELAX_CPU_S + self._jobs_cpu(
            RELAX_CPU_PER_JOB + (RELAX_RESOLVE_CPU_PER_JOB if large else 0.0))

    def _quick_cpu(self) -> float:
        """The prior of the quick bound on this request."""
        return QUICK_CPU_S + self._jobs_cpu(QUICK_CPU_PER_JOB)

    def _cut_tail(self) -> float:
        """The prior of what a starting pass cut at its deadline still does past it
        (`budget.CUT_TAIL_CPU_PER_JOB`)."""
        return self._jobs_cpu(CUT_TAIL_CPU_PER_JOB)

    def _rounding_cpu(self) -> float:
        """The prior of the next rounding pass on this request (the first pass's warm-up
        included, `_warm_cpu`)."""
        n = len(self.request.jobs)
        return (ROUNDING_CPU_S + ROUNDING_CPU_PER_JOB * n + ROUNDING_CPU_PER_JOB2 * n * n
                + self._warm_cpu())

    def _warm_cpu(self) -> float:
        """`WARM_CPU_S` while no starting pass has run yet, else 0."""
        return 0.0 if self._warm else WARM_CPU_S

    def greedy(self) -> HeuristicResult:
        """The greedy plan (cut at the deadline: the jobs it did not reach stay out).
        When the time left buys only a small part of one pass (measured pace), a single
        pass that keeps the running jobs first is made: cut early, the default pass
        would preempt every running job it did not reach."""
        if self._greedy is None:
            b = self.budget
            one_pass = self._jobs_cpu(GREEDY_CPU_PER_JOB) + self._warm_cpu()
            short = not b.deterministic and not b.fits(
                (1.0 if len(self.request.jobs) > BOTH_VARIANTS_UP_TO else CUT_EARLY)
                * one_pass)
            keep = True if short else self._one_variant()
            # room for the quick bound after it, in case the LP does not fit then
            room = 0.0 if self._bound_done else b.estimate(self._quick_cpu())
            if self._keep_only(room):   # (a pass that short would keep them first)
                self._greedy = self.unchecked = _running_kept(self.request)
                return self._greedy
            self._greedy = self._run(partial(self._greedy_pass, self._heuristic_deadline(room),
                                             keep), one_pass if keep is not None else 0.0)
        return self._greedy

    def _greedy_pass(self, deadline: float | None, keep_running: bool | None
                     ) -> HeuristicResult:
        """One greedy pass over this request with its seed, cut at `deadline`."""
        return plan_greedy(self.request, seed=self.request.policy.seed, deadline=deadline,
                           keep_running=keep_running)

    def _keep_only(self, room: float) -> bool:
        """Whether a greedy pass cut at its deadline (`room` seconds before the finishing
        reserve) would place nothing but the running jobs (`KEEP_CPU_PER_JOB`), and the
        plan keeping them all is what such a pass would make (it keeps every running job
        first; no quotas or priority classes)."""
        b = self.budget
        if b.deterministic or lexicographic_levels(self.request) \
                or not keeps_all_running(self.request, True):
            return False
        left = b.until() - room - time.monotonic()
        return left < b.estimate(self._jobs_cpu(KEEP_CPU_PER_JOB))

    def _greedy_after_keep(self, kept: HeuristicResult) -> HeuristicResult:
        """`kept` (the unchecked plan) was made because the greedy pass looked out of
        time; once the bound is known, a pass that keeps the running jobs first and
        places queued ones until the finishing reserve replaces it when its setup fits
        now with `KEEP_AFTER_BOUND` to spare (the estimates before the bound are the most
        pessimistic: L at 3 s under load returned 1.3 s early with the running jobs
        alone)."""
        self.bound()
        b = self.budget
        if not b.fits(KEEP_AFTER_BOUND * self._jobs_cpu(KEEP_CPU_PER_JOB)):
            return kept
        self.unchecked = None
        self._greedy = self._run(partial(self._greedy_pass, self._heuristic_deadline(), True),
                                 self._jobs_cpu(GREEDY_CPU_PER_JOB) + self._warm_cpu())
        return self._greedy

    def fall_back(self) -> HeuristicResult:
        """The validator rejected the unchecked plan (`unchecked`): the greedy pass that
        keeps the running jobs it can, cut at once, stands in for it."""
        self.unchecked = None
        self._greedy = self._start = self._greedy_pass(time.monotonic(), True)
        return self._greedy

    def _one_variant(self) -> bool | None:
        """False (the default variant alone) on requests over `BOTH_VARIANTS_UP_TO` jobs
        whose starting plan may come from the rounded LP: there the rounding beats both
        greedy variants (L: 67,312 against 63,201), and a second greedy pass would take
        the time it needs; None (both variants, as time allows) otherwise."""
        large = len(self.request.jobs) > BOTH_VARIANTS_UP_TO
        return False if large and self.request.policy.objective in LP_ROUND_OBJECTIVES else None

    def _heuristic_deadline(self, room: float = 0.0) -> float | None:
        """A starting heuristic runs to completion in deterministic mode (its cut-off and
        its choice of variants would depend on timing), else until the finishing reserve
        (and `room` seconds more kept back for what must follow it)."""
        if self.budget.deterministic:
            return None
        return max(time.monotonic(), self.budget.until() - room)

    def bound(self) -> float | None:
        """The best proven bound known (None if the relaxation shows the request
        infeasible): the aggregated LP's (module doc of solver/bound.py) when it fits in
        the time left, else, or when its solve is cut, the quick bound of
        solver/quick_bound.py, which always fits."""
        if not self._bound_done:
            self._bound_done = True
            b = self.budget
            self.compiled()
            prior = self._relax_cpu()
            if b.deterministic or b.fits(RELAX_TRY_SHARE * prior):
                left = max(0.0, b.remaining() - b.reserve)
                # at least what the LP should take: its limit counts its Python part too
                # (XL: 2-3 s before HiGHS starts, which a 2 s limit left no time)
                limit = max(BOUND_MIN_S, BOUND_SHARE * b.limit_s,
                            RELAX_SAFETY * b.estimate(prior))
                if b.deterministic:
                    # the wall clock is only the safety net (`check_wall` below)
                    limit = max(limit, b.until() - time.monotonic())
                else:
                    limit = min(limit, max(left / 2, 2 * b.estimate(prior)), left)
                    if self.request.policy.objective in LP_ROUND_OBJECTIVES:
                        # leave the first rounding its time: HiGHS spends what it is
                        # given on the integer re-solve (L at 3 s: the LP took 1.6 s of
                        # 1.7 and the rounding was cut at a third)
                        limit = min(limit, max(RELAX_SAFETY * b.estimate(prior),
                                               left - b.estimate(self._rounding_cpu())))
                # cut where the quick bound still fits after it (deterministic mode: never)
                cut = None if b.deterministic else b.until() - b.estimate(self._quick_cpu())
                # not paced: its solve runs as long as its limit allows
                with b.python_phase():
                    self._relax = relax(self.request, time_limit_s=max(0.1, limit),
                                        also_nearest=self._near_rounding(), deadline=cut,
                                        resolve=not b.deterministic)
                b.charge(PASS_S_PER_JOB * len(self.request.jobs))
                b.check_wall()
                self._relax_done = True
                if self._relax is CUT:
                    self.notes.append("the LP bound was cut by the time limit: the quick "
                                      "bound stands in")
            else:
                self.notes.append("no time left for the LP bound: the quick bound stands in")
            if not self._relax_done or (self._relax is not None and not self._relax.targets):
                with b.paced(self._quick_cpu()):
                    self._quick = quick_bound(self.request, deadline=b.until())
        if self._relax_done and self._relax is None:
            return None
        found = [x for x in (self._relax.bound if self._relax else None, self._quick)
                 if x is not None]
        return min(found) if found else None

    def start(self) -> HeuristicResult:
        """The starting plan (module doc): computed on first use, then the best offered."""
        if self._start is None:
            best, rounded = self._first_start()
            if rounded:
                self.notes.append("the starting plan is the rounded LP relaxation")
            self._start = self._repacked(best)
            if self._start is not self.unchecked:
                self.incumbents.report(self._start, "heuristic", "heuristic", throttle=False)
        return self._start

    def judge(self, result: HeuristicResult) -> tuple[tuple[float, ...], float]:
        """(rank, objective value) of `result` (solver/outcome.py: rank), computed once
        per plan object (plans are not changed once made)."""
        hit = self._judgement(result)
        return hit[1], hit[2].objective_value

    def evaluation(self, result: HeuristicResult) -> Evaluation:
        """The objective of `result` and its parts (models/objective.py: evaluate), as
        `judge` computed it: the final plan is dressed with it rather than evaluating it
        again (a pass over every job; 0.06 s of CPU on L)."""
        return self._judgement(result)[2]

    def _judgement(self, result: HeuristicResult
                   ) -> tuple[HeuristicResult, tuple[float, ...], Evaluation]:
        """(result, rank, evaluation), cached per plan object."""
        hit = self._judged.get(id(result))
        if hit is None or hit[0] is not result:
            ev = evaluate(self.request, result.placements)
            hit = (result, rank(self.request, result.placements, ev), ev)
            self._judged[id(result)] = hit
        return hit

    def better(self, a: HeuristicResult, b: HeuristicResult) -> bool:
        """Whether plan `a` ranks strictly better than plan `b`."""
        return a is not b and self.judge(a)[0] > self.judge(b)[0]

    def offer(self, result: HeuristicResult, producer: str = "heuristic") -> bool:
        """Make `result` the starting plan when it ranks strictly better; True if so."""
        current = self.start()
        if not self.better(result, current):
            return False
        self._start = result
        self.incumbents.report(result, producer,
                               "heuristic" if producer == "heuristic" else "feasible")
        return True

    def _lp_first(self) -> bool:
        """Whether the LP and one rounding run before the greedy pass: on requests over
        `BOTH_VARIANTS_UP_TO` jobs, when both fit in the time left (measured pace; the
        LP's Python part is not time-boxed, so its estimate counts `RELAX_SAFETY` times).
        There the rounded plan is the better start (L 67,307 against the greedy's 62,845,
        XL 268,187 against 250,348) and a greedy pass takes about as long as both. On
        smaller requests the greedy pass is cheap and goes first, so that a plan exists
        early, unless the greedy pass, the LP and a rounding do not all fit while the LP
        and a rounding do (M at 1 s beside four busy processes: the greedy pass left the
        LP no room, 16.7% where the LP and a rounding reach 0.2%). Not in deterministic
        mode, whose path must not depend on timing. (Testing the LP and a rounding at
        the measured load instead of the pace, which compiling the jobs inflates under
        load, and running the LP without the bound's own test, helped M at 1-2 s on a
        host at load 8-12 but, at load 13-17, left the plan to a rounding or a greedy
        pass cut early: 45-59% where the greedy pass first reached 10-48%.)
        On smaller requests the LP goes first whenever it would run at all (the bound's
        own test, `RELAX_TRY_SHARE`), no longer only when a rounding fits beside it too:
        on M the LP and the nearest rounding cost about what the greedy pass costs
        (0.07-0.1 and 0.03 CPU s against 0.1-0.13), the pace read on compiling the jobs
        alone overstates the next phases 1.5-2.5 times on a loaded host, and after a
        greedy pass the LP no longer fits, which leaves the quick bound, 1-4% above the
        LP's on M: with the earlier test, M at 1 s at a load of about 3 (a third of a
        core) went greedy first in one run of two, 14.9% (seed 2) against 0.1-0.2%.
        Nor only when the greedy pass, the LP and a rounding do not all fit: on M
        (1,024 GPUs / 1,500 jobs) the greedy plan is 1.5-2.1% below the bound on seeds
        0-2, never the best start, and at 1 s at load 2-3 the greedy pass first left the
        second rounding no room (seed 1: 1.18% where the LP's integer parts reach 0.60%).
        The greedy pass still follows the first two roundings when it fits."""
        b = self.budget
        if b.deterministic or not self._rounds():
            return False
        self.compiled()
        lp_round = (LP_FIRST_SAFETY * self._relax_cpu()
                    + ROUND_MIN_SHARE * self._rounding_cpu() + self._cut_tail())
        if len(self.request.jobs) > BOTH_VARIANTS_UP_TO:
            return b.fits(lp_round)
        # smaller requests: whenever the LP would run at all (`RELAX_TRY_SHARE`)
        return b.fits(RELAX_TRY_SHARE * self._relax_cpu())

    def _rounds(self) -> bool:
        """Whether the starting plan tries the rounded LP (module doc): throughput-like
        objectives, with lexicographic levels only up to `LEVEL_ROUNDING_UP_TO` jobs."""
        return (self.request.policy.objective in LP_ROUND_OBJECTIVES
                and (len(self.request.jobs) <= LEVEL_ROUNDING_UP_TO
                     or not lexicographic_levels(self.request)))

    def _first_start(self) -> tuple[HeuristicResult, bool]:
        """The best of the greedy plan and the rounded LP plans, and whether it is a
        rounded one. On large requests where the LP and a rounding fit (`_lp_first`),
        they come first and the greedy pass follows only if it still fits; else the
        greedy runs first, so that
        a plan exists early (and is reported), then the bound (the LP's, or the quick one)
        and the roundings while each still fits. Ties go to the first rounding, then to
        the greedy plan."""
        greedy: HeuristicResult | None = None
        rounded: list[HeuristicResult] = []
        lp_first = self._lp_first()
        if not lp_first:
            greedy = self.greedy()
        schedule: list[tuple[str, dict[str, str], dict[str, float] | None]] = []
        if self._rounds():
            self.bound()
            schedule = self._schedule()
            # large requests: one rounding before the greedy pass; smaller ones two (the
            # first from the LP's nearest counts, when made: `_near_rounding`)
            rounded = self._roundings(schedule, (1 if len(self.request.jobs)
                                                 > BOTH_VARIANTS_UP_TO else 2)
                                      if lp_first else len(schedule))
        if greedy is None and (not rounded or self.budget.fits(
                self._jobs_cpu(GREEDY_CPU_PER_JOB))):
            greedy = self.greedy()
        if greedy is not None and greedy is self.unchecked:
            greedy = self._greedy_after_keep(greedy)
        if lp_first and rounded:
            rounded += self._roundings(schedule, len(schedule), len(rounded))
        order = [(p, True) for p in rounded[:1]]
        if greedy is not None:
            order.append((greedy, False))
        order += [(p, True) for p in rounded[1:]]
        if not order:   # no rounding and no room for the greedy: it runs anyway, cut
            order.append((self.greedy(), False))
        best, was_rounded = order[0]
        for cand, is_rounded in order[1:]:
            if self.better(cand, best):
                best, was_rounded = cand, is_rounded
        return best, was_rounded

    def _near_rounding(self) -> bool:
        """Whether the LP's counts rounded to the nearest integer are rounded into a plan
        too (`_schedule`): on requests up to `BOTH_VARIANTS_UP_TO` jobs, not in
        deterministic mode (whose plans stay as they were). On M (1,024 GPUs / 1,500
        jobs) the LP alone (no integer re-solve, as short or loaded budgets have it)
        rounds to 0.11%, 1.18%, 0.09%, 0.44%, 0.67% and 0.61% below the bound from those
        counts on seeds 0-5, against 0.25%, 0.60%, 2.08%, 0.19%, 0.28% and 3.21% from
        their integer parts (the "keep_first" variant: 0.19-4.45%), for one more
        rounding pass (0.03 s of CPU)."""
        return (not self.budget.deterministic
                and len(self.request.jobs) <= BOTH_VARIANTS_UP_TO)

    def _schedule(self) -> list[tuple[str, dict[str, str], dict[str, float] | None]]:
        """The roundings to try, in order, as (variant, targets, sizes): the LP's
        nearest counts by the first variant when they are made and differ from the
        integer parts (`_near_rounding`), then the integer parts by each variant
        (`ROUNDINGS`). The nearest counts go first: on M's seeds 0-5 they round to at
        most 1.18% below the bound, the integer parts to up to 3.21% (both together to
        at most 0.61%), and a short budget may buy one rounding only. When the
        integer re-solve gave the integer parts (solver/bound.py), the LP's nearest
        counts still go first (seed 2: 0.09% where the re-solve's reached 1.35%, cut at
        1 s), and the re-solve's nearest counts come third (seed 1 at 5 s: 0.32%
        against 0.37% from its integer parts)."""
        rel = self._relax
        if rel is None or not rel.targets:
            return []
        out: list[tuple[str, dict[str, str], dict[str, float] | None]] = [
            (v, rel.targets, rel.amounts) for v in ROUNDINGS]
        if rel.resolved_nearest and rel.resolved_nearest not in (rel.targets, rel.nearest):
            out.insert(1, (ROUNDINGS[0], rel.resolved_nearest, rel.resolved_nearest_amounts))
        if rel.nearest and rel.nearest != rel.targets:
            out.insert(0, (ROUNDINGS[0], rel.nearest, rel.nearest_amounts))
        return out

    def _roundings(self, schedule: list[tuple[str, dict[str, str], dict[str, float] | None]],
                   upto: int, first: int = 0) -> list[HeuristicResult]:
        """The rounded LP plans of `schedule`'s entries `first` to `upto` (`_schedule`),
        each while it fits in the time left (measured pace)."""
        out: list[HeuristicResult] = []
        for k, (variant, targets, sizes) in enumerate(schedule[first:upto], start=first):
            prior = self._rounding_cpu()
            # the first rounding is anytime (cut, it keeps the running jobs it did not
            # reach): a share of it is worth running; a further variant must fit whole
            # ... and its tail when cut (budget.CUT_TAIL_CPU_PER_JOB) must fit too
            need = prior * (ROUND_MIN_SHARE if k == 0 else 1.0) + self._cut_tail()
            if not targets or (self.budget.stopped() if self.budget.deterministic
                               else not self.budget.fits(need)):
                break
            out.append(self._run(partial(
                plan_lp_round, self.request, targets, variant=variant, sizes=sizes,
                deadline=self._heuristic_deadline(self.budget.estimate(self._cut_tail()))),
                prior))
        return out

    def _run(self, make: Callable[[], HeuristicResult], prior_cpu_s: float = 0.0
             ) -> HeuristicResult:
        """One starting heuristic of `prior_cpu_s` prior CPU seconds (0: not a measure
        of the pace), timed, its plan reported."""
        with self.budget.paced(prior_cpu_s) as pacing:
            self._warm = True
            plan = make()
            # a pass cut at its deadline did part of its work: not a measure of the pace
            pacing.void = any(why[0] == "time_limit" for why in plan.reasons.values())
        self.budget.charge(PASS_S_PER_JOB * len(self.request.jobs))
        self.budget.check_wall()
        self.incumbents.report(plan, "heuristic", "heuristic")
        return plan

    def _repacked(self, plan: HeuristicResult) -> HeuristicResult:
        """`plan` with its new shared jobs re-packed exactly by GPU patterns
        (solver/share_packing.py) when that ranks better; throughput-like objectives only,
        with at most `REPACK_SHARE` of the budget, when its prior fits there
        (`REPACK_CPU_PER_MOVABLE`). Not in deterministic mode: the re-pack
        is bounded by wall time only. Not with quotas: the pattern model does not count
        usage against the limits."""
        if (self.request.policy.objective not in LP_ROUND_OBJECTIVES
                or self.budget.deterministic or self.request.cluster.quotas):
            return plan
        stop = self.budget.until(cap_s=REPACK_SHARE * self.budget.limit_s)
        movable = sum(1 for i in compile_jobs(self.request)
                      if i.shape == "share" and not i.current)
        need = max(0.05, self.budget.estimate(REPACK_CPU_PER_MOVABLE * movable))
        if stop - time.monotonic() < need or self.budget.cancelled():
            return plan
        better = repack(self.request, plan, stop)
        if better is None or not self.better(better, plan):
            return plan
        self.notes.append("new shared jobs were re-packed by GPU patterns")
        return better


def _running_kept(request: PlanRequest) -> HeuristicResult:
    """Every running job kept exactly where it runs, every other job left out with the
    reason `time_limit` (static reasons replace it where they apply): what a greedy pass
    cut before its first queued job returns when the running jobs fit together, without
    its setup. Not checked here: the driver validates it and falls back when it fails."""
    out = HeuristicResult()
    cut = ("time_limit", "the time limit left no room to place queued jobs")
    for job in request.jobs:
        if job.current:
            out.placements[job.name] = list(job.current)
        else:
            out.reasons[job.name] = cut
    return out
