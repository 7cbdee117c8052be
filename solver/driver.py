"""The planning driver: `plan(request) -> Plan`, the one entry point of gpuplan.

Flow: compile the request once (solver/formulation.py), pick a planner from `PLANNERS` by
`policy.solver`, run it within `policy.time_limit_s`, dress the result as a Plan
(solver/build.py), validate it (solver/validate.py) and return it. A plan that fails
validation is a bug: `PlanningError` is raised, never a wrong plan returned.

Lexicographic objectives run as several exact solves of the same model:
- `fairness`: maximise the minimum tenant share T (phase 1), then throughput with T fixed.
- `priority_fifo`: walk the jobs in priority order, committing each job that can still be
  placed beside the committed ones (feasibility solves over runs of jobs, halved when a run
  fails), then maximise throughput.

`auto` picks by size: the full aggregated model when it stays under `EXACT_VARS`
variables; otherwise local search, then CP-SAT on a pruned model warm-started from it;
beyond `PRUNED_SIZE` (GPUs x jobs), greedy plus local search. Every non-optimal answer
carries the aggregated LP bound (solver/bound.py). For throughput-like objectives the
heuristic starting point (of local search, and the CP-SAT hint) is the best of the greedy
plan and the LP relaxation rounded into plans (heuristics/lp_round.py, `Context.start`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from threading import Event

from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from heuristics.lp_round import VARIANTS as ROUNDINGS
from heuristics.lp_round import plan_lp_round
from heuristics.result import HeuristicResult
from models import Placement, Plan, PlanRequest, PlanStatus
from models.objective import evaluate, same_placement, tenant_demands
from solver.backends import BACKENDS
from solver.bound import Relaxation, relax
from solver.build import build_plan
from solver.formulation import (
    FAIRNESS_STEPS,
    Compiled,
    compile_request,
    decode,
    encode_hints,
    priority_key,
)
from solver.linear import Limits, LinearModel, ModelTooLarge, Solution, add_terms
from solver.reasons import hard_conflicts, static_reasons
from solver.share_packing import repack
from solver.validate import validate_plan

log = logging.getLogger(__name__)


class PlanningError(RuntimeError):
    """A planner produced a plan that fails validation: a bug, raised loudly."""


@dataclass
class Context:
    """One planning call: the request, its deadline and the caller's hooks."""

    request: PlanRequest
    started: float
    deadline: float
    cancel: Event | None = None
    on_incumbent: Callable[[Plan], None] | None = None
    notes: list[str] = field(default_factory=list)
    _heuristic: HeuristicResult | None = None
    warm: HeuristicResult | None = None   # the warm start of exact solves, if not greedy
    _relax: Relaxation | None = None
    _bound_done: bool = False
    _start: HeuristicResult | None = None
    _reasons: dict[str, tuple[str, str]] | None = None
    compile_s: float = 0.0  # how long the last pruned model took to compile

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    @property
    def reserve(self) -> float:
        """Seconds kept back for decoding, building and validating the plan: `RESERVE_S`,
        or less on short budgets so that they still leave time to plan."""
        # reasons, plan building, fragmentation and validation grow about linearly:
        # ~7 s for 80,000 jobs on this project's 2-core reference machine
        per_job = 1e-4 * len(self.request.jobs)
        return min(RESERVE_S + per_job, 0.35 * self.request.policy.time_limit_s)

    def limits(self, share: float = 1.0) -> Limits:
        pol = self.request.policy
        return Limits(time_limit_s=max(0.05, self.remaining() * share),
                      threads=pol.threads or max(1, os.cpu_count() or 1),
                      seed=pol.seed, mip_gap=pol.mip_gap)

    def bound(self) -> float | None:
        """The aggregated LP bound of this request (computed once, with a slice of the
        budget: 2 s or a tenth of the budget, at most half of what remains before the
        reserve; its solution also seeds the rounded LP plan, see `start`)."""
        if not self._bound_done:
            budget = self.request.policy.time_limit_s
            left = max(0.0, self.remaining() - self.reserve)
            self._relax = relax(
                self.request,
                time_limit_s=max(0.1, min(max(2.0, 0.1 * budget), left / 2)))
            self._bound_done = True
        return None if self._relax is None else self._relax.bound

    def start(self) -> HeuristicResult:
        """The best of the rounded LP plans (heuristics/lp_round.py; throughput-like
        objectives only, where the LP's choice is the objective's) and the greedy plan,
        by the policy objective (computed once). The first rounding runs before the
        greedy: on large requests with short budgets it is the better use of the time;
        the greedy and the second rounding follow while a pass still fits."""
        if self._start is None:
            targets: dict[str, str] = {}
            if self.request.policy.objective in LP_ROUND_OBJECTIVES:
                self.bound()
                targets = self._relax.targets if self._relax is not None else {}
            plans: list[tuple[HeuristicResult, bool]] = []
            spent = 0.0  # the longest pass so far: the next one needs about as long

            def run(make: Callable[[], HeuristicResult], rounded: bool) -> None:
                nonlocal spent
                t0 = time.monotonic()
                plans.append((make(), rounded))
                spent = max(spent, time.monotonic() - t0)

            def room() -> bool:
                return self.remaining() - self.reserve > spent

            def rounding(variant: str) -> Callable[[], HeuristicResult]:
                return lambda: plan_lp_round(self.request, targets, variant=variant,
                                             deadline=self.deadline - self.reserve)

            if targets:
                run(rounding(ROUNDINGS[0]), True)
            if not plans or room():
                run(self.heuristic, False)
            for variant in ROUNDINGS[1:]:
                if targets and room():
                    run(rounding(variant), True)
            best, rounded = plans[0]
            for cand, was_rounded in plans[1:]:
                if _rank(self.request, cand.placements) > _rank(self.request,
                                                                best.placements):
                    best, rounded = cand, was_rounded
            if rounded:
                self.notes.append("the starting plan is the rounded LP relaxation")
            self._start = self._repacked(best)
        return self._start

    def _repacked(self, plan: HeuristicResult) -> HeuristicResult:
        """`plan` with its new shared jobs re-packed exactly by GPU patterns
        (solver/share_packing.py) when that ranks better; throughput-like objectives only,
        with at most `REPACK_SHARE` of the budget."""
        if self.request.policy.objective not in LP_ROUND_OBJECTIVES:
            return plan
        stop = min(self.deadline - self.reserve,
                   time.monotonic() + REPACK_SHARE * self.request.policy.time_limit_s)
        if stop - time.monotonic() < 0.05:
            return plan
        better = repack(self.request, plan, stop)
        if better is None or _rank(self.request, better.placements) <= _rank(
                self.request, plan.placements):
            return plan
        self.notes.append("new shared jobs were re-packed by GPU patterns")
        return better

    def reasons(self) -> dict[str, tuple[str, str]]:
        """Static reasons of the jobs no plan can place (computed once)."""
        if self._reasons is None:
            self._reasons = static_reasons(self.request)
        return self._reasons

    def heuristic(self) -> HeuristicResult:
        """The greedy plan of this request (computed once)."""
        if self._heuristic is None:
            self._heuristic = plan_greedy(self.request, seed=self.request.policy.seed,
                                          deadline=self.deadline - self.reserve)
        return self._heuristic


@dataclass
class Outcome:
    """A planner's result before it becomes a Plan."""

    result: HeuristicResult
    status: PlanStatus
    solver: str
    bound: float | None = None
    stats: dict[str, float | int | str] = field(default_factory=dict)


Planner = Callable[[Context], Outcome]

#: Seconds kept back from the budget for decoding, building and validating the plan.
RESERVE_S = 0.3
#: Objectives whose plans may start from the rounded LP relaxation (the lexicographic
#: ones have their own order of decisions).
LP_ROUND_OBJECTIVES = ("throughput", "jct", "makespan")
#: Most of the budget the pattern re-pack of shared jobs may take.
REPACK_SHARE = 0.3
#: Relative tolerance within which a plan reaching the LP bound counts as optimal (the
#: bound comes from a floating-point LP).
BOUND_TOL = 1e-7


def _infeasible(ctx: Context, solver: str, why: str) -> Outcome:
    reasons = {j.name: ("infeasible_constraints", why) for j in ctx.request.jobs}
    return Outcome(HeuristicResult(reasons=reasons), "infeasible", solver)


def _solve(ctx: Context, backend: str, model: LinearModel, share: float,
           compiled: Compiled | None = None, stream: bool = False) -> Solution:
    on_inc = None
    if stream and ctx.on_incumbent is not None and compiled is not None:
        hook = ctx.on_incumbent

        def on_inc(values: list[int], _obj: float) -> None:
            try:
                res = decode(compiled, values)
                inc = build_plan(ctx.request, res, status="feasible",
                                 solver=backend_name(backend),
                                 solve_time_s=time.monotonic() - ctx.started)
                bad = validate_plan(ctx.request, inc)
                if bad:  # a bug; the final plan is checked again and raises
                    log.error("invalid incumbent skipped: %s", bad[0].message)
                    return
                hook(inc)
            except Exception:  # an incumbent report must never break the solve
                log.exception("incumbent callback failed")
    lim = ctx.limits(share)
    lim.time_limit_s = max(0.05, lim.time_limit_s - ctx.reserve)
    return BACKENDS[backend].solve(model, lim, cancel=ctx.cancel, on_incumbent=on_inc)


def exact_outcome(ctx: Context, backend: str, prune: int | None = None,
                  compiled: Compiled | None = None) -> Outcome:
    """Solve the request with `backend` ("cp_sat", "cbc" or "highs"): exactly, or on the
    model restricted to each job's `prune` best targets (then at best `feasible`, with the
    aggregated LP bound)."""
    req = ctx.request
    objective = req.policy.objective
    start = (ctx.warm or ctx.start()).placements
    if compiled is None:
        t0 = time.monotonic()
        compiled = compile_request(req, prune=prune, hint=start)
        ctx.compile_s = time.monotonic() - t0
    compiled.model.hints.update(encode_hints(compiled, start))
    if ctx.remaining() < 2 * ctx.reserve + 0.05:
        ctx.notes.append("no time left for the exact search after compiling the model")
        return _fallback(ctx, backend_name(backend))
    if objective == "fairness":
        out = _fairness(ctx, backend, compiled)
    elif objective == "priority_fifo":
        out = _priority(ctx, backend, compiled)
    else:
        sol = _solve(ctx, backend, compiled.model, 1.0, compiled, stream=True)
        out = _finish(ctx, backend, compiled, sol)
    if compiled.pruned and out.status in ("optimal", "feasible"):
        # The restricted model's bound says nothing about the full problem.
        out.status = "feasible"
        out.bound = ctx.bound()
        ctx.notes.append(f"large request: each job was offered its {prune} best targets; "
                         "the bound is the aggregated LP relaxation")
    return out


def backend_name(backend: str) -> str:
    """The wire name of an exact backend."""
    return "cp_sat" if backend == "cp_sat" else f"milp/{backend}"


def _fallback(ctx: Context, name: str) -> Outcome:
    """The heuristic plan, with `time_limit` as the reason of jobs it leaves out."""
    res = ctx.warm or ctx.start()
    for j in ctx.request.jobs:
        if j.name not in res.placements and j.name not in res.reasons:
            res.reasons[j.name] = ("time_limit", "the exact solver ran out of time")
    return Outcome(res, "heuristic", name, ctx.bound())


def _finish(ctx: Context, backend: str, compiled: Compiled, sol: Solution,
            bound: float | None = None, status: PlanStatus | None = None) -> Outcome:
    name = backend_name(backend)
    stats: dict[str, float | int | str] = {f"model_{k}": v for k, v in sol.info.items()}
    if sol.status == "infeasible" and not compiled.pruned:
        return _infeasible(ctx, name, "the hard constraints conflict (e.g. non-preemptible "
                                      "running jobs that cannot all keep their GPUs)")
    if sol.values is None:
        ctx.notes.append(f"{name} found no solution within the time limit; "
                         "returning the heuristic plan")
        out = _fallback(ctx, name)
        out.stats = stats
        return out
    res = decode(compiled, sol.values)
    st: PlanStatus = status or ("optimal" if sol.status == "optimal" else "feasible")
    return Outcome(res, st, name, sol.bound if bound is None else bound, stats)


def _fairness(ctx: Context, backend: str, compiled: Compiled) -> Outcome:
    demands = tenant_demands(ctx.request)
    base = compiled.model
    phase1 = base.copy()
    t = phase1.new_var("min_share", 0, FAIRNESS_STEPS)
    for tenant, d in demands.items():
        # T / S <= share_k  <=>  sum(value terms of k) - (D_k / S) T >= 0
        row = dict(compiled.tenant_terms.get(tenant, {}))
        add_terms(row, {t: -d / FAIRNESS_STEPS})
        phase1.add(row, lo=0.0, name=f"share[{tenant}]")
    if not demands:
        phase1.fix(t, 0)
    phase1.objective = {t: 1.0}
    phase1.objective_const = 0.0
    s1 = _solve(ctx, backend, phase1, 0.5)
    if s1.values is None or s1.status == "infeasible":
        return _finish(ctx, backend, compiled, s1)
    t_star = s1.values[t]
    bound1 = None if s1.bound is None else min(1.0, (math.floor(s1.bound + 1e-9) + 1)
                                               / FAIRNESS_STEPS)
    if s1.status == "optimal":
        bound1 = min(1.0, (t_star + 1) / FAIRNESS_STEPS)
    phase2 = phase1.copy()
    phase2.lbs[t] = t_star
    phase2.objective = dict(compiled.throughput_terms)
    phase2.objective_const = compiled.model.objective_const
    phase2.hints = {**base.hints, **dict(enumerate(s1.values))}
    s2 = _solve(ctx, backend, phase2, 1.0, compiled, stream=True)
    sol = s2 if s2.values is not None else s1
    status: PlanStatus = "optimal" if s1.status == "optimal" and s2.status == "optimal" \
        else "feasible"
    out = _finish(ctx, backend, compiled, sol, bound=bound1, status=status)
    # The minimum share is maximised (and bounded) on a grid of this step.
    out.stats["fairness_resolution"] = 1.0 / FAIRNESS_STEPS
    return out


def _priority(ctx: Context, backend: str, compiled: Compiled) -> Outcome:
    """Lexicographic placement in priority order, then throughput.

    Sequentially, job k is committed when it can be placed beside the jobs committed before
    it. Batches make this cheap: if a run of consecutive jobs can be placed together beside
    the committed ones, each of them would have been committed one by one, so the whole run
    is committed with one feasibility solve; a run that cannot is halved until single jobs
    are decided. A job that fails also fails every later member of its group (identical
    jobs, decided in rank order)."""
    req = ctx.request
    order = sorted(range(len(req.jobs)), key=lambda i: priority_key(req.jobs[i]))
    reasons = ctx.reasons()
    model = compiled.model.copy()
    model.objective = {}
    model.objective_const = 0.0
    left_out: dict[int, str] = {}
    failed_sigs: set[tuple[object, ...]] = set()
    exhaustive = True
    base_values: list[int] | None = None
    pending = []
    for i in order:
        if req.jobs[i].name in reasons and not req.jobs[i].current:
            left_out[i] = "static"
        else:
            pending.append(i)
    pos, chunk = 0, len(pending)
    while pos < len(pending):
        batch = []
        for i in pending[pos:pos + chunk]:
            sig = _shape_sig(compiled, i)
            if sig is not None and sig in failed_sigs:
                left_out[i] = "priority"
            else:
                batch.append(i)
        if not batch:
            pos += chunk
            continue
        if ctx.remaining() <= ctx.reserve * 2:
            exhaustive = False
            for i in pending[pos:]:
                left_out.setdefault(i, "time")
            break
        trial = model.copy()
        for i in batch:
            terms, need = compiled.placed_expr(i)
            trial.add(terms, lo=need)
        if base_values is not None:
            trial.hints = dict(enumerate(base_values))
        s = _solve(ctx, backend, trial, 0.25)
        if s.status in ("optimal", "feasible"):
            model = trial
            base_values = s.values
            pos += chunk
            chunk = max(1, min(2 * chunk, len(pending) - pos))
        elif chunk > 1:
            chunk = max(1, chunk // 2)
        else:
            (i,) = batch
            if s.status == "unknown":
                exhaustive = False
                left_out[i] = "time"
            else:
                left_out[i] = "priority"
                sig = _shape_sig(compiled, i)
                if sig is not None:
                    failed_sigs.add(sig)
            pos += 1  # after a failure, capacity is likely short: grow again from 1
    final = model.copy()
    final.objective = dict(compiled.model.objective)
    final.objective_const = compiled.model.objective_const
    if base_values is not None:
        final.hints = dict(enumerate(base_values))
    sol = _solve(ctx, backend, final, 1.0, compiled, stream=True)
    if sol.values is None and base_values is not None:
        sol = Solution("feasible", base_values, None, None)
    out = _finish(ctx, backend, compiled, sol,
                  status=None if exhaustive else "feasible")
    for i, why in left_out.items():
        name = req.jobs[i].name
        if why == "priority":
            out.result.reasons.setdefault(name, (
                "insufficient_capacity",
                "no room beside the jobs before it in priority order"))
        elif why == "time":
            out.result.reasons.setdefault(name, ("time_limit",
                                                 "not reached in priority order in time"))
    if not exhaustive and out.status == "optimal":
        out.status = "feasible"
    return out


def _shape_sig(compiled: Compiled, i: int) -> tuple[object, ...] | None:
    """Identical new jobs share a group; a failed member means later ones fail too."""
    if i in compiled.group_of:
        return ("group", compiled.group_of[i][0])
    return None


# ------------------------------------------------------------------------ planners
def _heuristic(ctx: Context) -> Outcome:
    """Greedy best fit (or the rounded LP when better), then local search for a short while
    (at most 1 s or a quarter of the budget), with the aggregated LP bound."""
    res = ctx.start()
    ctx.bound()
    stop = min(ctx.deadline - ctx.reserve,
               time.monotonic() + min(1.0, ctx.remaining() / 4))
    if stop > time.monotonic():
        res = improve(ctx.request, res, deadline=stop, seed=ctx.request.policy.seed,
                      max_moves=_moves(ctx.request))
    return Outcome(res, "heuristic", "heuristic", ctx.bound())


def _rank(request: PlanRequest, placements: dict[str, list[Placement]]
          ) -> tuple[float, ...]:
    """How good a plan is under the policy's objective, lexicographic where it is:
    priority_fifo compares which jobs are placed in priority order first, fairness the
    minimum share first; then the objective (rounded, so that float noise does not rank)."""
    ev = evaluate(request, placements)
    if request.policy.objective == "priority_fifo":
        order = sorted(request.jobs, key=priority_key)
        return (*(1.0 if placements.get(j.name) else 0.0 for j in order),
                round(ev.throughput, 9))
    if request.policy.objective == "fairness":
        return (round(ev.objective_value, 9), round(ev.throughput, 9))
    return (round(ev.objective_value, 9),)


def _moves(request: PlanRequest) -> int:
    """Most local-search moves worth trying: small requests converge in a few hundred, so
    they do not spend their whole budget searching."""
    return max(300, 50 * len(request.jobs))


def _breaks_running(request: PlanRequest, result: HeuristicResult) -> bool:
    """Whether `result` stops a running job it may not stop (heuristics can miss a plan
    that keeps them all)."""
    for job in request.jobs:
        if not job.current:
            continue
        pls = result.placements.get(job.name)
        if not job.preemptible and not (pls and same_placement(pls, job.current)):
            return True
        if not request.policy.allow_preemption and not pls:
            return True
    return False


def _settle_running(ctx: Context, out: Outcome) -> Outcome:
    """A heuristic plan stopped a job that must keep running: ask CP-SAT for a plan that
    keeps every such job, or for the proof that none exists."""
    exact = _exact_for_size(ctx, "cp_sat")
    if exact.status in ("optimal", "feasible") and not _breaks_running(ctx.request,
                                                                       exact.result):
        return exact
    why = ("the hard constraints conflict: the running jobs that must stay cannot all be "
           "kept or moved" if exact.status == "infeasible" else
           "no plan keeping every running job that must run was found in time")
    ctx.notes.append(why)
    return _infeasible(ctx, out.solver, why)


def _size(request: PlanRequest) -> int:
    return sum(len(n.gpus) for n in request.cluster.nodes) * max(1, len(request.jobs))


#: Variables up to which the exact backends (and `auto`) solve the full model.
EXACT_VARS = 20_000
#: GPUs x jobs up to which `auto` tries CP-SAT (full or pruned); beyond it, heuristics.
PRUNED_SIZE = 4_000_000
#: Targets per job in the pruned model; `auto` doubles them, up to `PRUNE_K_MAX`, while
#: CP-SAT settles each pruned model with more than `WIDEN_MIN_S` seconds to spare (plus
#: three times the last compile, as the wider model takes about twice as long to build).
PRUNE_K = 4
PRUNE_K_MAX = 64
WIDEN_MIN_S = 1.0


def _estimate_vars(request: PlanRequest) -> int:
    """A rough size of the full model: (distinct queued job shapes + running jobs) x
    nodes. Cheap, and enough to skip compiling models that would be far too large."""
    shapes = {
        (j.gpus, j.single_node, j.same_domain, j.mig_profile,
         None if j.mig is None else (j.mig.compute_slices, j.mig.memory_gib), j.gpu_share,
         j.gpu_memory_gib, tuple(sorted((j.throughput or {}).items())),
         tuple(j.allowed_models or ()), j.cpu_millicores, j.host_memory_gib, j.tenant,
         j.weight)
        for j in request.jobs if not j.current}
    running = sum(1 for j in request.jobs if j.current)
    return (len(shapes) + running) * max(1, len(request.cluster.nodes))


def _full_model(ctx: Context) -> Compiled | None:
    """The exact model when it stays within `EXACT_VARS` variables (aggregation keeps
    many large but regular requests small), else None."""
    if _estimate_vars(ctx.request) > 2 * EXACT_VARS:
        return None
    try:
        return compile_request(ctx.request, hint=(ctx.warm or ctx.start()).placements,
                               max_vars=EXACT_VARS)
    except ModelTooLarge:
        return None


def _exact_for_size(ctx: Context, backend: str) -> Outcome:
    full = _full_model(ctx)
    if full is not None:
        return exact_outcome(ctx, backend, compiled=full)
    return exact_outcome(ctx, backend, PRUNE_K)


def _cp_sat(ctx: Context) -> Outcome:
    return _exact_for_size(ctx, "cp_sat")


def _milp(ctx: Context) -> Outcome:
    return _exact_for_size(ctx, ctx.request.policy.milp_backend)


def _meets_bound(ctx: Context, plan: HeuristicResult | None = None,
                 what: str = "the starting plan") -> Outcome | None:
    """`plan` (default: the starting plan), as `optimal`, when its objective already
    reaches the LP bound (throughput-like objectives, where that bound is computed
    anyway); else None."""
    if ctx.request.policy.objective not in LP_ROUND_OBJECTIVES:
        return None
    res = plan if plan is not None else ctx.start()
    bound = ctx.bound()
    if bound is None:
        return None
    value = evaluate(ctx.request, res.placements).objective_value
    if value < bound - BOUND_TOL * max(1.0, abs(bound)):
        return None
    ctx.notes.append(f"{what} reaches the LP bound, so it is optimal")
    return Outcome(res, "optimal", "auto/heuristic", max(bound, value))


def _auto(ctx: Context) -> Outcome:
    """Exact CP-SAT for small requests, the pruned model warm-started from the heuristic
    for medium ones, decomposition and heuristics for large ones; never worse than the
    heuristic plan. A starting plan that reaches the LP bound is returned at once."""
    done = _meets_bound(ctx)
    if done is not None:
        return done
    size = _size(ctx.request)
    full = _full_model(ctx) if size <= PRUNED_SIZE else None
    if full is not None:
        out = exact_outcome(ctx, "cp_sat", compiled=full)
        out.solver = f"auto/{out.solver}"
    elif size <= PRUNED_SIZE:
        ctx.bound()
        # Local search first (a third of the budget), then CP-SAT on the pruned model
        # warm-started from its plan.
        stop = time.monotonic() + ctx.remaining() / 3
        ctx.warm = improve(ctx.request, ctx.start(), deadline=stop,
                           max_moves=_moves(ctx.request),
                           seed=ctx.request.policy.seed)
        done = _meets_bound(ctx, ctx.warm, "the local search's plan")
        if done is not None:
            return done
        out = exact_outcome(ctx, "cp_sat", PRUNE_K)
        k = PRUNE_K
        while (out.status == "feasible" and k < PRUNE_K_MAX
               and ctx.remaining() - ctx.reserve > WIDEN_MIN_S + 3 * ctx.compile_s):
            # CP-SAT settled the pruned model with time to spare: offer each job more
            # targets, warm-started from the best plan so far
            k *= 2
            if _rank(ctx.request, out.result.placements) > _rank(
                    ctx.request, (ctx.warm or ctx.start()).placements):
                ctx.warm = out.result
            wider = exact_outcome(ctx, "cp_sat", k)
            if wider.status == "feasible" and _rank(ctx.request, wider.result.placements) >= (
                    _rank(ctx.request, out.result.placements)):
                out = wider
            else:
                break
        out.solver = f"auto/{out.solver}"
    else:
        ctx.bound()
        out = _decomposed(ctx)
    if out.status in ("feasible", "heuristic"):
        heur = ctx.warm or ctx.start()
        if _rank(ctx.request, heur.placements) > _rank(ctx.request, out.result.placements):
            out.result = heur
            out.status = "heuristic"
            out.solver = "auto/heuristic"
    if out.status != "optimal":
        bounds = [b for b in (out.bound, ctx.bound()) if b is not None]
        out.bound = min(bounds) if bounds else None
        done = (_meets_bound(ctx, out.result, "the plan")
                if out.status in ("feasible", "heuristic") else None)
        if done is not None:
            done.solver = out.solver
            return done
    return out


def _decomposed(ctx: Context) -> Outcome:
    """Large requests: the heuristic plan improved by local search until the deadline."""
    res = improve(ctx.request, ctx.start(), deadline=ctx.deadline - ctx.reserve,
                  max_moves=_moves(ctx.request),
                  seed=ctx.request.policy.seed)
    return Outcome(res, "heuristic", "auto/heuristic", None)


#: policy.solver -> planner.
PLANNERS: dict[str, Planner] = {
    "cp_sat": _cp_sat,
    "milp": _milp,
    "heuristic": _heuristic,
    "auto": _auto,
}


def plan(
    request: PlanRequest,
    *,
    cancel: Event | None = None,
    on_incumbent: Callable[[Plan], None] | None = None,
) -> Plan:
    """Solve `request` within `policy.time_limit_s` and return a validated Plan.

    `cancel` stops an exact search early (the best plan so far comes back);
    `on_incumbent` receives intermediate plans as the exact search improves.
    """
    t0 = time.monotonic()
    ctx = Context(request, t0, t0 + request.policy.time_limit_s, cancel, on_incumbent)
    conflicts = hard_conflicts(request)
    if conflicts:
        out = _infeasible(ctx, request.policy.solver, "; ".join(conflicts[:3]))
    else:
        out = PLANNERS[request.policy.solver](ctx)
        if out.status != "infeasible" and _breaks_running(request, out.result):
            out = _settle_running(ctx, out)
    reasons = ctx.reasons()
    for name, why in reasons.items():
        if name not in out.result.placements:
            out.result.reasons[name] = why
    result = build_plan(request, out.result, status=out.status, solver=out.solver,
                        best_bound=out.bound, solve_time_s=time.monotonic() - t0,
                        extra_stats=out.stats, explanation=ctx.notes)
    violations = validate_plan(request, result)
    if violations:
        raise PlanningError(
            f"{out.solver} produced an invalid plan: "
            + "; ".join(f"[{v.rule}] {v.message}" for v in violations[:5]))
    return result
