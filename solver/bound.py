"""A proven upper bound on the plan objective for any instance size.

`upper_bound(request)` solves the LP relaxation (HiGHS) of an aggregated model:

- resource pools: per GPU model, its non-MIG GPUs (capacity = their number) and its MIG
  GPUs (capacity = their number, in GPUs of compute). Usable GPUs (healthy, schedulable)
  count, and so do unusable ones that a running job occupies now (only a kept placement
  may use them);
- a job option (model m): a whole gang takes `gpus` of m's non-MIG pool, a share its
  fraction, a MIG job the compute share of its smallest profile on m (at least what any
  instance it gets takes). Options that can never be used are left out: ineligible models
  (a running job's current model stays, it is grandfathered), gangs larger than any node
  (`single_node`), any domain (`same_domain`) or the pool;
- jobs with identical options (and tenant, for fairness) form a group of n jobs:
  sum of the group's option variables <= n, == n for non-preemptible running jobs;
- objective: each option earns the job's per-job objective value; a running job also
  earns back `preemption_cost` when placed (its constant `-preemption_cost` is added),
  migration costs are dropped (>= 0, so the bound stays valid). For `fairness` the LP
  maximises t subject to (placed value of tenant k) >= D_k * t.

Node structure enters in three places: single-node gangs pack into node patterns (per
model and free-GPU count, the maximal multisets of gang sizes that fit; threshold rows
per gang size beyond 3,000 patterns), GPUs holding non-preemptible shares stay shared, and
the GPU memory of each pool is a row. When gang columns come out fractional, the model is
re-solved with them integral (HiGHS MIP, part of the time slice): its dual bound can only
tighten the LP's, and its incumbent gives `Relaxation.targets`, which
heuristics/lp_round.py rounds into a plan.

Every feasible plan maps to a feasible LP point of at least its objective (capacities,
eligibility and gang sizes are relaxations of the contract's constraints), so the LP
optimum is a valid bound for `throughput`, `jct`, `makespan`, `priority_fifo` (whose
feasible set is a subset of `throughput`'s with the same objective) and `fairness`.
Host CPU/memory and MIG geometry are relaxed away. Coefficients are rounded up to a
0.2% geometric grid so that jobs group more (the bound loosens by at most 0.2%). If
HiGHS does not finish in time, the sum of every job's best value (capacity ignored) is
returned instead: still valid, looser.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import highspy
import numpy as np

from models import Gpu, Node, PlanRequest
from models.capacity import CapacitySummary, usable
from models.instance import ClusterState, compile_jobs
from models.objective import objective_value_of, tenant_demands
from models.rules import job_value, mig_profiles_for, model_eligible
from solver.quiet import new_highs

log = logging.getLogger(__name__)

#: Relative and absolute safety margins added to the LP optimum (solver tolerances).
_REL_MARGIN = 1e-7
_ABS_MARGIN = 1e-6

#: Relative grid on which objective coefficients are rounded up before grouping.
_GRID = 0.002
_LOG_GRID = math.log1p(_GRID)

Pool = tuple[str, str]  # ("whole" | "mig", model)
#: (pool, amount, objective coefficient, throughput value, GPU memory, whole GPUs?) of one
#: job option
Option = tuple[Pool, float, float, float, float, bool]
#: a group of identical jobs: its options and (for fairness) its tenant
GroupKey = tuple[tuple[Option, ...], str, bool, int]


@dataclass
class _Capacity:
    """What the relaxation knows of the cluster, from one pass over its GPUs. A GPU
    counts when usable, or when a running job holds it now (only a kept placement may
    use it)."""

    #: pool -> GPUs
    cap: dict[Pool, int]
    #: model -> the most non-MIG GPUs of it on one node
    per_node: dict[str, int]
    #: (domain, model) -> non-MIG GPUs
    dom_count: dict[tuple[str | None, str], int]
    #: model -> each node's non-MIG GPUs not held by a non-preemptible running job
    node_free: dict[str, list[int]]
    #: model with non-preemptible shares -> non-MIG GPUs left for whole jobs (a GPU
    #: holding such a share stays shared, so only shares may use the rest of it)
    whole_cap: dict[str, int]


def _capacities(state: ClusterState, request: PlanRequest) -> _Capacity:
    """The cluster's capacities for the relaxation (see `_Capacity`), from the shared
    capacity summary (`models.capacity`); a node without a domain is a domain of its own."""
    occupied: set[tuple[str, int]] = set()
    held: set[tuple[str, int]] = set()
    pinned_shares: set[tuple[str, int]] = set()
    for j in request.jobs:
        for p in j.current or []:
            occupied.add((p.node, p.gpu))
            if not j.preemptible:
                held.add((p.node, p.gpu))
                if p.fraction is not None and p.mig is None:
                    pinned_shares.add((p.node, p.gpu))

    def counts(node: Node, gpu: Gpu) -> bool:
        return usable(node, gpu) or (node.name, gpu.index) in occupied

    every = CapacitySummary(request.cluster, counts)
    free = CapacitySummary(request.cluster, lambda n, g: counts(n, g)
                           and (n.name, g.index) not in held)
    unpinned = CapacitySummary(request.cluster, lambda n, g: counts(n, g)
                               and (n.name, g.index) not in pinned_shares)
    cap: dict[Pool, int] = {("mig" if mig else "whole", m): c
                            for (m, mig), c in every.totals.items()}
    per_node = {m: c for (m, mig), c in every.node_most.items() if not mig}
    dom_count: dict[tuple[str | None, str], int] = {
        (d, m): c for (d, (m, mig)), c in every.domains.items() if not mig}
    node_free: dict[str, list[int]] = {}
    for s in free.nodes:
        for (m, mig), c in s.gpus.items():
            if not mig:
                node_free.setdefault(m, []).append(c)
    shared_models = {state.gpus[state.gid_of[key]].model for key in pinned_shares}
    whole_cap = {m: unpinned.total((m, False)) for m in shared_models}
    return _Capacity(cap, per_node, dom_count, node_free, whole_cap)


def _round_up(x: float) -> float:
    """`x` rounded up on a geometric grid of ratio 1 + _GRID (fewer distinct groups; the
    bound stays valid because coefficients only grow)."""
    if x <= 0:
        return x
    return math.exp(math.ceil(math.log(x) / _LOG_GRID - 1e-12) * _LOG_GRID) * (1 + 1e-12)


@dataclass
class Relaxation:
    """The aggregated LP's optimum: the bound, and where the LP puts whole jobs."""

    bound: float
    #: job name -> the model the LP places it on, for the jobs of each group up to the
    #: integer part of the group's LP count on that model (empty when the LP was not
    #: solved to optimality and the capacity-free bound was used)
    targets: dict[str, str] = field(default_factory=dict)


def upper_bound(request: PlanRequest, *, time_limit_s: float = 2.0) -> float | None:
    """A proven upper bound on `request`'s objective (module doc); None if the hard
    constraints alone are infeasible in the relaxation (non-preemptible jobs overflow)."""
    rel = relax(request, time_limit_s=time_limit_s)
    return None if rel is None else rel.bound


def relax(request: PlanRequest, *, time_limit_s: float = 2.0) -> Relaxation | None:
    """The aggregated LP relaxation of `request`: its bound (as `upper_bound`) and the
    integer part of its solution as per-job target models (see `heuristics/lp_round.py`,
    which rounds it into a plan); None if the relaxation is infeasible."""
    t0 = time.perf_counter()
    policy = request.policy
    objective = policy.objective
    fair = objective == "fairness"
    state = ClusterState(request)
    catalog = state.catalog
    caps = _capacities(state, request)
    cap, per_node, dom_count = caps.cap, caps.per_node, caps.dom_count
    infos = compile_jobs(request)
    pre_cost = 0.0 if fair else policy.preemption_cost
    const = 0.0
    # group key -> [count, fixed count]
    groups: dict[GroupKey, list[int]] = {}
    members: dict[GroupKey, list[str]] = {}
    for info in infos:
        job = info.job
        options: dict[str, Option] = {}
        models = set(info.values)
        cur_model = None
        if job.current:
            cur_model = state.model_of(job.current)
            models.add(cur_model)
        if job.current and not job.preemptible:
            models = {cur_model} if cur_model is not None else set()
        for m in sorted(models):
            spec = catalog[m]
            grandfathered = m == cur_model
            if not grandfathered and not model_eligible(job, m, spec):
                continue
            if info.shape == "mig":
                pool: Pool = ("mig", m)
                profs = mig_profiles_for(job, spec)
                if grandfathered and job.current and job.current[0].mig is not None:
                    cur = spec.profile(job.current[0].mig.profile)
                    profs = [*profs, cur] if cur is not None else profs
                if not profs:
                    continue
                amount = min(p.compute_slices for p in profs) / spec.compute_slices
            else:
                pool = ("whole", m)
                amount = float(info.gpus) if info.shape == "whole" else info.share
                if grandfathered and info.shape == "share" and job.current:
                    amount = min(amount, job.current[0].fraction or amount)
                if info.shape == "whole" and not grandfathered:
                    k = info.gpus
                    if job.single_node:
                        limit = per_node.get(m, 0)
                    elif job.same_domain:
                        limit = max((c for (d, mm), c in dom_count.items()
                                     if mm == m and d is not None), default=0)
                    else:
                        limit = cap.get(pool, 0)
                    if k > limit:
                        continue
            if cap.get(pool, 0) <= 0 or amount > cap[pool] + 1e-9:
                continue
            if fair:
                coef = 0.0
                thr = info.values.get(m)
                if thr is None:
                    thr = job_value(job, m, catalog)
            else:
                thr = 0.0
                coef_ = info.obj_values.get(m)
                coef = coef_ if coef_ is not None else objective_value_of(
                    job, m, catalog, objective)
            if job.current:
                coef += pre_cost
                if m != cur_model and not fair:
                    coef -= policy.migration_cost  # placed on another model = migrated
            mem = 0.0
            if pool[0] == "whole" and spec.memory_gib is not None:
                mem = (info.gpus * spec.memory_gib if info.shape == "whole"
                       else min(info.gpu_mem, spec.memory_gib))
            options[m] = (pool, amount, _round_up(coef), _round_up(thr), mem,
                          info.shape == "whole")
        if job.current:
            const -= pre_cost
        if not options:
            if job.current and not job.preemptible:
                return None
            continue
        fixed = bool(job.current and not job.preemptible)
        single_k = info.gpus if info.shape == "whole" and job.single_node else 0
        key = (tuple(sorted(options.values())), job.tenant if fair else "", fixed, single_k)
        slot = groups.setdefault(key, [0, 0])
        members.setdefault(key, []).append(info.name)
        slot[0] += 1
        if job.current and not job.preemptible:
            slot[1] += 1
    mem_cap = {m: catalog[m].memory_gib for _, m in cap}
    solved = _solve_lp(groups, cap, caps.node_free, caps.whole_cap,
                       mem_cap, fair,
                       tenant_demands(request) if fair else {},
                       max(0.1, time_limit_s - (time.perf_counter() - t0)))
    if solved is None:
        return None
    bound, cols = solved
    value = bound if fair else bound + const
    return Relaxation(value + _REL_MARGIN * abs(value) + _ABS_MARGIN,
                      _targets(groups, members, cols))


def _targets(groups: dict[GroupKey, list[int]], members: dict[GroupKey, list[str]],
             cols: list[float] | None) -> dict[str, str]:
    """Per group, hand the integer part of each option's LP count to the group's jobs
    (options of higher objective coefficient first, jobs in request order)."""
    if cols is None:
        return {}
    out: dict[str, str] = {}
    col = 0
    for key in groups:
        opts = []
        for pool, _amount, coef, _thr, _mem, _whole in key[0]:
            opts.append((coef, pool[1], cols[col]))
            col += 1
        names = iter(members[key])
        for _coef, model, x in sorted(opts, key=lambda o: (-o[0], o[1])):
            for _ in range(math.floor(x + 1e-6)):
                name = next(names, None)
                if name is None:
                    break
                out[name] = model
    return out


#: Share of the bound's time limit the integer re-solve (gang counts integral) may use.
MIP_SHARE = 0.5

#: Most node patterns per model; beyond, the threshold rows stand in for them.
MAX_PATTERNS = 3000


def _node_patterns(groups: dict[GroupKey, list[int]], node_free: dict[str, list[int]]
                   ) -> dict[str, tuple[dict[int, int], dict[int, list[tuple[int, ...]]]]]:
    """Per model with single-node gangs: the number of nodes with c free GPUs, and for each
    c the maximal multisets of gang sizes (>= 2) that fit in c GPUs. A plan puts on each
    node a multiset of gangs that fits its free GPUs, contained in a maximal one, so the
    LP over node patterns (Gilmore-Gomory) is a relaxation, and a much tighter one than
    per-size thresholds when gangs of several sizes compete for nodes. Models whose
    enumeration passes `MAX_PATTERNS` keep the threshold rows."""
    sizes: dict[str, set[int]] = {}
    for opts, _tenant, fixed_group, single_k in groups:
        if single_k >= 2 and not fixed_group:
            for opt in opts:
                if opt[0][0] == "whole":
                    sizes.setdefault(opt[0][1], set()).add(single_k)
    out: dict[str, tuple[dict[int, int], dict[int, list[tuple[int, ...]]]]] = {}
    for m, ks in sizes.items():
        counts: dict[int, int] = {}
        for c in node_free.get(m, []):
            counts[c] = counts.get(c, 0) + 1
        order = sorted(ks, reverse=True)
        by_c: dict[int, list[tuple[int, ...]]] = {}
        total = 0
        for c in counts:
            by_c[c] = _maximal_multisets(c, order, MAX_PATTERNS - total + 1)
            total += len(by_c[c])
            if total > MAX_PATTERNS:
                break
        if total <= MAX_PATTERNS:
            out[m] = (counts, by_c)
    return out


def _maximal_multisets(c: int, sizes: list[int], cap: int) -> list[tuple[int, ...]]:
    """The non-empty multisets of `sizes` (descending) of sum <= c to which no size can be
    added; stops after `cap` of them."""
    out: list[tuple[int, ...]] = []
    smallest = sizes[-1]

    def rec(i: int, left: int, acc: tuple[int, ...]) -> None:
        if len(out) >= cap:
            return
        if i == len(sizes):
            if acc and left < smallest:
                out.append(acc)
            return
        k = sizes[i]
        for n in range(left // k, -1, -1):
            rec(i + 1, left - n * k, acc + (k,) * n)

    rec(0, c, ())
    return out


def _solve_lp(groups: dict[GroupKey, list[int]], cap: dict[Pool, int],
              node_free: dict[str, list[int]], whole_cap: dict[str, int],
              mem_cap: dict[str, float | None], fair: bool,
              demands: dict[str, float], time_limit_s: float
              ) -> tuple[float, list[float] | None] | None:
    """max sum coef x (or t for fairness) over the aggregated model and the optimal
    column values (None with the capacity-free fallback); None if infeasible."""
    pools = {p: i for i, p in enumerate(sorted(cap))}
    tenants = {k: i for i, k in enumerate(sorted(demands))}
    n_groups = len(groups)
    col_cost: list[float] = []
    col_ub: list[float] = []
    gang_cols: list[bool] = []
    # rows: groups [0, G), pools [G, G + P), tenants after
    row_entries: list[tuple[int, int, float]] = []
    fallback = 0.0
    # Single-node gangs of k >= t GPUs on model m only fit nodes with >= t free GPUs:
    # sum k x <= sum of c_n over nodes with c_n >= t, and #gangs <= sum floor(c_n / t).
    thresholds: dict[tuple[str, int], tuple[int, int, int]] = {}
    base = n_groups + len(pools) + (len(tenants) if fair else 0)
    # GPU memory of each non-MIG pool: whole jobs take all of theirs, shares their need.
    mem_rows: dict[Pool, tuple[int, float]] = {}
    for p in sorted(cap):
        if p[0] == "whole" and mem_cap.get(p[1]) is not None:
            mem_rows[p] = (base + len(mem_rows), cap[p] * (mem_cap[p[1]] or 0.0))
    base += len(mem_rows)
    patterns = _node_patterns(groups, node_free)
    for m in sorted(node_free):
        if m in patterns:
            continue
        top = max(node_free[m], default=0)
        for t in range(2, top + 1):
            gpus = sum(c for c in node_free[m] if c >= t)
            count = sum(c // t for c in node_free[m])
            thresholds[(m, t)] = (base + 2 * len(thresholds), gpus, count)
    # GPUs for whole jobs where non-preemptible shares keep some GPUs shared.
    whole_rows = {m: base + 2 * len(thresholds) + k for k, m in enumerate(sorted(whole_cap))}
    # Node patterns: per model, one row per free-GPU count c (nodes using a pattern <= the
    # nodes with c free) and one per gang size k (gangs of k <= k-slots of the patterns).
    next_row = base + 2 * len(thresholds) + len(whole_rows)
    node_rows: dict[tuple[str, int], int] = {}
    gang_rows: dict[tuple[str, int], int] = {}
    for m in sorted(patterns):
        counts, by_c = patterns[m]
        for c in sorted(counts):
            node_rows[(m, c)] = next_row
            next_row += 1
        for k in sorted({k for pats in by_c.values() for pat in pats for k in pat}):
            gang_rows[(m, k)] = next_row
            next_row += 1
    for gi, ((opts, tenant, fixed_group, single_k), (count, _fixed)) in enumerate(
            groups.items()):
        best = 0.0
        for pool, amount, coef, thr, mem, whole in opts:
            col = len(col_cost)
            gang_cols.append(whole and amount >= 2)
            col_cost.append(-coef)  # HiGHS minimises
            col_ub.append(float(count))
            row_entries.append((gi, col, 1.0))
            row_entries.append((n_groups + pools[pool], col, amount))
            if mem > 0 and pool in mem_rows:
                row_entries.append((mem_rows[pool][0], col, mem))
            if whole and pool[0] == "whole" and pool[1] in whole_rows:
                row_entries.append((whole_rows[pool[1]], col, amount))
            if fair and tenant in tenants:
                row_entries.append((n_groups + len(pools) + tenants[tenant], col, thr))
            if single_k >= 2 and not fixed_group and pool[0] == "whole" and (
                    pool[1] in patterns):
                gr = gang_rows.get((pool[1], single_k))
                if gr is None:  # no node has room for it: the option is unusable
                    col_ub[col] = 0.0
                else:
                    row_entries.append((gr, col, 1.0))
            elif single_k >= 2 and not fixed_group and pool[0] == "whole":
                for t in range(2, single_k + 1):
                    th = thresholds.get((pool[1], t))
                    if th is not None:
                        row_entries.append((th[0], col, float(single_k)))
                        row_entries.append((th[0] + 1, col, 1.0))
            best = max(best, coef)
        fallback += best * count
    t_col = -1
    if fair:
        t_col = len(col_cost)
        gang_cols.append(False)
        col_cost.append(-1.0)
        col_ub.append(1.0)
        for ten, i in tenants.items():
            row_entries.append((n_groups + len(pools) + i, t_col, -demands[ten]))
        fallback = 1.0
    n_job_cols = len(col_cost)
    for m in sorted(patterns):
        counts, by_c = patterns[m]
        for c in sorted(counts):
            for pat in by_c[c]:
                col = len(col_cost)
                col_cost.append(0.0)
                col_ub.append(float(counts[c]))
                row_entries.append((node_rows[(m, c)], col, 1.0))
                for k in set(pat):
                    row_entries.append((gang_rows[(m, k)], col, -float(pat.count(k))))
    n_rows = next_row
    lower = np.full(n_rows, -highspy.kHighsInf)
    upper = np.full(n_rows, highspy.kHighsInf)
    for row, mem_total in mem_rows.values():
        upper[row] = mem_total
    for row, gpus, count in thresholds.values():
        upper[row] = gpus
        upper[row + 1] = count
    for m, row in whole_rows.items():
        upper[row] = whole_cap[m]
    for (m, c), row in node_rows.items():
        upper[row] = patterns[m][0][c]
    for row in gang_rows.values():
        upper[row] = 0.0
    for gi, (count, fixed) in enumerate(groups.values()):
        upper[gi] = count
        if fixed:
            lower[gi] = fixed
    for p, i in pools.items():
        upper[n_groups + i] = cap[p]
    if fair:
        lower[n_groups + len(pools):base] = 0.0
    h = new_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", max(0.05, time_limit_s))
    n_cols = len(col_cost)
    if n_cols == 0:
        return 0.0, []
    h.addVars(n_cols, np.zeros(n_cols), np.array(col_ub))
    h.changeColsCost(n_cols, np.arange(n_cols, dtype=np.int32), np.array(col_cost))
    row_entries.sort()
    rows = np.array([r for r, _, _ in row_entries], dtype=np.int64)
    starts = np.searchsorted(rows, np.arange(n_rows)).astype(np.int32)
    idx = np.array([c for _, c, _ in row_entries], dtype=np.int32)
    vals = np.array([v for _, _, v in row_entries], dtype=np.float64)
    h.addRows(n_rows, lower, upper, len(idx), starts, idx, vals)
    t0 = time.perf_counter()
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    if status != highspy.HighsModelStatus.kOptimal:
        log.info("bound LP not solved (%s); using the capacity-free bound", status)
        return fallback, None
    value = float(-h.getInfo().objective_function_value)
    values = list(h.getSolution().col_value)
    gangs = [c for c in range(n_job_cols) if gang_cols[c]
             and abs(values[c] - round(values[c])) > 1e-6]
    left = time_limit_s - (time.perf_counter() - t0)
    if gangs and not fair and left > 0.05:
        # Gang counts are integers in every plan: re-solve with them integral (HiGHS
        # MIP, warm from the LP). Its incumbent gives targets a plan can follow (the
        # LP's fractional gangs round down and lose their value), its dual bound a
        # tighter valid bound.
        ints = np.array([c for c in range(n_job_cols) if gang_cols[c]], dtype=np.int32)
        h.changeColsIntegrality(len(ints), ints, np.full(
            len(ints), highspy.HighsVarType.kInteger))
        h.setOptionValue("time_limit", max(0.05, min(left, MIP_SHARE * time_limit_s)))
        h.setOptionValue("mip_rel_gap", 1e-3)
        h.run()
        info = h.getInfo()
        if info.primal_solution_status == 2:  # feasible
            values = list(h.getSolution().col_value)
        dual = float(-info.mip_dual_bound)
        if math.isfinite(dual):
            value = min(value, dual)
    return value, values[:n_job_cols]
