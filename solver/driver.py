"""The planning driver: `plan(request) -> Plan`, the one entry point of gpuplan.

Flow: check the hard conflicts, pick a planner from `PLANNERS` by `policy.solver`, run it
within `policy.time_limit_s`, dress the Outcome as a Plan (solver/build.py), validate it
(solver/validate.py) and return it. A plan that fails validation is a bug: `PlanningError`
is raised, never a wrong plan returned.

The parts, one job each:
- solver/budget.py: the one deadline, the measured pace of the phases and the finishing
  reserve, the cancel flag, the work clock of deterministic mode;
- solver/portfolio.py: the starting plan (greedy, rounded LP, share re-pack), the bound
  (the LP's, else the quick one of solver/quick_bound.py) and the static reasons, each
  computed once; incumbent reports;
- solver/exact.py: compiling and solving the model, the status of an exact answer;
- solver/levels.py: the lexicographic objectives (fairness, priority_fifo);
- solver/auto.py: the `auto` size policy and the shared local search;
- solver/outcome.py: the Outcome (decided once) and how plans rank.

With quotas or priority classes, every planner's answer passes
`heuristics.levels.settle_levels` before it is dressed: nodes cleared of borrowed work for
the gangs of tenants below their guarantees, and a higher-class running job that a
time-limited search left stopped where removing only lower-class work would keep it is
kept (contract 5.3 / 5.4; a proven lexicographic optimum has neither, so it comes back
unchanged).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from threading import Event

from heuristics.levels import settle_levels
from heuristics.result import HeuristicResult
from models import Plan, PlanRequest
from models.objective import compiled_infos, same_placement
from solver.auto import auto, exact_for_size, local_search
from solver.build import build_plan
from solver.context import Context
from solver.exact import fallback
from solver.gcpause import gc_paused
from solver.level_report import add_level_bounds
from solver.outcome import Outcome, infeasible
from solver.reasons import hard_conflicts
from solver.validate import Violation, validate_plan

log = logging.getLogger(__name__)


#: A plan returned more than this many seconds past its time limit says so in its
#: explanation (and the log): the limit is a promise, and a broken one is explained.
OVERRUN_NOTE_S = 0.1


def note_overrun(plan_: Plan, request: PlanRequest, gpus: int, load: float,
                 finish_s: float) -> None:
    """Say in `plan_`'s explanation, and the log, when it came back more than
    `OVERRUN_NOTE_S` past its time limit: by how much, at what load (wall seconds per CPU
    second, as the solve saw it), and what building and validating it took (`finish_s`)."""
    over = plan_.solve_time_s - request.policy.time_limit_s
    if over <= OVERRUN_NOTE_S:
        return
    note = (f"the time limit of {request.policy.time_limit_s:g} s was overrun by "
            f"{over:.2f} s (machine load {load:.1f} as this solve saw it): with "
            f"{len(request.jobs)} jobs and {gpus} GPUs, building and validating the plan "
            f"alone took {finish_s:.2f} s")
    plan_.explanation.append(note)
    log.warning(note)


class PlanningError(RuntimeError):
    """A planner produced a plan that fails validation: a bug, raised loudly."""


Planner = Callable[[Context], Outcome]


def _heuristic(ctx: Context) -> Outcome:
    """The starting plan, then local search for a short while (at most 1 s or a quarter
    of the budget), with the aggregated LP bound."""
    ctx.portfolio.start()
    ctx.portfolio.bound()
    ctx.portfolio.offer(local_search(ctx, 0.25, cap_s=1.0))
    return Outcome(ctx.portfolio.start(), "heuristic", "heuristic", ctx.portfolio.bound())


def _cp_sat(ctx: Context) -> Outcome:
    return exact_for_size(ctx, "cp_sat")


def _milp(ctx: Context) -> Outcome:
    return exact_for_size(ctx, ctx.request.policy.milp_backend)


#: policy.solver -> planner.
PLANNERS: dict[str, Planner] = {
    "cp_sat": _cp_sat,
    "milp": _milp,
    "heuristic": _heuristic,
    "auto": auto,
}


def _breaks_running(request: PlanRequest, result: HeuristicResult) -> bool:
    """Whether `result` stops a running job it may not stop (heuristics can miss a plan
    that keeps them all). The jobs are read through their JobInfos when the request is
    compiled (`compiled_infos`)."""
    infos = compiled_infos(request)
    placed = result.placements.get
    may_stop = request.policy.allow_preemption
    for job in request.jobs if infos is None else infos:
        current = job.current
        if not current:
            continue
        pls = placed(job.name)
        if not job.preemptible and not (pls and same_placement(pls, current)):
            return True
        if not may_stop and not pls:
            return True
    return False


def _settle_running(ctx: Context, out: Outcome) -> Outcome:
    """A heuristic plan stopped a job that must keep running: ask CP-SAT for a plan that
    keeps every such job, or for the proof that none exists."""
    exact = exact_for_size(ctx, "cp_sat")
    if exact.status in ("optimal", "feasible") and not _breaks_running(ctx.request,
                                                                       exact.result):
        return exact
    why = ("the hard constraints conflict: the running jobs that must stay cannot all be "
           "kept or moved" if exact.status == "infeasible" else
           "no plan keeping every running job that must run was found in time")
    ctx.notes.append(why)
    return infeasible(ctx.request, out.solver, why)


def _outcome(ctx: Context) -> Outcome:
    """The planner's answer for the request of `ctx`, the running jobs settled."""
    request = ctx.request
    ctx.portfolio.compiled()   # the first paced phase; `hard_conflicts` reads its JobInfos
    conflicts = hard_conflicts(request)
    if conflicts:
        return infeasible(request, request.policy.solver, "; ".join(conflicts[:3]))
    ctx.portfolio.reasons()   # needed at the end; also a first measure of the load
    out = PLANNERS[request.policy.solver](ctx)
    if out.status != "infeasible":
        kept = settle_levels(request, out.result,
                             None if ctx.budget.deterministic else ctx.budget.until())
        if kept is not out.result:
            out = dataclasses.replace(out, result=kept)
    if out.status != "infeasible" and _breaks_running(request, out.result):
        out = _settle_running(ctx, out)
    if ctx.budget.cancelled():
        ctx.notes.append("cancelled: returning the best plan found so far")
        if out.status in ("feasible", "heuristic") and ctx.portfolio.better(
                ctx.portfolio.start(), out.result):
            return fallback(ctx)
    return out


def plan(
    request: PlanRequest,
    *,
    cancel: Event | None = None,
    on_incumbent: Callable[[Plan], None] | None = None,
) -> Plan:
    """Solve `request` within `policy.time_limit_s` and return a validated Plan.

    `cancel`, once set (at any moment, also before the exact search starts), stops the
    solve: the best plan so far comes back. `on_incumbent` receives each better plan as
    it is found: the starting heuristic plans (status `heuristic`) from the first phase
    on, then the exact search's incumbents (status `feasible`), each validated.
    `solve_time_s` covers the whole call, validation included. The cyclic garbage
    collector is paused meanwhile (solver/gcpause.py).
    """
    with gc_paused():
        return _plan(request, cancel, on_incumbent)


def _plan(request: PlanRequest, cancel: Event | None,
          on_incumbent: Callable[[Plan], None] | None) -> Plan:
    """`plan`, with the collector paused."""
    ctx = Context.start(request, cancel, on_incumbent)
    out = _outcome(ctx)
    if ctx.budget.wall_cut:
        ctx.notes.append("deterministic mode: the time limit cut a phase, so this plan "
                         "may differ between runs")
    finishing = time.monotonic()
    plan_, violations = _finish(ctx, out)
    if violations and out.result is ctx.portfolio.unchecked:
        # the plan keeping every running job unchecked does not hold (conflicting
        # running jobs): the greedy pass that keeps those it can stands in for it
        log.info("keeping every running job fails validation (%s): greedy keeps them",
                 violations[0].message)
        out = dataclasses.replace(out, result=ctx.portfolio.fall_back())
        if _breaks_running(request, out.result):
            out = _settle_running(ctx, out)
        plan_, violations = _finish(ctx, out)
    if violations:
        raise PlanningError(
            f"{out.solver} produced an invalid plan: "
            + "; ".join(f"[{v.rule}] {v.message}" for v in violations[:5]))
    plan_.solve_time_s = round(ctx.budget.elapsed(), 6)
    note_overrun(plan_, request, ctx.budget.gpus, ctx.budget.load(),
                 time.monotonic() - finishing)
    log.debug("planned in %.3f s (limit %.3f s; load %.2f; finishing took %.3f s, "
              "reserved %.3f s)", plan_.solve_time_s, request.policy.time_limit_s,
              ctx.budget.load(), time.monotonic() - finishing, ctx.budget.reserve)
    return plan_


def _finish(ctx: Context, out: Outcome) -> tuple[Plan, list[Violation]]:
    """`out` dressed as a Plan (static reasons for the jobs it leaves out), and the
    validator's verdict on it."""
    request = ctx.request
    # the placements' objective as the portfolio judged them (the copy below keeps them)
    evaluation = ctx.portfolio.evaluation(out.result)
    result = HeuristicResult(dict(out.result.placements), dict(out.result.reasons))
    for name, why in ctx.portfolio.reasons().items():
        if name not in result.placements:
            result.reasons[name] = why
    plan_ = build_plan(request, result, status=out.status, solver=out.solver,
                       best_bound=out.bound, extra_stats=out.stats, explanation=ctx.notes,
                       evaluation=evaluation)
    add_level_bounds(request, plan_, ctx.budget.wall_left())
    return plan_, validate_plan(request, plan_)
