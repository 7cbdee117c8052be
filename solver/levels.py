"""Lexicographic objectives: several exact solves of the same compiled model, one level
after the other, each level's optimum fixed before the next.

- `fairness`: level 1 maximises the minimum tenant share T (on a grid of
  1 / FAIRNESS_STEPS); level 2 maximises throughput with T >= T*.
- `priority_fifo`: one level per job in priority order (is job k placed beside the jobs
  committed before it?), decided in runs of jobs (`_PriorityWalk`), then throughput with
  every committed job placed.
- quotas and priority classes (contract 5.3 / 5.4; `lexicographic`, for any objective):
  the guaranteed usage served first, then each class from the highest down with the
  policy's own levels over its jobs (additive objectives: their value, own costs
  included; fairness: the class's minimum share, then its throughput; priority_fifo: the
  walk over its jobs, then its throughput). Successive solves of the same compiled model
  (weights would need a scale per level that floats do not give): each level's optimum
  is held by a row before the next, in the model's own units:

    served[k, m] <= D * S * U[k, m],  0 <= served[k, m] <= D * S * guaranteed(k, m)
    maximise sum served / (D * S);  held as  sum served >= its optimum (integers)

  with S the quota scale of the compiled usage terms (MIG sizes become integers) and D
  = 10^d the decimals of the shares and guarantees (so min(usage, guaranteed) is exact);
  a class's value is held as `sum class_terms >= v* - tol`, tol = 1e-6 * (1 + |v*| +
  jobs), which covers CP-SAT's conservative rounding of fractional rows. A level that
  ends without proof holds the value it reached and the plan is `feasible`. The bound of
  an additive objective is the held values of the higher classes plus the last level's
  bound (None for fairness unless proven).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from heuristics.greedy import plan_greedy
from heuristics.level_repack import repack_classes
from heuristics.levels import improve_levels, settle_levels
from heuristics.result import HeuristicResult
from models.objective import evaluate, tenant_demands
from models.rules import priority_classes, priority_key
from solver.budget import PASS_S_PER_JOB
from solver.context import Context
from solver.exact import finish, solve
from solver.formulation import FAIRNESS_STEPS, Compiled, decode
from solver.level_fit import fit_guarantees
from solver.level_polish import add_served, polish_final, served_scale
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


@dataclass
class _Levels:
    """The state of the lexicographic walk: the model with the rows holding each level
    reached so far, the last values, whether every level was proven, the held values of
    the classes (their sum is the additive objective's), reasons of the walk."""

    ctx: Context
    backend: str
    compiled: Compiled
    model: LinearModel
    left: int
    values: list[int] | None = None
    last: Solution | None = None
    proven: bool = True
    stopped: bool = False
    #: whether every level before the last one solved was proven
    proven_before: bool = True
    held: float = 0.0
    #: the held class values before the last class level
    held_before: float = 0.0
    reasons: dict[str, tuple[str, str]] = field(default_factory=dict)

    def maximise(self, terms: dict[int, float], const: float = 0.0) -> float | None:
        """Solve the model for `terms` (share of the time: 1 / levels left); the value
        reached (None when nothing was found: the walk stops)."""
        m = self.model
        m.objective, m.objective_const = dict(terms), const
        if self.values is not None:
            m.hints = dict(enumerate(self.values))
        self.left -= 1
        sol = solve(self.ctx, self.backend, m, 1.0 / max(1, self.left + 1), self.compiled,
                    stream=self.left == 0)
        if sol.values is None or sol.status == "infeasible":
            self.stopped = True
            if self.values is None:
                self.last = sol
            self.proven = False
            return None
        self.proven_before = self.proven
        self.last, self.values = sol, sol.values
        self.proven = self.proven and sol.status == "optimal"
        return sum(c * sol.values[v] for v, c in terms.items())

    def hold(self, terms: dict[int, float], value: float, name: str) -> None:
        """Keep `terms` at the value reached (up to the rounding tolerance)."""
        tol = 1e-6 * (1.0 + abs(value) + len(self.ctx.request.jobs))
        self.model.add(terms, lo=value - tol, name=name)

    def quota(self) -> None:
        """The guaranteed usage served (module doc)."""
        req = self.ctx.request
        scale = served_scale(req, self.compiled)
        served = [s for s, _ in add_served(self.model, self.compiled, req).values()]
        got = self.maximise(dict.fromkeys(served, 1.0 / scale))
        if got is not None and not self.stopped:
            total = round(got * scale)
            self.model.add(dict.fromkeys(served, 1.0), lo=total, name="served")

    def additive(self, p: int) -> None:
        """Class p's objective over its own jobs."""
        c = self.compiled
        got = self.maximise(c.class_terms[p], c.class_const[p])
        if got is not None:
            self.hold(c.class_terms[p], got, f"class[{p}]")
            self.held_before = self.held
            self.held += got + c.class_const[p]

    def fairness(self, p: int) -> None:
        """Class p's minimum tenant share over its own demands, then its throughput."""
        req = self.ctx.request
        demands = tenant_demands(req, [j for j in req.jobs if j.priority == p])
        t = self.model.new_var(f"min_share[{p}]", 0, FAIRNESS_STEPS)
        for tenant, d in demands.items():
            row = dict(self.compiled.class_tenant_terms.get(p, {}).get(tenant, {}))
            add_terms(row, {t: -d / FAIRNESS_STEPS})
            self.model.add(row, lo=0.0, name=f"share[{p},{tenant}]")
        if not demands:
            self.model.fix(t, 0)
        got = self.maximise({t: 1.0})
        if got is None:
            return
        self.model.lbs[t] = round(got)
        self.throughput(p)

    def throughput(self, p: int) -> None:
        """Class p's throughput (own costs included)."""
        c = self.compiled
        got = self.maximise(c.class_throughput[p], c.class_const[p])
        if got is not None:
            self.hold(c.class_throughput[p], got, f"class_throughput[{p}]")
            self.held_before = self.held
            self.held += got + c.class_const[p]

    def fifo(self, p: int) -> None:
        """Class p's jobs placed in priority order (`_PriorityWalk`), then throughput."""
        req = self.ctx.request
        static = self.ctx.portfolio.reasons()
        order = sorted((i for i, j in enumerate(req.jobs) if j.priority == p
                        and (j.name not in static or j.current)),
                       key=lambda i: priority_key(req.jobs[i]))
        self.model.objective, self.model.objective_const = {}, 0.0
        walk = _PriorityWalk(self.ctx, self.backend, self.compiled, self.model, self.values)
        walk.walk(order)
        self.model, self.proven = walk.model, self.proven and walk.exhaustive
        if walk.values is not None:
            self.values = walk.values
        self.reasons.update({req.jobs[i].name: why.value for i, why in walk.left_out.items()})
        self.throughput(p)


def lexicographic(ctx: Context, backend: str, compiled: Compiled) -> Outcome:
    """Quotas' guaranteed usage, then each priority class (module doc)."""
    req = ctx.request
    objective = req.policy.objective
    classes = priority_classes(req.jobs)
    per_class = {"fairness": 2, "priority_fifo": 1}.get(objective, 1)
    walk = _Levels(ctx, backend, compiled, compiled.model.copy(),
                   left=len(classes) * per_class + bool(req.cluster.quotas))
    if req.cluster.quotas:
        walk.quota()
    step = {"fairness": walk.fairness, "priority_fifo": walk.fifo}.get(objective,
                                                                        walk.additive)
    for p in classes:
        if walk.stopped:
            break
        step(p)
    sol = walk.last if walk.last is not None else Solution("unknown")
    if walk.values is not None:
        sol = Solution("optimal" if sol.status == "optimal" else "feasible", walk.values,
                       sol.objective, None, sol.wall_s, sol.info)
    proven = walk.proven and not walk.stopped
    last = walk.last
    bound: float | None = None
    if objective == "fairness":
        if proven and walk.values is not None:
            bound = evaluate(req, decode(compiled, walk.values).placements).objective_value
    elif (walk.proven_before and not walk.stopped and last is not None
          and last.bound is not None and last.values is not None):
        # the classes above the last are optimal: their values plus the last's bound
        bound = walk.held_before + last.bound
    stats = {"levels_proven": int(proven)}
    return finish(ctx, backend, compiled, sol, bound=bound, proven=proven,
                  reasons=walk.reasons, stats=stats)


#: policy.objective -> its levels (objectives not listed are solved in one level).
LEVELS: dict[str, Callable[[Context, str, Compiled], Outcome]] = {
    "fairness": fairness,
    "priority_fifo": priority,
}


#: Greedy restarts of `level_search` at most (seeds other than the policy's), and what
#: a round of improving a plan costs against one restart (M: 0.3-0.5 against 0.1-0.15 CPU
#: s, greedy and settling; at 1.5 the restarts left the first round too little at load
#: 4-6 and it was cut)
LEVEL_RESTARTS = 8
#: ... and when `fit_guarantees` runs after them: the restarts were for the guarantees,
#: which the fit serves exactly (M at 5 s: no restart beat the starting plan there,
#: 1,629.8 against 1,629.9; with 2 restarts instead of 8 the exchanges had their three
#: rounds and one after the fit in four runs of four at load 5.5, class 100 1,181.4,
#: against 1,176.5-1,181.4 with 8)
LEVEL_RESTARTS_FIT = 2
IMPROVE_PER_PASS = 3.0
#: Rounds of the exchanges at most: another round runs while the last one changed the plan
#: and time is left (M: a second round added 8 to class 100, 1,169 to 1,177)
IMPROVE_ROUNDS = 3
#: What the restarts and the exchanges leave for `solver.level_fit.fit_guarantees`
#: (wall s; M: 0.6-1.5 s)
FIT_RESERVE_S = 1.2
#: The least time (wall s) for a round of the exchanges after the fit (M: 0.13-0.4 s a
#: round; one with less time left changes nothing and may end past its deadline)
POST_FIT_S = 0.3
#: What a round of the exchanges leaves for the class repack after it (wall s; M: 0.1-0.3
#: s with its checks; the exchanges had taken the whole round at load 15 and the repack
#: never ran: class 1000 1,321.9 instead of 1,323.1)
REPACK_S = 0.3


def level_search(ctx: Context) -> HeuristicResult:
    """The starting plan improved for the levels of contract 5.3 / 5.4 until the deadline:
    greedy restarts with other seeds (best fit in a perturbed order, running jobs taking
    their turn), each settled (`heuristics.levels.settle_levels`), while a restart and the
    improvement after it still fit (and FIT_RESERVE_S with quotas); then the exchanges of
    `heuristics.levels.improve_levels` on the best plan by the levels (`Portfolio.offer`),
    each round followed by `heuristics.level_repack.repack_classes` (a model repacked for
    a class: M, class 1000 +0.4 to +1.3, a running gang sent home through a chain of
    moves; run before the exchanges, its gains kept them from larger ones on seed 1),
    again while a round changes it (at most IMPROVE_ROUNDS); last, with quotas and not in
    deterministic mode (its MIP solves are cut by the wall clock),
    `solver.level_fit.fit_guarantees` on the best (the exchanges end FIT_RESERVE_S early
    for it; it comes before them when less than 1.5 times that is left: the guarantees
    are the top level), and with POST_FIT_S left after it one more round of the
    exchanges; last, when the time left still buys its build and a solve worth having
    (not on M at 5 or 10 s), `solver.level_polish.polish_final`, the lowest class re-placed
    exactly beside the higher classes; the best is returned.

    The restarts come first as they decide the top level (the guaranteed usage served, M:
    1,629.72-1,629.86 between seeds, from MIG and shares), which the exchanges never
    lower; when the fit runs, it serves the guarantees and only LEVEL_RESTARTS_FIT
    restarts are made; `fit_guarantees` serves the guarantees exactly (M: 1,630, taking from the
    classes only what that needs; run first, it left the exchanges a plan they raised by
    10 instead of 50 on class 100); the exchanges raise the classes (M, class 100: 961 to
    1,007, 1,124 to 1,169). For the requests too large for the exact model, where the
    lexicographic walk of CP-SAT on a pruned model finds nothing in the time (M with
    quotas, classes and topology levels: no solution in 1.4 s of a 15 s budget; with 60 s
    a guaranteed usage of 1,442 against the greedy's 1,630). Deterministic mode: each
    restart charges two passes to the work clock, each round of the improvement three,
    and no phase is cut by the wall clock."""
    req = ctx.request
    budget = ctx.budget
    det = budget.deterministic
    stop = budget.until()
    seeds = [s for s in (None, *range(LEVEL_RESTARTS + 1)) if s != req.policy.seed]
    pass_cost = 2 * PASS_S_PER_JOB * len(req.jobs)
    spent = 0.0
    fit = not det and bool(req.cluster.quotas)
    for seed in seeds[:LEVEL_RESTARTS_FIT if fit else LEVEL_RESTARTS]:
        if budget.stopped(need=(IMPROVE_PER_PASS + 1) * (pass_cost if det else spent)
                          + (FIT_RESERVE_S if fit else 0.0)):
            break
        budget.charge(pass_cost)
        t0 = time.monotonic()
        with budget.python_phase():
            got = plan_greedy(req, seed=seed, keep_running=False,
                              deadline=None if det else stop)
            if any(why[0] == "time_limit" for why in got.reasons.values()):
                break   # cut at the deadline: not a plan worth settling
            ctx.portfolio.offer(settle_levels(req, got, None if det else stop))
        spent = time.monotonic() - t0
    # with little time left the guarantees (the top level) come before the exchanges
    fit_first = fit and budget.stopped(need=1.5 * FIT_RESERVE_S)
    if fit_first and not budget.stopped():
        # at most its reserve: its class solves would take what the exchanges need
        ctx.portfolio.offer(fit_guarantees(req, ctx.portfolio.start(),
                                           budget.until(cap_s=FIT_RESERVE_S)))
    keep = FIT_RESERVE_S if fit and not fit_first else 0.0  # the fit's, after them
    for _ in range(IMPROVE_ROUNDS):
        if budget.stopped(need=keep):
            break
        budget.charge(IMPROVE_PER_PASS * pass_cost)
        best = ctx.portfolio.start()
        with budget.python_phase():
            until = None if det else budget.until() - keep
            got = repack_classes(req, improve_levels(
                req, best, None if until is None else until - REPACK_S), until)
        if got is best:
            break
        ctx.portfolio.offer(got)
    if fit and not fit_first and not budget.stopped():
        ctx.portfolio.offer(fit_guarantees(req, ctx.portfolio.start(), budget.until()))
    if fit and not budget.stopped(need=POST_FIT_S):
        # the fit moves shares and slices: what is left goes to the exchanges again
        best = ctx.portfolio.start()
        with budget.python_phase():
            until = budget.until()
            ctx.portfolio.offer(repack_classes(
                req, improve_levels(req, best, until - REPACK_S), until))
    ctx.portfolio.offer(polish_final(ctx, ctx.portfolio.start()))
    return ctx.portfolio.start()
