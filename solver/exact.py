"""Exact solves of the compiled model: compile within the budget, warm-start from the
starting plan, solve with a backend (streaming its incumbents), and turn the answer into
an Outcome whose status is decided here, once:

- `infeasible`: the backend proved the full (unpruned) model infeasible;
- `optimal`: the backend proved its answer optimal, on the full model, after an
  exhaustive walk of the lexicographic levels;
- `feasible`: any other answer of the backend (with the backend's bound, or the
  aggregated LP bound when the model was pruned);
- `heuristic`: the backend found nothing in time (or there was no time to run it): the
  starting plan, labelled as the heuristic's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from heuristics.result import HeuristicResult
from models.rules import lexicographic_levels
from solver.backends import BACKENDS, IncumbentCallback
from solver.backends.cp_sat import startup_prior
from solver.budget import DET_UNITS_PER_S
from solver.context import Context
from solver.formulation import Compiled, compile_request, decode, encode_hints
from solver.formulation.patterns import PatternsTooMany
from solver.linear import BuildTimeout, LinearModel, Solution, build_deadline
from solver.outcome import Outcome, infeasible

log = logging.getLogger(__name__)

#: Deterministic mode: budget seconds charged per variable compiled (the compile's work).
COMPILE_S_PER_VAR = 1e-4
#: CPU seconds a backend spends on a model before it can find anything (CP-SAT: its
#: Python model and presolve), by backend: a search given less would return nothing.
STARTUP_PRIORS: dict[str, Callable[[LinearModel], float]] = {"cp_sat": startup_prior}


def backend_name(backend: str) -> str:
    """The wire name of an exact backend ("cp_sat", "cbc" or "highs")."""
    return "cp_sat" if backend == "cp_sat" else f"milp/{backend}"


def solve(ctx: Context, backend: str, model: LinearModel, share: float,
          compiled: Compiled | None = None, stream: bool = False) -> Solution:
    """Solve `model` with `share` of the time left; with `stream`, each improving
    incumbent is decoded and reported. Cancelled or out of time: `unknown` at once."""
    budget = ctx.budget
    if budget.cancelled():
        return Solution("unknown")
    on_inc: IncumbentCallback | None = None
    if stream and ctx.incumbents.hook is not None and compiled is not None:
        name = backend_name(backend)

        def on_inc(values: list[int], _obj: float) -> None:
            try:
                ctx.incumbents.report(decode(compiled, values), name, "feasible",
                                      throttle=False)
            except Exception:  # an incumbent report must never break the solve
                log.exception("incumbent callback failed")
    limits = ctx.limits(backend, share)
    prior = STARTUP_PRIORS.get(backend)
    if prior is not None and not budget.deterministic:
        # at the pace this solve measured (the load, and how hard the request is); not in
        # deterministic mode, where the path must not depend on the wall clock
        need = budget.estimate(prior(model))
        if limits.time_limit_s < need:
            ctx.notes.append(f"{backend_name(backend)} not started: building and "
                             f"presolving its model would take about {need:.2f} s, "
                             f"{limits.time_limit_s:.2f} s were left")
            return Solution("unknown")
    sol = BACKENDS[backend].solve(model, limits, cancel=budget.cancel, on_incumbent=on_inc)
    det = sol.info.get("deterministic_time")
    if limits.deterministic_time is not None:
        used = float(det) if isinstance(det, float) else 0.0
        budget.charge(used / DET_UNITS_PER_S if isinstance(det, float) else sol.wall_s)
        if sol.status in ("feasible", "unknown") and used < 0.99 * limits.deterministic_time \
                and not budget.cancelled():
            budget.wall_cut = True   # the wall clock stopped the search, not its work limit
    budget.check_wall()
    return sol


def compile_model(ctx: Context, prune: int | None = None,
                  max_vars: int | None = None) -> Compiled | None:
    """The model of the request (restricted to each job's `prune` best targets), hinted
    with the starting plan, compiled before the finishing reserve; None (with a note)
    when that time runs out or a GPU has too many co-location patterns
    (`PatternsTooMany`). `ModelTooLarge` passes through past `max_vars`."""
    start = ctx.portfolio.start().placements
    t0 = time.monotonic()
    try:
        with ctx.budget.python_phase(), build_deadline(ctx.budget.until()):
            compiled = compile_request(ctx.request, prune=prune, hint=start,
                                       max_vars=max_vars)
            compiled.model.hints.update(encode_hints(compiled, start))
    except BuildTimeout:
        ctx.notes.append("no time left to build the exact model")
        return None
    except PatternsTooMany as exc:
        ctx.notes.append(f"no exact model: {exc}")
        return None
    ctx.prune = prune
    if ctx.budget.deterministic:
        ctx.compile_s = COMPILE_S_PER_VAR * compiled.model.num_vars
        ctx.budget.charge(ctx.compile_s)
    else:
        ctx.compile_s = time.monotonic() - t0
    return compiled


def exact_outcome(ctx: Context, backend: str, prune: int | None = None,
                  compiled: Compiled | None = None) -> Outcome:
    """Solve the request with `backend`: exactly, or on the model restricted to each
    job's `prune` best targets (then at best `feasible`, with the aggregated LP bound)."""
    from solver.levels import LEVELS, lexicographic  # levels build on `solve` and `finish`

    if compiled is None:
        compiled = compile_model(ctx, prune)
        if compiled is None:
            return fallback(ctx)
    if ctx.budget.stopped(need=ctx.budget.reserve + 0.05):
        ctx.notes.append("no time left for the exact search after compiling the model")
        return fallback(ctx)
    if lexicographic_levels(ctx.request):
        return lexicographic(ctx, backend, compiled)
    levels = LEVELS.get(ctx.request.policy.objective)
    if levels is not None:
        return levels(ctx, backend, compiled)
    sol = solve(ctx, backend, compiled.model, 1.0, compiled, stream=True)
    return finish(ctx, backend, compiled, sol)


def fallback(ctx: Context) -> Outcome:
    """The starting plan, labelled as the heuristic's, with `time_limit` as the reason
    of the jobs it leaves out."""
    start = ctx.portfolio.start()
    res = HeuristicResult(dict(start.placements), dict(start.reasons))
    for j in ctx.request.jobs:
        if j.name not in res.placements and j.name not in res.reasons:
            res.reasons[j.name] = ("time_limit", "the exact solver ran out of time")
    return Outcome(res, "heuristic", ctx.label("heuristic"), ctx.portfolio.bound())


def finish(ctx: Context, backend: str, compiled: Compiled, sol: Solution, *,
           bound: float | None = None, proven: bool = True,
           reasons: Mapping[str, tuple[str, str]] | None = None,
           stats: Mapping[str, float | int | str] | None = None) -> Outcome:
    """The Outcome of an exact solve (module doc). `bound` replaces the backend's bound,
    `proven=False` keeps an optimal answer `feasible` (levels not walked to the end),
    `reasons` are added for the jobs the answer leaves out."""
    name = ctx.label(backend_name(backend))
    all_stats = {f"model_{k}": v for k, v in sol.info.items()} | dict(stats or {})
    if sol.status == "infeasible" and not compiled.pruned:
        return infeasible(ctx.request, name, "the hard constraints conflict (e.g. "
                          "non-preemptible running jobs that cannot all keep their GPUs)")
    if sol.values is None:
        ctx.notes.append(f"{backend_name(backend)} found no solution within the time "
                         "limit; returning the heuristic plan")
        return dataclasses.replace(fallback(ctx), stats=all_stats)
    res = decode(compiled, sol.values)
    for job, why in (reasons or {}).items():
        res.reasons.setdefault(job, why)
    if compiled.pruned:
        ctx.notes.append(f"large request: each job was offered its {ctx.prune} best "
                         "targets; the bound is the aggregated LP relaxation")
        return Outcome(res, "feasible", name, ctx.portfolio.bound(), all_stats)
    optimal = sol.status == "optimal" and proven
    return Outcome(res, "optimal" if optimal else "feasible", name,
                   sol.bound if bound is None else bound, all_stats)
