"""The final level polished exactly beside the higher classes (contract 5.3 / 5.4).

`polish_final(ctx, result)` re-places the jobs of the lowest priority class exactly while
every job of a higher class stays where `result` has it:

- the request is restricted (`pinned_request`): each placed job of a higher class becomes
  a running, non-preemptible job whose current placement is its placement in `result`,
  and its `keep` variable is fixed to 1; the unplaced jobs of the higher classes are left
  out (they stay unplaced); the jobs of the lowest class are as in the request (running
  ones with their real current placements, so their migration and preemption costs are
  theirs);
- the model is the formulation's, pruned to each job's `PRUNE_K` best targets (the
  targets `result` uses are kept, so `result` is a feasible point: the hint), with the
  guaranteed usage served held at `result`'s (`add_served`; the quota rows, limits
  included, are the model's own);
- CP-SAT maximises the lowest class's objective over its own jobs (`class_terms`).

Every higher class keeps its jobs, its placements and so its value exactly; the
guaranteed usage served does not drop; the lowest class gets the best value the pruned
model reaches in the time, at least `result`'s (its placements are the hint and CP-SAT
keeps the best it finds). So the answer is lexicographically at least `result`; the
caller's portfolio ranks it anyway. It is not the lexicographic optimum's lowest level:
the higher classes may hold GPUs in a way that costs the lowest class, and moving them is
the exchanges' work (heuristics/levels.py, heuristics/level_repack.py).

On M (benchmarks/QUOTAS.md, session 11) the pinned model with 8 targets per job is
solved in 5 to 30 s: 3.6 (proven), 12.5 and 19.3 above the final level of three 5 s
plans, out of a level range of about 1,750; the final level's gap to its bound (89%) is
the bound's, not the plan's. In a solve it runs only when the time left buys its build
(on M not at 5 s; at 30 s, +14.8 on seed 1).
Additive objectives only (fairness and priority_fifo rank a class by more than a sum);
not in deterministic mode (the solve is cut by the wall clock).
"""

from __future__ import annotations

import math

from heuristics.levels import restore_displaced
from heuristics.result import HeuristicResult
from models import PlanRequest
from models.objective import level_values, same_placement
from models.rules import priority_classes
from solver.context import Context
from solver.exact import solve
from solver.formulation import Compiled, compile_request, decode, encode_hints
from solver.formulation.patterns import PatternsTooMany
from solver.linear import BuildTimeout, LinearModel, ModelTooLarge, build_deadline

#: Targets per job of the pinned model (M: with 4 the solve is not proven in 60 s, with 8
#: in 5 s; the model stays about 18,000 variables)
PRUNE_K = 8
#: CPU seconds per job of building the pinned model and its hint, a prior for the budget
#: (M, 1,500 jobs: 0.52-0.60 CPU s, 1.1 s of wall at load 7, 17,535-21,570 variables)
COMPILE_CPU_PER_JOB = 4e-4
#: The least wall time worth giving the solve after the build (M at load 7-8: +14.8 on
#: seed 1 after 3.5 s, nothing after 1.4 s; seed 0 proven in 4.7 s)
SOLVE_MIN_S = 1.5
#: The solve's share of the time left after the build: the rest stays for the exact
#: search after the level search (solver/auto.py: the lexicographic walk of CP-SAT on
#: the pruned model, which settles smaller medium requests)
SOLVE_SHARE = 0.5


def _decimals(xs: list[float], most: int = 4) -> int:
    """The fewest decimals (<= most) that write every number of `xs` exactly."""
    for d in range(most + 1):
        if all(abs(x * 10 ** d - round(x * 10 ** d)) <= 1e-9 * max(1.0, x * 10 ** d)
               for x in xs):
            return d
    return most


def served_scale(request: PlanRequest, compiled: Compiled) -> int:
    """S * D of solver/levels.py's module doc: the compiled usage terms' quota scale times
    10^d, d the decimals of the shares and guarantees, so that min(usage, guaranteed)
    is an integer number of units."""
    return compiled.quota_scale * 10 ** _decimals(
        [j.gpu_share for j in request.jobs if j.gpu_share is not None]
        + [g for q in request.cluster.quotas.values() for g in q.guaranteed.values()])


def add_served(model: LinearModel, compiled: Compiled, request: PlanRequest
               ) -> dict[tuple[str, str], tuple[int, int]]:
    """served[k, m] of solver/levels.py's module doc on `model`, one per guaranteed key:
    served[k, m] <= D * S * U[k, m], 0 <= served[k, m] <= D * S * guaranteed(k, m).
    Returns key -> (served variable, its upper bound); sum served / `served_scale` is
    the guaranteed usage served."""
    scale = served_scale(request, compiled)
    unit = scale // compiled.quota_scale
    served: dict[tuple[str, str], tuple[int, int]] = {}
    for (t, k), terms in compiled.quota_terms.items():
        g = request.cluster.quotas[t].guaranteed.get(k, 0.0)
        if g <= 0:
            continue
        cap = math.floor(g * scale + 1e-6)
        s = model.new_var(f"served[{t},{k}]", 0, cap)
        row = {v: coef * unit for v, coef in terms.items()}
        row[s] = -1.0
        model.add(row, lo=0.0, name=f"served[{t},{k}]")
        served[(t, k)] = (s, cap)
    return served


def pinned_request(request: PlanRequest, result: HeuristicResult, lowest: int
                   ) -> PlanRequest:
    """`request` with each placed job of a class above `lowest` running where `result`
    places it, not preemptible, and the unplaced ones of those classes left out."""
    jobs = []
    for j in request.jobs:
        if j.priority <= lowest:
            jobs.append(j)
        elif result.placements.get(j.name):
            jobs.append(j.model_copy(update={"current": list(result.placements[j.name]),
                                             "preemptible": False}))
    return request.model_copy(update={"jobs": jobs})


def _hold_served(m: LinearModel, c: Compiled, sub: PlanRequest, value: float) -> None:
    """Hold the guaranteed usage served at `value` or more (hinted from the model's
    hints)."""
    served = add_served(m, c, sub)
    scale = served_scale(sub, c)
    unit = scale // c.quota_scale
    for key, (s, cap) in served.items():
        use = sum(coef * unit * m.hints.get(v, 0) for v, coef in c.quota_terms[key].items())
        m.hints[s] = min(cap, max(0, math.floor(use + 1e-6)))
    m.add({s: 1.0 for s, _ in served.values()}, lo=math.floor(value * scale + 1e-6),
          name="served")


def _model(ctx: Context, sub: PlanRequest, result: HeuristicResult, lowest: int,
           served_value: float) -> Compiled | None:
    """The pinned model (module doc) with its objective and hint; None when its build
    does not fit before the solve's minimum or the formulation declines it."""
    try:
        with ctx.budget.python_phase(), build_deadline(ctx.budget.until() - SOLVE_MIN_S):
            c = compile_request(sub, prune=PRUNE_K, hint=result.placements)
            c.model.hints.update(encode_hints(c, result.placements))
    except (BuildTimeout, PatternsTooMany, ModelTooLarge):
        return None
    m = c.model
    for r, keep in c.keep.items():
        if sub.jobs[r].priority > lowest:
            m.fix(keep, 1)
    if sub.cluster.quotas:
        _hold_served(m, c, sub, served_value)
    if lowest in c.class_terms:
        m.objective = dict(c.class_terms[lowest])
        m.objective_const = c.class_const[lowest]
    # else no job of a higher class is placed and there are no quotas: the restricted
    # request has no levels, and its compiled objective is the lowest class's own
    return c


def polish_final(ctx: Context, result: HeuristicResult) -> HeuristicResult:
    """`result` with the lowest class's jobs re-placed exactly beside the higher classes
    (module doc); `result` itself when there is one class, the objective is not additive,
    the mode is deterministic, the time left does not buy the build (its prior,
    `COMPILE_CPU_PER_JOB`, at the solve's pace) and a solve of `SOLVE_MIN_S` (its share
    of what is left), or the model or its solve finds nothing in time."""
    req = ctx.request
    budget = ctx.budget
    classes = priority_classes(req.jobs)
    if (len(classes) < 2 or budget.deterministic
            or req.policy.objective in ("fairness", "priority_fifo")
            or budget.stopped(need=budget.estimate(COMPILE_CPU_PER_JOB * len(req.jobs))
                              + SOLVE_MIN_S / SOLVE_SHARE)):
        return result
    lowest = classes[-1]
    sub = pinned_request(req, result, lowest)
    values = dict(level_values(req, result.placements))
    c = _model(ctx, sub, result, lowest, values.get("quota", 0.0))
    if c is None or ctx.budget.stopped(need=0.05):
        return result
    sol = solve(ctx, "cp_sat", c.model, SOLVE_SHARE)
    if sol.values is None or sol.status not in ("optimal", "feasible"):
        return result
    got = decode(c, sol.values)
    low = {j.name for j in req.jobs if j.priority == lowest}
    if any(not same_placement(got.placements.get(j.name, []), result.placements[j.name])
           for j in sub.jobs if j.name not in low):
        # a pinned job the model could not keep as it is (e.g. on a MIG instance the
        # plan creates): the lowest class was placed around another plan
        return result
    placements = {n: pl for n, pl in result.placements.items() if n not in low}
    reasons = {n: why for n, why in result.reasons.items() if n not in low}
    for name in low:
        if got.placements.get(name):
            placements[name] = got.placements[name]
        elif name in got.reasons:
            reasons[name] = got.reasons[name]
    # the lowest class may now hold the GPUs of a stopped higher-class running job: the
    # validator's priority rule, as every answer (solver/driver.py)
    return restore_displaced(req, HeuristicResult(placements, reasons))
