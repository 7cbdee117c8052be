"""Lexicographic objectives: several exact solves of the same compiled model, one level
after the other, each level's optimum fixed before the next.

- `fairness`: level 1 maximises the minimum tenant share T (on a grid of
  1 / FAIRNESS_STEPS); level 2 maximises throughput with T >= T*.
- `priority_fifo`: one level per job in priority order (is job k placed beside the jobs
  committed before it?), decided in runs of jobs (`_PriorityWalk`), then throughput with
  every committed job placed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from models.objective import tenant_demands
from models.rules import priority_key
from solver.context import Context
from solver.exact import finish, solve
from solver.formulation import FAIRNESS_STEPS, Compiled
from solver.linear import LinearModel, Solution, add_terms
from solver.outcome import Outcome


def fairness(ctx: Context, backend: str, compiled: Compiled) -> Outcome:
    """Max-min tenant share, then throughput at that share (module doc)."""
    base = compiled.model
    level1 = base.copy()
    t = level1.new_var("min_share", 0, FAIRNESS_STEPS)
    demands = tenant_demands(ctx.request)
    for tenant, d in demands.items():
        # T / S <= share_k  <=>  sum(value terms of k) - (D_k / S) T >= 0
        row = dict(compiled.tenant_terms.get(tenant, {}))
        add_terms(row, {t: -d / FAIRNESS_STEPS})
        level1.add(row, lo=0.0, name=f"share[{tenant}]")
    if not demands:
        level1.fix(t, 0)
    level1.objective = {t: 1.0}
    level1.objective_const = 0.0
    stats = {"fairness_resolution": 1.0 / FAIRNESS_STEPS}  # the grid of T
    s1 = solve(ctx, backend, level1, 0.5)
    if s1.values is None or s1.status == "infeasible":
        return finish(ctx, backend, compiled, s1)
    t_star = s1.values[t]
    if s1.status == "optimal":
        bound1: float | None = min(1.0, (t_star + 1) / FAIRNESS_STEPS)
    elif s1.bound is not None:
        bound1 = min(1.0, (math.floor(s1.bound + 1e-9) + 1) / FAIRNESS_STEPS)
    else:
        bound1 = None
    level2 = level1.copy()
    level2.lbs[t] = t_star
    level2.objective = dict(compiled.throughput_terms)
    level2.objective_const = base.objective_const
    level2.hints = {**base.hints, **dict(enumerate(s1.values))}
    s2 = solve(ctx, backend, level2, 1.0, compiled, stream=True)
    sol = s2 if s2.values is not None else s1
    return finish(ctx, backend, compiled, sol, bound=bound1,
                  proven=s1.status == "optimal" and s2.status == "optimal", stats=stats)


class LeftOut(Enum):
    """Why the priority walk left a job out."""

    PRIORITY = ("insufficient_capacity", "no room beside the jobs before it in priority order")
    TIME = ("time_limit", "not reached in priority order in time")


@dataclass
class _PriorityWalk:
    """The state of the priority levels: the model with a placement row per committed
    job, the last values that satisfy it, and why each undecided job was left out.

    Sequentially, job k is committed when it can be placed beside the jobs committed
    before it. Runs make this cheap: if a run of consecutive jobs can be placed together
    beside the committed ones, each of them would have been committed one by one, so the
    whole run is committed with one feasibility solve; a run that cannot is halved until
    single jobs are decided. A job that fails also fails every later member of its group
    (identical jobs, decided in rank order)."""

    ctx: Context
    backend: str
    compiled: Compiled
    model: LinearModel
    values: list[int] | None = None
    left_out: dict[int, LeftOut] = field(default_factory=dict)
    failed_groups: set[int] = field(default_factory=set)
    exhaustive: bool = True

    def undecided(self, run: list[int]) -> list[int]:
        """The jobs of `run` still to decide (a failed group member fails at once)."""
        out = []
        for i in run:
            group = self.compiled.group_of.get(i)
            if group is not None and group[0] in self.failed_groups:
                self.left_out[i] = LeftOut.PRIORITY
            else:
                out.append(i)
        return out

    def commit(self, run: list[int]) -> Solution:
        """Try to place every job of `run` beside the committed ones; keep the rows when
        it works."""
        trial = self.model.copy()
        for i in run:
            terms, need = self.compiled.placed_expr(i)
            trial.add(terms, lo=need)
        if self.values is not None:
            trial.hints = dict(enumerate(self.values))
        sol = solve(self.ctx, self.backend, trial, 0.25)
        if sol.status in ("optimal", "feasible"):
            self.model, self.values = trial, sol.values
        return sol

    def fail(self, i: int, sol: Solution) -> None:
        """Job `i` alone could not be committed: out of time, or no room."""
        if sol.status == "unknown":
            self.exhaustive = False
            self.left_out[i] = LeftOut.TIME
            return
        self.left_out[i] = LeftOut.PRIORITY
        group = self.compiled.group_of.get(i)
        if group is not None:
            self.failed_groups.add(group[0])

    def out_of_time(self, rest: list[int]) -> None:
        """The budget ran out: the jobs not decided yet are left out for time."""
        self.exhaustive = False
        for i in rest:
            self.left_out.setdefault(i, LeftOut.TIME)

    def walk(self, pending: list[int]) -> None:
        """Decide every job of `pending` (priority order) in runs that double after a
        success and halve after a failure."""
        pos, chunk = 0, len(pending)
        while pos < len(pending):
            run = self.undecided(pending[pos:pos + chunk])
            if not run:
                pos += chunk
                continue
            if self.ctx.budget.stopped(need=self.ctx.budget.reserve):
                self.out_of_time(pending[pos:])
                return
            sol = self.commit(run)
            if sol.status in ("optimal", "feasible"):
                pos += chunk
                chunk = max(1, min(2 * chunk, len(pending) - pos))
            elif chunk > 1:
                chunk = max(1, chunk // 2)
            else:
                self.fail(run[0], sol)
                pos += 1  # after a failure, capacity is likely short: grow again from 1


def priority(ctx: Context, backend: str, compiled: Compiled) -> Outcome:
    """Lexicographic placement in priority order, then throughput (module doc)."""
    req = ctx.request
    order = sorted(range(len(req.jobs)), key=lambda i: priority_key(req.jobs[i]))
    static = ctx.portfolio.reasons()
    model = compiled.model.copy()
    model.objective, model.objective_const = {}, 0.0
    walk = _PriorityWalk(ctx, backend, compiled, model)
    walk.walk([i for i in order
               if req.jobs[i].name not in static or req.jobs[i].current])
    final = walk.model.copy()
    final.objective = dict(compiled.model.objective)
    final.objective_const = compiled.model.objective_const
    if walk.values is not None:
        final.hints = dict(enumerate(walk.values))
    sol = solve(ctx, backend, final, 1.0, compiled, stream=True)
    if sol.values is None and walk.values is not None:
        sol = Solution("feasible", walk.values, None, None)
    reasons = {req.jobs[i].name: why.value for i, why in walk.left_out.items()}
    return finish(ctx, backend, compiled, sol, proven=walk.exhaustive, reasons=reasons)


#: policy.objective -> its levels (objectives not listed are solved in one level).
LEVELS: dict[str, Callable[[Context, str, Compiled], Outcome]] = {
    "fairness": fairness,
    "priority_fifo": priority,
}
