"""The `auto` size policy, and the local search every heuristic path shares.

`auto` picks by size:
- small: the full aggregated model when it stays under `EXACT_VARS` variables, solved
  exactly by CP-SAT;
- medium (up to `PRUNED_SIZE` GPUs x jobs): local search on the starting plan (a third of
  the budget), then CP-SAT on the model restricted to each job's `PRUNE_K` best targets,
  warm-started from it, widened (targets doubled) while each model is settled with time
  to spare;
- large: local search on the starting plan until the deadline.
It is never worse than the starting plan, and a plan that reaches the aggregated LP bound
is returned at once as optimal. Every non-optimal answer carries the LP bound.
"""

from __future__ import annotations

import time

from heuristics.local_search import improve
from heuristics.result import HeuristicResult
from models import PlanRequest, PlanStatus
from models.rules import lexicographic_levels
from solver.budget import MOVES_PER_S, SEARCH_SETUP_CPU_PER_JOB, SEARCH_TAIL_CPU_PER_JOB
from solver.context import Context
from solver.exact import compile_model, exact_outcome
from solver.formulation import Compiled
from solver.levels import level_search
from solver.linear import ModelTooLarge
from solver.outcome import LP_ROUND_OBJECTIVES, Outcome

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
#: Relative tolerance within which a plan reaching the LP bound counts as optimal (the
#: bound comes from a floating-point LP).
BOUND_TOL = 1e-7


def size(request: PlanRequest) -> int:
    """GPUs x jobs: what decides between the exact, pruned and heuristic paths."""
    return sum(len(n.gpus) for n in request.cluster.nodes) * max(1, len(request.jobs))


def moves(request: PlanRequest) -> int:
    """Most local-search moves worth trying: small requests converge in a few hundred, so
    they do not spend their whole budget searching."""
    return max(300, 50 * len(request.jobs))


def local_search(ctx: Context, share: float = 1.0, cap_s: float | None = None
                 ) -> HeuristicResult:
    """The starting plan improved by local search for `share` of the time left (at most
    `cap_s` seconds; in deterministic mode, the moves that much budget buys)."""
    budget = ctx.budget
    start = ctx.portfolio.start()
    # its setup and final comparison are not time-boxed (L: 0.8 s of CPU before a move)
    need = 0.01 if budget.deterministic else budget.estimate(
        SEARCH_SETUP_CPU_PER_JOB * len(ctx.request.jobs))
    if budget.stopped(need=max(0.01, need)):
        return start
    limit = moves(ctx.request)
    if budget.deterministic:
        span = share * max(0.0, budget.remaining() - budget.reserve)
        limit = max(1, min(limit, int(MOVES_PER_S * (span if cap_s is None
                                                      else min(span, cap_s)))))
        budget.charge(limit / MOVES_PER_S)
    deadline = budget.until(share, cap_s)
    if not budget.deterministic:   # leave room for its tail (reading out, comparing)
        deadline = max(time.monotonic(), deadline - budget.estimate(
            SEARCH_TAIL_CPU_PER_JOB * len(ctx.request.jobs)))
    with budget.python_phase():
        out = improve(ctx.request, start, deadline=deadline,
                      seed=ctx.request.policy.seed, max_moves=limit, cancel=budget.cancel)
    budget.check_wall()
    return out


def estimate_vars(request: PlanRequest) -> int:
    """A rough size of the full model: (distinct queued job shapes + running jobs) x
    nodes. Cheap, and enough to skip compiling models that would be far too large."""
    shapes = {
        (j.gpus, j.single_node, j.same_domain, j.mig_profile,
         None if j.mig is None else (j.mig.compute_slices, j.mig.memory_gib), j.gpu_share,
         j.gpu_memory_gib, tuple(sorted((j.throughput or {}).items())),
         tuple(j.allowed_models or ()), j.cpu_millicores, j.host_memory_gib, j.tenant,
         j.weight, j.name if j.elastic is not None else None, j.colocation_class)
        for j in request.jobs if not j.current}
    running = sum(1 for j in request.jobs if j.current)
    return (len(shapes) + running) * max(1, len(request.cluster.nodes))


def full_model(ctx: Context) -> Compiled | None:
    """The exact model when it stays within `EXACT_VARS` variables (aggregation keeps
    many large but regular requests small), else None (also when out of time)."""
    if estimate_vars(ctx.request) > 2 * EXACT_VARS:
        return None
    try:
        return compile_model(ctx, max_vars=EXACT_VARS)
    except ModelTooLarge:
        return None


def exact_for_size(ctx: Context, backend: str) -> Outcome:
    """`backend` on the full model when it is small enough, else on the model pruned to
    each job's `PRUNE_K` best targets."""
    full = full_model(ctx)
    if full is not None:
        return exact_outcome(ctx, backend, compiled=full)
    return exact_outcome(ctx, backend, PRUNE_K)


def meets_bound(ctx: Context, plan: HeuristicResult, what: str, producer: str
                ) -> Outcome | None:
    """`plan`, as `optimal`, when its objective already reaches the LP bound
    (throughput-like objectives, where that bound is computed anyway); else None. Not
    with quotas or priority classes: the bound is the objective's over all plans within
    the limits, and the best of those need not be the lexicographic optimum."""
    if (ctx.request.policy.objective not in LP_ROUND_OBJECTIVES
            or lexicographic_levels(ctx.request)):
        return None
    bound = ctx.portfolio.bound()
    if bound is None:
        return None
    value = ctx.portfolio.judge(plan)[1]
    if value < bound - BOUND_TOL * max(1.0, abs(bound)):
        return None
    ctx.notes.append(f"{what} reaches the LP bound, so it is optimal")
    return Outcome(plan, "optimal", producer, max(bound, value))


def auto(ctx: Context) -> Outcome:
    """The size policy (module doc)."""
    done = meets_bound(ctx, ctx.portfolio.start(), "the starting plan",
                       ctx.label("heuristic"))
    if done is not None:
        return done
    if size(ctx.request) > PRUNED_SIZE:
        ctx.portfolio.bound()
        ctx.portfolio.offer(local_search(ctx))
        return settle(ctx, None)
    full = full_model(ctx)
    if full is not None:
        return settle(ctx, exact_outcome(ctx, "cp_sat", compiled=full))
    return _pruned(ctx)


def _pruned(ctx: Context) -> Outcome:
    """Medium requests: local search (a third of the budget), then CP-SAT on pruned
    models warm-started from the best plan so far, widened while they settle early.
    With quotas or priority classes, `solver.levels.level_search` comes first in place of
    the local search, until the deadline or its restarts run out (its docstring says
    why), and the bound after it (the LP's when it still fits, else the quick one): the
    LP bounds the total objective, not the levels, and its 0.4 CPU s on M are the level
    search's; CP-SAT gets what it leaves."""
    if lexicographic_levels(ctx.request):
        ctx.portfolio.offer(level_search(ctx))
        ctx.portfolio.bound()
    else:
        ctx.portfolio.bound()
        ctx.portfolio.offer(local_search(ctx, 1 / 3))
    done = meets_bound(ctx, ctx.portfolio.start(), "the local search's plan",
                       ctx.label("heuristic"))
    if done is not None:
        return done
    if ctx.budget.stopped(need=0.05):
        # compiling the model does work before its first variable, past any deadline
        ctx.notes.append("no time left to build the exact model")
        return settle(ctx, None)
    out = exact_outcome(ctx, "cp_sat", PRUNE_K)
    k = PRUNE_K
    while (out.status == "feasible" and k < PRUNE_K_MAX
           and not ctx.budget.stopped(need=WIDEN_MIN_S + 3 * ctx.compile_s)):
        # CP-SAT settled the pruned model with time to spare: offer each job more
        # targets, warm-started from the best plan so far
        k *= 2
        ctx.portfolio.offer(out.result, "cp_sat")
        wider = exact_outcome(ctx, "cp_sat", k)
        if wider.status != "feasible" or ctx.portfolio.better(out.result, wider.result):
            break
        out = wider
    return settle(ctx, out)


def settle(ctx: Context, out: Outcome | None) -> Outcome:
    """The final answer of `auto`: `out` (an exact outcome, None when none ran) or the
    starting plan when it ranks better, with the tighter of the bounds, as `optimal`
    when it reaches the LP bound."""
    if out is not None and out.status in ("optimal", "infeasible"):
        return out
    start = ctx.portfolio.start()
    status: PlanStatus
    if out is None or ctx.portfolio.better(start, out.result):
        result, status, solver = start, "heuristic", ctx.label("heuristic")
    else:
        result, status, solver = out.result, out.status, out.solver
    bounds = [b for b in (out.bound if out else None, ctx.portfolio.bound()) if b is not None]
    done = meets_bound(ctx, result, "the plan", solver)
    if done is not None:
        return done
    return Outcome(result, status, solver, min(bounds) if bounds else None,
                   out.stats if out else {})
