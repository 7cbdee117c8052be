"""A proven upper bound on each lexicographic level of the lexicographic optimum
(contract 5.3 / 5.4), from a plan's values.

The aggregated LP of solver/bound.py (pools, node patterns, gang rows, GPU memory, quota
limits, the domain rows of required topology levels and the usable rows of pools where
running jobs hold unusable GPUs) is built once with its job groups split by priority
class as well, and three row families are added:

    usage[t, k]:  sum over the options counting toward key (t, k) of quota * x - s[t, k] >= 0
                  0 <= s[t, k] <= guaranteed(t, k)              (served: min(usage, G))
    served:       sum s >= held
    class[p]:     sum over class p's options of coef * x >= held - const_p

The LP maximises level l: the guaranteed usage served (sum s), or class p's objective over
its own jobs (sum coef x + const_p, const_p = -preemption_cost per running job of class p).
Every plan maps to a feasible point of that LP of at least its level-l value (solver/
bound.py's argument: capacities, eligibility and gang sizes are relaxed, coefficients only
rounded up, the costs >= 0 dropped; min(usage, G) is what s can reach), so with no level
held the optimum bounds level l over all plans.

Which levels may be held. Let v* be the levels of the lexicographic optimum and v the
plan's. The bound of level l must be at least v*_l, so the LP may hold a level above l only
at a value v*_k is known to reach:

- level 1: v*_1 >= v_1 always (the plan is a plan);
- level k > 1: if the levels 1..k-1 are proven (their values meet their bounds, so
  v*_i = v_i there), the plan is one of the plans the optimum is chosen from at level k,
  so v*_k >= v_k; if one of them is not proven, the optimum may be above the plan there
  and then anything at level k, and level k is not held.

So the levels are held at the plan's values from the top down to the first level that is
not proven, that one included, and no level below it (`proven`: the bound minus the value
within the holding tolerance, 1e-6 x (1 + |value| + jobs), and the bound's margins). With
every level proven down to l-1 the bound of level l is the LP's optimum given exactly the
optimum's values above; below the first unproven level k, the bound of level l > k + 1
only holds the levels 1..k, and is looser. When a level's bound is met, the plan is
lexicographically optimal down to it.

When gang columns come out fractional and the level's share of the time (what is left
over the levels left) is not spent by the LP, the model is solved again with the gang
counts integral (a HiGHS MIP, kept for the next levels) and the smaller of the LP optimum
and the MIP's dual bound is used, as in solver/bound.py.

The bounds of the class levels are for the additive objectives; with `fairness` (a class
level is a minimum share, then a throughput) only the quota level gets one. A level whose
LP does not finish within the time left gets None.

How tight a lower level's bound can be depends on the levels above: every unit a held
level is below its own bound is room the LP may spend on the lower one. On M
(benchmarks/QUOTAS.md) the LP trades about 100 of class 100 per unit of class 1000.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple, cast

import highspy
import numpy as np

from models import Placement, PlanRequest
from models.instance import ClusterState
from models.objective import level_values
from models.rules import quota_keys
from solver import bound as agg
from solver.highs import INF, INFEASIBLE, OPTIMAL, HighsLp, set_integral

#: the bound's safety margins, as solver/bound.py's
_REL, _ABS = 1e-7, 1e-6


class _ClassKey(agg.GroupKey):
    """solver/bound.py's GroupKey (a 4-tuple there) that also tells the priority class
    apart: equal and hashed with it, so that jobs of different classes group apart."""

    priority: int

    def __new__(cls, options: tuple[agg.Option, ...], tenant: str, fixed: bool,
                single_k: int, priority: int, levels: tuple[str, ...] = (),
                stranded: tuple[tuple[agg.Pool, int], ...] = ()) -> _ClassKey:
        """The key of a class-`priority` group."""
        self = super().__new__(cls, options, tenant, fixed, single_k, levels, stranded)
        self.priority = priority
        return self

    def __eq__(self, other: object) -> bool:
        return tuple.__eq__(self, other) and getattr(other, "priority", None) == self.priority

    def __hash__(self) -> int:
        return hash((tuple(self), self.priority))


class _Model(NamedTuple):
    """The LP and where its level rows and columns are."""

    lp: HighsLp
    #: class -> its job columns and their coefficients
    class_cols: dict[int, dict[int, float]]
    #: class -> its constant (-preemption_cost per running job)
    const: dict[int, float]
    #: the served columns s[t, k]
    served: list[int]


def _groups(request: PlanRequest, state: ClusterState, caps: agg._Capacity
            ) -> tuple[dict[_ClassKey, agg.GroupCount], dict[int, float]] | None:
    """The jobs grouped as solver/bound.py does, split by class; the constants per class.
    None when a fixed job has no option (the relaxation is infeasible)."""
    entries = agg.job_entries(request, state, caps, False)
    if entries is None:
        return None
    pre_cost = request.policy.preemption_cost
    const: dict[int, float] = {}
    groups: dict[_ClassKey, agg.GroupCount] = {}
    for e in entries:
        job = e.info.job
        const.setdefault(job.priority, 0.0)
        if job.current:
            const[job.priority] -= pre_cost
        if not e.options:
            continue
        key = _ClassKey(tuple(sorted(e.options.values())), job.tenant, e.fixed, e.single_k,
                        job.priority, e.levels, e.stranded)
        slot = groups.setdefault(key, agg.GroupCount())
        slot.count += 1
        slot.fixed += e.fixed
    return groups, const


def _build(request: PlanRequest) -> tuple[_Model, list[bool], int] | None:
    """The LP with its level rows (module doc), its gang columns and job column count."""
    quotas = request.cluster.quotas
    state = ClusterState(request)
    caps = agg._capacities(state, request)
    grouped = _groups(request, state, caps)
    if grouped is None:
        return None
    groups, const = grouped
    as_groups = cast(dict[agg.GroupKey, agg.GroupCount], groups)
    mem_cap = {m: state.catalog[m].memory_gib for _, m in caps.cap}
    patterns = agg._node_patterns(as_groups, caps.node_free)
    lp = HighsLp()
    agg._declare_rows(lp, as_groups, caps.cap, caps.node_free, caps.whole_cap, mem_cap,
                      False, {}, patterns)
    if quotas:
        agg._declare_quota_rows(lp, as_groups, quotas)
    agg._declare_domain_rows(lp, as_groups, caps.domain_free)
    for pool in sorted(caps.usable_cap):
        lp.add_row("usable", pool, hi=caps.usable_cap[pool])
    gang_cols, _ = agg._job_columns(lp, as_groups, False, patterns, quotas)
    n_job_cols = lp.num_cols
    agg._pattern_columns(lp, patterns)
    class_cols: dict[int, dict[int, float]] = {p: {} for p in const}
    col = 0
    keys: list[tuple[int, str, str, float]] = []  # column -> (col, tenant, model, quota)
    for key in groups:
        for opt in key.options:
            class_cols[key.priority][col] = opt.coef
            keys.append((col, key.tenant, opt.pool[1], opt.quota))
            col += 1
    served: list[int] = []
    for t in sorted(quotas):
        for k, g in sorted(quotas[t].guaranteed.items()):
            if g > 0:
                lp.add_row("usage", (t, k), lo=0.0)
                s = lp.add_col(0.0, hi=g)
                lp.entry("usage", (t, k), s, -1.0)
                served.append(s)
    for c, tenant, model, q in keys:
        for qk in quota_keys(quotas, tenant, model) if quotas else ():
            if lp.has_row("usage", qk):
                lp.entry("usage", qk, c, q)
    if served:
        lp.add_row("served", 0)
        for s in served:
            lp.entry("served", 0, s, 1.0)
    for p, cols in class_cols.items():
        lp.add_row("class", p)
        for c, coef in cols.items():
            lp.entry("class", p, c, coef)
    return _Model(lp, class_cols, const, served), gang_cols, n_job_cols


def _solve(h: highspy.Highs, cost: np.ndarray, time_limit_s: float, mip: bool
           ) -> float | None:
    """max cost . x over the model in `h` (None when it does not finish in time): the LP
    optimum, or with the gang columns integral (`mip`) the MIP's dual bound."""
    h.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32), -cost)
    h.setOptionValue("time_limit", max(0.05, time_limit_s))
    h.run()
    if mip:
        dual = float(-h.getInfo().mip_dual_bound)
        return dual if math.isfinite(dual) and h.getModelStatus() != INFEASIBLE else None
    if h.getModelStatus() != OPTIMAL:
        return None
    return float(-h.getInfo().objective_function_value)


def _held(value: float, jobs: int) -> float:
    """The lower bound holding a level at `value` (module doc's tolerance)."""
    return value - 1e-6 * (1.0 + abs(value) + jobs)


def _integral_copy(lp: HighsLp, gangs: list[int], held: list[tuple[int, float]],
                   jobs: int) -> highspy.Highs:
    """`lp` with the gang columns integral and each (row, value) of `held` held."""
    h = lp.to_highs()
    set_integral(h, gangs)
    h.setOptionValue("mip_rel_gap", 1e-3)
    for row, v in held:
        h.changeRowBounds(row, _held(v, jobs), INF)
    return h


def _fractional(h: highspy.Highs, cols: list[int]) -> bool:
    """Whether some of `cols` has a fractional value in `h`'s solution."""
    values = h.getSolution().col_value
    return any(abs(values[c] - round(values[c])) > 1e-6 for c in cols)


def level_bounds(request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
                 time_limit_s: float = 2.0) -> list[float | None]:
    """The bound of each level of `level_values(request, placements)`, in its order
    (module doc); [] without levels."""
    values = level_values(request, placements)
    if not values:
        return []
    t0 = time.perf_counter()
    built = _build(request)
    if built is None:
        return [None] * len(values)
    model, gang_cols, n_job_cols = built
    additive = request.policy.objective != "fairness"
    if model.lp.num_cols == 0:
        # no job can be placed (HiGHS calls the LP empty): every level's sum is 0
        return [0.0 if name == "quota" else
                model.const[int(name.split(" ", 1)[1])] if additive else None
                for name, _ in values]
    gangs = [c for c in range(n_job_cols) if gang_cols[c]]
    lp = model.lp
    h = lp.to_highs()
    mip: highspy.Highs | None = None  # the same model with integral gang counts
    n = lp.num_cols
    rows: list[tuple[int, float]] = []  # (row, constant) of each level, in order
    if request.cluster.quotas:
        rows.append((lp.row("served", 0) if model.served else -1, 0.0))
    for name, _ in values[len(rows):]:
        p = int(name.split(" ", 1)[1])
        rows.append((lp.row("class", p), model.const[p]))
    out: list[float | None] = []
    held: list[tuple[int, float]] = []  # (row, value) of the levels held so far
    holding = True  # every level above is proven: this one may be held (module doc)
    for i, (name, _) in enumerate(values):
        left = time_limit_s - (time.perf_counter() - t0)
        row, const = rows[i]
        got: float | None = None
        if row < 0:  # no guarantee at all: nothing to serve
            got = 0.0
        elif left > 0 and (name == "quota" or additive):
            cost = np.zeros(n)
            if name == "quota":
                cost[model.served] = 1.0
            else:
                for c, coef in model.class_cols[int(name.split(" ", 1)[1])].items():
                    cost[c] = coef
            share = left / (len(values) - i)
            got = _solve(h, cost, left, False)
            share -= time.perf_counter() - t0 - (time_limit_s - left)  # what the LP left
            if (got is not None and gangs and share > 0.1
                    and (mip is not None or _fractional(h, gangs))):
                if mip is None:
                    mip = _integral_copy(lp, gangs, held, len(request.jobs))
                again = _solve(mip, cost, share, True)
                got = got if again is None else min(got, again)
            if got is not None:
                got += const + _REL * abs(got + const) + _ABS
        out.append(got)
        if row < 0:
            continue
        if not holding or (name != "quota" and not additive):
            holding = False  # a fairness class row is no sum of its value
            continue
        # every level above is proven, so the lexicographic optimum is at least the plan
        # here: hold this level at the plan's value for the levels below
        v = values[i][1] - const
        held.append((row, v))
        for model_h in (h, mip):
            if model_h is not None:
                model_h.changeRowBounds(row, _held(v, len(request.jobs)), INF)
        holding = got is not None and proven(values[i][1], got, len(request.jobs))
    return [b if b is None or math.isfinite(b) else None for b in out]


def proven(value: float, bound: float, jobs: int) -> bool:
    """Whether a level's `value` meets its `bound` (within the holding tolerance of
    `_held` and the bound's own margins): then the lexicographic optimum has that value
    there, as far as floats tell (module doc)."""
    return bound - value <= 1e-6 * (1.0 + abs(value) + jobs) + _REL * abs(bound) + _ABS


def held_bound(request: PlanRequest, level: str, held: Mapping[str, float],
               time_limit_s: float = 30.0) -> float | None:
    """The LP optimum of `level` (a name of `level_values`: "quota" or "priority <p>",
    additive objectives) with each level named in `held` at least its value there (the
    LP of the module doc, gang counts fractional); None when the LP does not finish.

    A bound over the plans that reach every held value. It bounds the lexicographic
    optimum's `level` only when the optimum is known to reach them, as `level_bounds`
    holds them; otherwise it is a measure, not a bound: how much of a lower level's
    bound comes from the room a higher level leaves (benchmarks/level_probe.py). None
    also for fairness, and when a running job that must stay has no option."""
    built = _build(request)
    if built is None or request.policy.objective == "fairness":
        return None
    model, _, _ = built
    lp = model.lp
    if lp.num_cols == 0:  # no job can be placed: the level is its constant
        return 0.0 if level == "quota" else model.const[int(level.split(" ", 1)[1])]
    h = lp.to_highs()

    def row_of(name: str) -> tuple[int, float]:
        """The row of level `name` (-1: no guarantee) and its constant."""
        if name == "quota":
            return (lp.row("served", 0) if model.served else -1), 0.0
        p = int(name.split(" ", 1)[1])
        return lp.row("class", p), model.const[p]

    for name, value in held.items():
        row, const = row_of(name)
        if row >= 0:
            h.changeRowBounds(row, _held(value - const, len(request.jobs)), INF)
    row, const = row_of(level)
    if row < 0:
        return 0.0
    cost = np.zeros(lp.num_cols)
    if level == "quota":
        cost[model.served] = 1.0
    else:
        for c, coef in model.class_cols[int(level.split(" ", 1)[1])].items():
            cost[c] = coef
    got = _solve(h, cost, time_limit_s, False)
    return None if got is None else got + const + _REL * abs(got + const) + _ABS
