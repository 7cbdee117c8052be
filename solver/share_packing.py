"""Shared-GPU packing by patterns: an exact re-pack of a plan's new shared jobs.

Tight multi-resource packings of shared jobs (fractions, GPU memory, host CPU and memory
on one-GPU nodes) are where the compact model, one binary per (job, GPU), is weakest: its
LP relaxation is loose and identical GPUs make it symmetric, so CP-SAT and the heuristics
leave 5-10% of a tight packing out (on the Triplet vector bin packing instances of
`gpuplan bench vbp`, 56 of 60 jobs in 10 s where all 60 fit). The pattern model
(Gilmore-Gomory) has one integer column per way to fill a *class* of identical GPUs with
groups of identical jobs; its LP relaxation is nearly integral and HiGHS closes such
instances in about a second.

What is re-packed, given a plan (`repack`):
- the movable jobs: shared jobs that are not running (no `current`), placed or not;
- on the pool: usable non-MIG GPUs that host no whole-GPU job in the plan, with what the
  plan's other jobs leave of them (running shares stay where the plan puts them);
- GPUs of a node whose host CPU or memory the movable jobs would share between several
  pool GPUs are left out of the pool (patterns are per GPU, so host capacity must belong
  to one GPU), and the movable jobs the plan puts there stay;
- GPUs with the same model and the same residual fraction, GPU memory, host CPU and host
  memory form a class; jobs with the same demands and values form a group.

    maximise   sum_{c,p} value(c, p) y[c,p]
    subject to sum_p y[c,p] <= |class c|                 (GPUs of each class)
               sum_{c,p} count(p, g) y[c,p] <= |group g|  (jobs of each group)

A pattern p of class c is a multiset of groups eligible on c's model that fits c's
residuals, its value the jobs' per-job objective values on that model. The plan's own
packing is passed to HiGHS as a starting solution, so the result is never worse; the
caller keeps it only if the whole plan ranks better. When there are too many patterns to
list (`MAX_PATTERNS`; many small shares), the useful ones are generated instead: column
generation on the model's LP relaxation, pricing each GPU class by a branch-and-bound
knapsack over the job groups, then the MIP over the generated columns (price-and-branch,
a heuristic: the columns may miss the optimum). Very large requests are left alone
(`MAX_GPUS`, `MAX_MOVABLE`).

Co-location interference (contract 5.2) fits the pattern model exactly, since a
pattern fixes who shares each GPU: groups also differ by class, a GPU class also by the
classed shared jobs that stay on it (their classes and values), and a pattern's value is
its jobs' values times their factors plus what it changes in the staying jobs' values
(`_coloc_value`). Column generation prices additive values only, so with interference the
re-pack runs only when the patterns can be listed.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import highspy

from heuristics.colocation import Colocation
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.instance import ClusterState, JobInfo, compile_jobs
from models.objective import objective_value_of
from models.rules import InterferenceTable, colocation_factor
from solver.highs import OPTIMAL, SOLUTION_FEASIBLE, HighsLp, set_integral

log = logging.getLogger(__name__)

#: Most patterns listed over all classes; beyond it they are generated from the LP.
MAX_PATTERNS = 60_000
#: Largest requests re-packed (GPUs in the cluster, new shared jobs): beyond them setting
#: up the pool alone takes a good part of a short budget, for little gain.
MAX_GPUS = 4_096
MAX_MOVABLE = 1_000
#: Most job groups a class may see (the enumeration recurses once per group).
MAX_GROUPS = 500
#: Share of the re-pack's time column generation may take when patterns are too many to
#: list; the MIP over the generated columns gets the rest.
CG_SHARE = 0.5
#: Most columns column generation may add.
MAX_COLUMNS = 100_000
#: Patterns priced into the LP per class and round (the best by reduced cost).
PRICED_PER_CLASS = 100
#: The enumerations (`_patterns`, `_price`) read the clock once per this many calls: 4,096
#: calls of the pricing took 20-40 ms beside busy processes, and each of M's 14-21
#: classes ran that long past the stop before noticing (a re-pack capped at 0.6 s ran
#: 0.38 s over).
PRICE_CHECK_CALLS = 1024
#: Pattern columns beyond which the MIP runs without HiGHS's presolve (see `_solve`).
PRESOLVE_MAX_COLS = 20_000
#: Capacity tolerance, the validator's.
_TOL = 1e-9
_NONE = -1.0  # an unconstrained host resource in a class key


@dataclass(frozen=True)
class _Class:
    model: str
    frac: float
    mem: float
    cpu: float  # _NONE: unconstrained
    host_mem: float
    #: classed shared jobs staying on the GPU: (class, objective value), sorted
    residents: tuple[tuple[str, float], ...] = ()

    def holds(self, frac: float, mem: float, cpu: float, host_mem: float) -> bool:
        """Whether what a pattern leaves of this class's residuals is all >= 0."""
        return (frac >= -_TOL and mem >= -_TOL and (self.cpu == _NONE or cpu >= -_TOL)
                and (self.host_mem == _NONE or host_mem >= -_TOL))


#: a pattern: ((group index, count), ...), sorted by group
Pattern = tuple[tuple[int, int], ...]


class Column(NamedTuple):
    """y[c, p] of the pattern model: GPUs of class `cls` filled as `pattern`, its value."""

    cls: _Class
    pattern: Pattern
    value: float


@dataclass
class _Group:
    share: float
    gpu_mem: float
    cpu: float
    host_mem: float
    values: dict[str, float]
    jobs: list[JobInfo]
    #: co-location class (only when it matters, contract 5.2)
    cls: str | None = None


def _group_key(info: JobInfo, cls: str | None = None) -> tuple[object, ...]:
    return (info.share, info.gpu_mem, info.cpu, info.host_mem,
            tuple(sorted(info.obj_values.items())), cls)


def _coloc_value(cls: _Class, pat: Pattern, groups: list[_Group],
                 table: InterferenceTable) -> float:
    """A pattern's value with interference (module doc): each placed job's value times its
    factor beside everyone on the GPU, plus the change of the staying jobs' values."""
    placed = [(groups[gi].cls, groups[gi].values[cls.model]) for gi, n in pat
              for _ in range(n)]
    everyone = [c for c, _ in placed] + [c for c, _ in cls.residents]
    total = 0.0
    for i, (c, v) in enumerate(placed):
        total += v * colocation_factor(c, everyone[:i] + everyone[i + 1:], table)
    stay = [c for c, _ in cls.residents]
    for k, (c, v) in enumerate(cls.residents):
        i = len(placed) + k
        before = colocation_factor(c, stay[:k] + stay[k + 1:], table)
        total += v * (colocation_factor(c, everyone[:i] + everyone[i + 1:], table) - before)
    return total


def _residents(state: ClusterState, gid: int, coloc: Colocation,
               by_name: dict[str, JobInfo], request: PlanRequest
               ) -> tuple[tuple[str, float], ...]:
    """The classed shared jobs on GPU `gid` in `state`, as (class, objective value)."""
    if not coloc.active:
        return ()
    g = state.gpus[gid]
    out = []
    for name in g.share_jobs:
        if name in coloc.cls:
            info = by_name[name]
            v = info.obj_values.get(g.model)
            if v is None:
                v = objective_value_of(info.job, g.model, state.catalog,
                                       request.policy.objective)
            out.append((coloc.cls[name], round(v, 12)))
    return tuple(sorted(out))


def _patterns(cls: _Class, groups: list[_Group], budget: int, deadline: float
              ) -> list[tuple[Pattern, float]] | None:
    """Every non-empty multiset of eligible groups fitting `cls`, as ((group, count), ...)
    with its value; None when there are more than `budget` or `deadline` passes."""
    elig = sorted((gi for gi, g in enumerate(groups) if cls.model in g.values),
                  key=lambda gi: -groups[gi].share)
    if len(elig) > MAX_GROUPS:
        return None
    cpu_on = cls.cpu != _NONE
    hmem_on = cls.host_mem != _NONE
    # the least each remaining group needs, per resource: below it nothing more fits
    inf = float("inf")
    suffix = [(inf, inf, inf, inf)] * (len(elig) + 1)
    for k in range(len(elig) - 1, -1, -1):
        g = groups[elig[k]]
        a = suffix[k + 1]
        suffix[k] = (min(a[0], g.share), min(a[1], g.gpu_mem), min(a[2], g.cpu),
                     min(a[3], g.host_mem))
    out: list[tuple[Pattern, float]] = []
    pick: list[tuple[int, int]] = []
    calls = 0

    def rec(k: int, frac: float, mem: float, cpu: float, hmem: float, value: float) -> bool:
        nonlocal calls
        calls += 1
        if calls % PRICE_CHECK_CALLS == 0 and time.monotonic() > deadline:
            return False
        low = suffix[k]
        if (k == len(elig) or frac < low[0] - _TOL or mem < low[1] - _TOL
                or (cpu_on and cpu < low[2] - _TOL) or (hmem_on and hmem < low[3] - _TOL)):
            if pick:
                out.append((tuple(sorted(pick)), value))
                if len(out) > budget:
                    return False
            return True
        gi = elig[k]
        g = groups[gi]
        if not rec(k + 1, frac, mem, cpu, hmem, value):
            return False
        v = g.values[cls.model]
        for n in range(1, len(g.jobs) + 1):
            f, m = frac - n * g.share, mem - n * g.gpu_mem
            c, h = cpu - n * g.cpu, hmem - n * g.host_mem
            if not cls.holds(f, m, c, h):
                break
            pick.append((gi, n))
            ok = rec(k + 1, f, m, c, h, value + n * v)
            pick.pop()
            if not ok:
                return False
        return True

    if not rec(0, cls.frac, cls.mem, cls.cpu if cpu_on else 0.0,
               cls.host_mem if hmem_on else 0.0, 0.0):
        return None
    return out


def repack(request: PlanRequest, result: HeuristicResult, deadline: float
           ) -> HeuristicResult | None:
    """`result` with its movable shared jobs re-packed by the pattern model (module doc),
    or None when there is nothing to re-pack, too many patterns or no time. The caller
    compares the two plans by the policy objective."""
    if sum(len(n.gpus) for n in request.cluster.nodes) > MAX_GPUS:
        return None
    infos = compile_jobs(request)
    movable = {i.name: i for i in infos
               if i.shape == "share" and not i.current and i.obj_values}
    if not 2 <= len(movable) <= MAX_MOVABLE:
        return None
    state = ClusterState(request)
    by_name = {i.name: i for i in infos}
    coloc = Colocation(request, infos)
    for name, pls in result.placements.items():
        if name not in movable:
            state.place(by_name[name], pls)
    host_cpu = any(i.cpu > 0 for i in movable.values())
    host_mem = any(i.host_mem > 0 for i in movable.values())
    pool: list[int] = []
    for node in state.nodes:
        gids = [g for g in node.gpus if state.gpus[g].usable and not state.gpus[g].mig
                and state.gpus[g].whole_job is None]
        coupled = len(gids) > 1 and ((host_cpu and node.cpu_cap is not None)
                                     or (host_mem and node.mem_cap is not None))
        if not coupled:
            pool.extend(gids)
    pool_set = set(pool)
    # movable jobs the plan puts outside the pool stay there
    for name in list(movable):
        kept = result.placements.get(name)
        if kept and state.gid_of[(kept[0].node, kept[0].gpu)] not in pool_set:
            state.place(movable.pop(name), kept)
    if len(movable) < 2 or not pool:
        return None
    classes: dict[_Class, list[int]] = defaultdict(list)
    for gid in pool:
        g = state.gpus[gid]
        node = state.nodes[g.node]
        cls = _Class(
            g.model, round(1.0 - g.share_used, 9), round(g.mem - g.share_mem, 9),
            _NONE if node.cpu_cap is None else round(node.cpu_cap - node.cpu_used, 9),
            _NONE if node.mem_cap is None else round(node.mem_cap - node.mem_used, 9),
            _residents(state, gid, coloc, by_name, request))
        if cls.frac > _TOL:
            classes[cls].append(gid)
    grouped: dict[tuple[object, ...], _Group] = {}
    for info in movable.values():
        key = _group_key(info, coloc.cls.get(info.name))
        if key not in grouped:
            grouped[key] = _Group(info.share, info.gpu_mem, info.cpu, info.host_mem,
                                  dict(info.obj_values), [], coloc.cls.get(info.name))
        grouped[key].jobs.append(info)
    groups = list(grouped.values())
    ordered = sorted(classes, key=lambda c: (c.model, c.frac, c.mem, c.cpu, c.host_mem))
    cols: list[Column] = []
    for cls in ordered:
        pats = _patterns(cls, groups, MAX_PATTERNS - len(cols), deadline)
        if pats is None:
            cols = []
            break
        if coloc.active:
            pats = [(p, _coloc_value(cls, p, groups, coloc.table)) for p, _v in pats]
        cols.extend(Column(cls, p, v) for p, v in pats)
    own = _own_patterns(result, state, movable, classes, groups)
    if not cols and coloc.active:
        return None
    if not cols and time.monotonic() < deadline:
        # too many patterns to list: generate the useful ones (price-and-branch)
        cg_stop = time.monotonic() + CG_SHARE * (deadline - time.monotonic())
        cols = _generate(ordered, classes, groups, own, cg_stop)
    if not cols or time.monotonic() > deadline:
        return None
    y = _solve(cols, classes, groups, _start(own, cols), deadline)
    if y is None:
        return None
    return _placements(request, result, movable, classes, groups, cols, y, state)


def _own_patterns(result: HeuristicResult, state: ClusterState, movable: dict[str, JobInfo],
                  classes: dict[_Class, list[int]], groups: list[_Group]
                  ) -> list[tuple[_Class, Pattern]] | None:
    """The plan's own load of each pool GPU as (class, pattern), or None if a movable job
    sits outside the classes."""
    group_of = {info.name: gi for gi, g in enumerate(groups) for info in g.jobs}
    class_of = {gid: cls for cls, gids in classes.items() for gid in gids}
    load: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for name in movable:
        pls = result.placements.get(name)
        if pls:
            gid = state.gid_of[(pls[0].node, pls[0].gpu)]
            if gid not in class_of:
                return None
            load[gid][group_of[name]] += 1
    return [(class_of[gid], tuple(sorted(counts.items()))) for gid, counts in load.items()]


def _start(own: list[tuple[_Class, Pattern]] | None, cols: list[Column]
           ) -> list[float] | None:
    """The plan's own packing as column values (None if a GPU's load is no column)."""
    if own is None:
        return None
    index = {(cls, p): i for i, (cls, p, _v) in enumerate(cols)}
    x = [0.0] * len(cols)
    for key in own:
        i = index.get(key)
        if i is None:
            return None
        x[i] += 1.0
    return x


#: The share of the time left at the pattern MIP's start that is not given to HiGHS: it
#: returns some way past its limit (presolve and the last node are not interrupted), and
#: the plan is read out and compared after it (M at 1 s: the re-pack ran 0.43 s against
#: its 0.3 s cap).
SOLVE_EXIT_SHARE = 0.2


def _value(cls: _Class, pat: Pattern, groups: list[_Group]) -> float:
    return sum(n * groups[gi].values[cls.model] for gi, n in pat)


def _generate(ordered: list[_Class], classes: dict[_Class, list[int]],
              groups: list[_Group], own: list[tuple[_Class, Pattern]] | None,
              stop: float) -> list[Column]:
    """Columns by column generation on the LP of the pattern model: start from the plan's
    own patterns and every single job group per class, then add the patterns of positive
    reduced cost (`_price`) until there are none or `stop` passes."""
    seen: set[tuple[_Class, Pattern]] = set()
    cols: list[Column] = []

    def add(cls: _Class, pat: Pattern) -> None:
        if (cls, pat) not in seen:
            seen.add((cls, pat))
            cols.append(Column(cls, pat, _value(cls, pat, groups)))

    for cls, pat in own or []:
        add(cls, pat)
    for cls in ordered:
        for gi, g in enumerate(groups):
            if cls.model in g.values and cls.holds(cls.frac - g.share, cls.mem - g.gpu_mem,
                                                   cls.cpu - g.cpu, cls.host_mem - g.host_mem):
                add(cls, ((gi, 1),))
    class_row = {cls: r for r, cls in enumerate(ordered)}
    while time.monotonic() < stop and len(cols) < MAX_COLUMNS:
        duals = _lp_duals(cols, classes, groups, class_row, stop)
        if duals is None:
            break
        pi, mu = duals
        fresh = 0
        complete = True
        for cls in ordered:
            if time.monotonic() > stop:
                complete = False  # each class's pricing runs a while before its first check
                break
            pats, done = _price(cls, groups, pi[class_row[cls]], mu, PRICED_PER_CLASS, stop)
            complete &= done
            for pat in pats:
                if (cls, pat) not in seen:
                    add(cls, pat)
                    fresh += 1
        if fresh == 0 or not complete:
            break  # the LP over the columns is optimal, or the time is up
    return cols


def _lp_duals(cols: list[Column], classes: dict[_Class, list[int]], groups: list[_Group],
              class_row: dict[_Class, int], stop: float
              ) -> tuple[list[float], list[float]] | None:
    """Dual prices (>= 0) of the class and group rows of the pattern LP over `cols`: per
    class (in `class_row` order) and per group."""
    lp = _master(cols, classes, groups, class_row)
    h = lp.to_highs()
    h.setOptionValue("time_limit", max(0.05, stop - time.monotonic()))
    h.run()
    if h.getModelStatus() != OPTIMAL:
        return None
    duals = [max(0.0, -d) for d in h.getSolution().row_dual]
    return ([duals[lp.row("class", cls)] for cls in class_row],
            [duals[lp.row("group", gi)] for gi in range(len(groups))])


def _price(cls: _Class, groups: list[_Group], pi: float, mu: list[float], k: int,
           stop: float) -> tuple[list[Pattern], bool]:
    """Up to `k` patterns of class `cls` with the largest positive reduced cost
    value - pi - sum mu (a multi-resource knapsack, by branch and bound: the remaining
    capacity of each resource times the best profit per unit left bounds a branch), and
    whether the search was complete (not cut by `stop`)."""
    profit = {gi: g.values[cls.model] - mu[gi] for gi, g in enumerate(groups)
              if cls.model in g.values}
    elig = sorted((gi for gi, p in profit.items() if p > 1e-9),
                  key=lambda gi: -profit[gi] / groups[gi].share)
    if not elig:
        return [], True
    cpu_on = cls.cpu != _NONE
    hmem_on = cls.host_mem != _NONE
    # per resource, the best profit per unit among the remaining groups (a suffix max):
    # remaining capacity x that ratio bounds what the rest of a pattern can add
    inf = float("inf")

    def per_unit(gi: int, w: float) -> float:
        return profit[gi] / w if w > 0 else inf

    # resources that bind: the share always, the others when the class limits them
    used_dims = [0] + [d for d, on in ((1, cls.mem < 1e17), (2, cpu_on), (3, hmem_on)) if on]
    ratio = [[0.0] * (len(elig) + 1) for _ in range(4)]
    for j in range(len(elig) - 1, -1, -1):
        g = groups[elig[j]]
        for d, w in enumerate((g.share, g.gpu_mem, g.cpu, g.host_mem)):
            ratio[d][j] = max(ratio[d][j + 1], per_unit(elig[j], w))
    best: list[tuple[float, Pattern]] = []  # a min-heap of (reduced cost, pattern), <= k
    pick: list[tuple[int, int]] = []
    calls = 0

    def floor() -> float:
        return best[0][0] if len(best) >= k else 1e-6

    def rec(j: int, frac: float, mem: float, cpu: float, hmem: float, gain: float) -> bool:
        nonlocal calls
        calls += 1
        if calls % PRICE_CHECK_CALLS == 0 and time.monotonic() > stop:
            return False
        left = (frac, mem, cpu, hmem)
        room = min(ratio[d][j] * left[d] if left[d] > 0 else 0.0 for d in used_dims)
        if gain + room - pi <= floor():
            return True
        if j == len(elig):
            rc = gain - pi
            if pick and rc > floor():
                heapq.heappush(best, (rc, tuple(sorted(pick))))
                if len(best) > k:
                    heapq.heappop(best)
            return True
        gi = elig[j]
        g = groups[gi]
        most = len(g.jobs)
        for n in range(most, 0, -1):
            f, m = frac - n * g.share, mem - n * g.gpu_mem
            c, h = cpu - n * g.cpu, hmem - n * g.host_mem
            if not cls.holds(f, m, c, h):
                continue
            pick.append((gi, n))
            ok = rec(j + 1, f, m, c, h, gain + n * profit[gi])
            pick.pop()
            if not ok:
                return False
        return rec(j + 1, frac, mem, cpu, hmem, gain)

    complete = rec(0, cls.frac, cls.mem, cls.cpu if cpu_on else 0.0,
                   cls.host_mem if hmem_on else 0.0, 0.0)
    return [pat for _rc, pat in best], complete


def _master(cols: list[Column], classes: dict[_Class, list[int]], groups: list[_Group],
            class_row: dict[_Class, int]) -> HighsLp:
    """The pattern model over `cols` (module doc), minimising minus the value: a row per
    class (GPUs of the class, in `class_row` order) and per group (its jobs)."""
    lp = HighsLp()
    for cls in sorted(class_row, key=class_row.__getitem__):
        lp.add_row("class", cls, hi=float(len(classes[cls])))
    for gi, g in enumerate(groups):
        lp.add_row("group", gi, hi=float(len(g.jobs)))
    for col in cols:
        j = lp.add_col(-col.value, hi=float(len(classes[col.cls])))
        lp.entry("class", col.cls, j, 1.0)
        for gi, n in col.pattern:
            lp.entry("group", gi, j, float(n))
    return lp


def _solve(cols: list[Column], classes: dict[_Class, list[int]], groups: list[_Group],
           start: list[float] | None, deadline: float) -> list[int] | None:
    """The pattern MIP with HiGHS: column values, or None without a solution in time."""
    if deadline - time.monotonic() < 0.05:
        return None
    h = _master(cols, classes, groups, {cls: r for r, cls in enumerate(classes)}).to_highs()
    # the limit counts from now, not from before the model was built, and keeps back
    # HiGHS's own exit and reading out the placements (`SOLVE_EXIT_SHARE`)
    left = (deadline - time.monotonic()) * (1.0 - SOLVE_EXIT_SHARE)
    if left < 0.02:
        return None
    h.setOptionValue("time_limit", left)
    h.setOptionValue("mip_rel_gap", 1e-6)
    if len(cols) > PRESOLVE_MAX_COLS:
        # HiGHS 1.16's MIP presolve can overrun the time limit by minutes on such models
        # (a few classes, tens of thousands of binary columns: seen on M with elastic
        # gangs); without it the limit holds
        h.setOptionValue("presolve", "off")
    set_integral(h, list(range(len(cols))))
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = start
        h.setSolution(sol)
    h.run()
    if h.getInfo().primal_solution_status != SOLUTION_FEASIBLE:
        return None
    return [max(0, round(v)) for v in h.getSolution().col_value]


def _placements(request: PlanRequest, result: HeuristicResult, movable: dict[str, JobInfo],
                classes: dict[_Class, list[int]], groups: list[_Group],
                cols: list[Column], y: list[int],
                state: ClusterState) -> HeuristicResult | None:
    """The plan with the movable jobs placed as the column values `y` say."""
    free = {cls: list(gids) for cls, gids in classes.items()}
    left = [list(g.jobs) for g in groups]
    placements = {name: pls for name, pls in result.placements.items() if name not in movable}
    for (cls, pat, _v), count in zip(cols, y, strict=True):
        for _ in range(count):
            if not free[cls]:
                return None  # more patterns than GPUs: a solver tolerance issue
            gid = free[cls].pop()
            g = state.gpus[gid]
            node = state.nodes[g.node].name
            for gi, n in pat:
                if len(left[gi]) < n:
                    return None
                for _ in range(n):
                    info = left[gi].pop()
                    placements[info.name] = [Placement(node=node, gpu=g.index,
                                                       fraction=info.share)]
    reasons = {name: why for name, why in result.reasons.items() if name not in placements}
    for name in movable:
        if name not in placements and name not in reasons:
            reasons[name] = ("insufficient_capacity",
                             "eligible GPUs exist but are taken by other work")
    return HeuristicResult(placements=placements, reasons=reasons)
