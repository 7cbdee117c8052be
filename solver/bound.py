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
  (`single_node`), any domain of one of its required topology levels (v1's `same_domain`
  is the level "domain") or the pool;
- an elastic gang (contract 5.1) has one option per model and allowed size n (columns
  per allowed size: n GPUs of the pool, earning its value on n GPUs), so that every size
  a plan may choose is a point of the LP, priced exactly, whatever the curve's shape (a
  max speedup-per-GPU relaxation would be looser on concave curves and wrong for the
  time-based objectives, whose value is not proportional to n). A running one pays the
  migration cost on every size but its current one, as on every model but its own: its
  GPU set changes. A single-node one's option on n >= 2 GPUs is a single-node gang of
  size n in the node patterns and threshold rows below (`ELASTIC_SINGLE`): it takes n
  GPUs of one node whatever n the plan picks. A fixed (non-preemptible running) one keeps
  its size and, as a fixed gang, stays out of them;
- jobs with identical options (and tenant, for fairness) form a group of n jobs:
  sum of the group's option variables <= n, == n for non-preemptible running jobs;
- objective: each option earns the job's per-job objective value; a running job also
  earns back `preemption_cost` when placed (its constant `-preemption_cost` is added)
  and pays `migration_cost` on another model (its GPU set must change); a move within
  its model is not seen (the cost is >= 0, so the bound stays valid), nor are topology
  costs (contract 5.5: >= 0 as well); required topology levels enter only through that size
  test (a gang fits some domain of each), the LP does not see domains. For `fairness` the LP
  maximises t subject to (placed value of tenant k) >= D_k * t.

Node structure enters in three places: single-node gangs pack into node patterns (per
model and free-GPU count, the maximal multisets of gang sizes that fit; threshold rows
per gang size beyond 3,000 patterns), GPUs holding non-preemptible shares stay shared, and
the GPU memory of each pool is a row. When gang columns come out fractional, the model is
re-solved with them integral (HiGHS MIP, part of the time slice): its dual bound can only
tighten the LP's, and its incumbent gives `Relaxation.targets`, which
heuristics/lp_round.py rounds into a plan. Elastic gangs' columns stay continuous there
when they are more than `MIP_ELASTIC_COLS` (the rounding places those gangs by the
greedy's size rule anyway): on L (20,000 jobs) with 30% of the gangs elastic they made
28,000 of the 50,000 columns integral, against 6,600 of 16,000 without, and the re-solve
took 10 s of CPU for a single fractional column; M has 1,700 of them.

Quota limits (contract 5.3, Q1) are a row family: `quota[k, m]`, the usage of the options
of tenant k and its descendants on key m (each option's `quota`: the job's size on its
model) <= max(limit, what fixed jobs use there); jobs of different tenants then group
apart. Priority classes and the guaranteed usage served are lexicographic levels above the
objective, not constraints: the LP bounds the objective over every plan within the
limits, hence also over the lexicographically best ones.

Every feasible plan maps to a feasible LP point of at least its objective (capacities,
eligibility and gang sizes are relaxations of the contract's constraints), so the LP
optimum is a valid bound for `throughput`, `jct`, `makespan`, `priority_fifo` (whose
feasible set is a subset of `throughput`'s with the same objective) and `fairness`.
Host CPU/memory and MIG geometry are relaxed away. Coefficients are rounded up to a
0.2% geometric grid so that jobs group more (the bound loosens by at most 0.2%). If
HiGHS does not finish in time, the sum of every job's best value (capacity ignored) is
returned instead: still valid, looser.

Co-location interference (contract 5.2) is relaxed to each shared job's largest
achievable factor (`models.rules.colocation_factor_cap`, at least 1): factors can reach 2,
so pricing them at 1 would not bound a plan whose co-residents speed each other up. A job's
value in any plan is its value at factor 1 times its factor, at most times the cap, so the
option earning the capped value keeps every plan's LP point at least its objective.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from models import Gpu, Node, PlanRequest
from models.capacity import CapacitySummary, usable
from models.instance import ClusterState, JobInfo, compile_jobs
from models.objective import objective_value_of, tenant_demands
from models.request import Quota
from models.rules import (
    class_census,
    colocation_factor_cap,
    interference_table,
    job_value,
    mig_profiles_for,
    model_eligible,
    quota_keys,
    quota_usage,
    required_levels,
)
from solver.highs import INF, INFEASIBLE, OPTIMAL, SOLUTION_FEASIBLE, HighsLp, set_integral

log = logging.getLogger(__name__)

#: Relative and absolute safety margins added to the LP optimum (solver tolerances).
_REL_MARGIN = 1e-7
_ABS_MARGIN = 1e-6

#: Relative grid on which objective coefficients are rounded up before grouping.
_GRID = 0.002
_LOG_GRID = math.log1p(_GRID)

Pool = tuple[str, str]  # ("whole" | "mig", model)


class Option(NamedTuple):
    """One way to place a job: on `pool`, taking `amount` of it (GPUs, a fraction, or
    the compute share of its smallest MIG profile), earning `coef` in the objective (and
    `thr` of its tenant's throughput, for fairness), using `mem` GiB of GPU memory;
    `whole`: whole GPUs."""

    pool: Pool
    amount: float
    coef: float
    thr: float
    mem: float
    whole: bool
    #: the usage it adds to its tenants' quota keys (0 without quotas)
    quota: float = 0.0


class GroupKey(NamedTuple):
    """What makes jobs identical in the relaxation: their options, their tenant (for
    fairness), whether they are fixed (non-preemptible and running) and, for single-node
    gangs, their size (0 otherwise; negative for an elastic gang: `ELASTIC_SINGLE` for
    a single-node one, whose options' sizes differ (`gang_size`), `ELASTIC_SPREAD`
    otherwise)."""

    options: tuple[Option, ...]
    tenant: str
    fixed: bool
    single_k: int


#: `GroupKey.single_k` of an elastic single-node gang: each option on n >= 2 whole GPUs is a
#: single-node gang of size n.
ELASTIC_SINGLE = -1
#: `GroupKey.single_k` of an elastic gang that may span nodes.
ELASTIC_SPREAD = -2


def gang_size(single_k: int, opt: Option) -> int:
    """The single-node gang size of option `opt` of a group (`GroupKey.single_k`): the
    group's size, an elastic gang's option's own size on whole GPUs (1 is not a gang), or
    0 when the option does not pack into node patterns."""
    if single_k == ELASTIC_SINGLE:
        k = round(opt.amount) if opt.pool[0] == "whole" else 0
        return k if k >= 2 else 0
    return single_k if single_k >= 2 else 0


@dataclass
class GroupCount:
    """How many jobs a group has, and how many of them are fixed (must stay placed)."""

    count: int = 0
    fixed: int = 0


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
    #: the counted GPUs per node, domain and topology level (`models.capacity`)
    summary: CapacitySummary
    #: (level, model) -> `most_in_one`, as asked (each answer is a pass over the domains:
    #: L with 30% elastic gangs asked 2,200 times, 0.4 s)
    _most: dict[tuple[str, str], int] = field(default_factory=dict)

    def most_in_one(self, level: str, model: str) -> int:
        """The most non-MIG GPUs of `model` in one domain of topology level `level`."""
        key = (level, model)
        hit = self._most.get(key)
        if hit is None:
            hit = self._most[key] = self.summary.most_in_one(level, (model, False))
        return hit


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
    return _Capacity(cap, per_node, dom_count, node_free, whole_cap, every)


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
    #: job name -> the GPUs (or amount) of the option the LP gives it, beside `targets`
    #: (an elastic gang's size)
    amounts: dict[str, float] = field(default_factory=dict)


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
    fair = request.policy.objective == "fairness"
    state = ClusterState(request)
    caps = _capacities(state, request)
    grouped = _group_jobs(request, state, caps, fair)
    if grouped is None:
        return None
    groups, members, const = grouped
    mem_cap = {m: state.catalog[m].memory_gib for _, m in caps.cap}
    solved = _solve_lp(groups, caps.cap, caps.node_free, caps.whole_cap,
                       mem_cap, fair,
                       tenant_demands(request) if fair else {},
                       max(0.1, time_limit_s - (time.perf_counter() - t0)),
                       request.cluster.quotas)
    if solved is None:
        return None
    bound, cols = solved
    value = bound if fair else bound + const
    amounts: dict[str, float] = {}
    return Relaxation(value + _REL_MARGIN * abs(value) + _ABS_MARGIN,
                      _targets(groups, members, cols, amounts), amounts)


class JobEntry(NamedTuple):
    """One job as the bound LP sees it: its options per model (empty: it can never be
    placed), whether it is fixed where it runs, and its gang size when it packs into node
    patterns (a whole-GPU single-node gang of one size), else 0."""

    info: JobInfo
    options: dict[str, Option]
    fixed: bool
    single_k: int


def job_entries(request: PlanRequest, state: ClusterState, caps: _Capacity, fair: bool
                ) -> list[JobEntry] | None:
    """Every job's entry (options raised by its co-location factor cap, module doc); None
    when a fixed job has no option (the relaxation is infeasible). The grouping of this
    module and of solver/level_bound.py both start here."""
    table = interference_table(request.interference)
    census = class_census(request.jobs) if table else {}
    out: list[JobEntry] = []
    for info in compile_jobs(request):
        job = info.job
        cap = (colocation_factor_cap(job, census, table)
               if table and job.colocation_class is not None else 1.0)
        options = _job_options(info, request, state, caps, fair, cap)
        fixed = bool(job.current and not job.preemptible)
        if not options and fixed:
            return None
        single_k = 0
        if info.elastic:
            single_k = ELASTIC_SINGLE if job.single_node else ELASTIC_SPREAD
        elif info.shape == "whole" and job.single_node:
            single_k = info.gpus
        out.append(JobEntry(info, options, fixed, single_k))
    return out


def _group_jobs(request: PlanRequest, state: ClusterState, caps: _Capacity, fair: bool
                ) -> tuple[dict[GroupKey, GroupCount], dict[GroupKey, list[str]], float] | None:
    """The jobs grouped by `GroupKey` (counts, member names) and the objective's constant
    (`-preemption_cost` per running job); None when a fixed job has no option."""
    entries = job_entries(request, state, caps, fair)
    if entries is None:
        return None
    pre_cost = 0.0 if fair else request.policy.preemption_cost
    const = -pre_cost * sum(1 for e in entries if e.info.job.current)
    groups: dict[GroupKey, GroupCount] = {}
    members: dict[GroupKey, list[str]] = {}
    split = fair or bool(request.cluster.quotas)
    for e in entries:
        if not e.options:
            continue
        key = GroupKey(tuple(sorted(e.options.values())),
                       e.info.job.tenant if split else "", e.fixed, e.single_k)
        slot = groups.setdefault(key, GroupCount())
        members.setdefault(key, []).append(e.info.name)
        slot.count += 1
        if e.fixed:
            slot.fixed += 1
    return groups, members, const


def _job_options(info: JobInfo, request: PlanRequest, state: ClusterState,
                 caps: _Capacity, fair: bool, factor_cap: float = 1.0) -> dict[str, Option]:
    """Per model, the job's option (module doc): eligible models, plus the current one
    of a running job (only that one if it is fixed), where the job can ever fit. Its
    value is raised by `factor_cap`, the job's co-location factor cap (module doc)."""
    job = info.job
    models = set(info.values)
    cur_model = None
    if job.current:
        cur_model = state.model_of(job.current)
        models.add(cur_model)
    if job.current and not job.preemptible:
        models = {cur_model} if cur_model is not None else set()
    # elastic gangs: one option per allowed size (a fixed running one keeps its size)
    sizes: list[int | None] = [None]
    if info.elastic:
        sizes = [info.gpus] if job.current and not job.preemptible else list(info.sizes)
    options: dict[str, Option] = {}
    for m in sorted(models):
        spec = state.catalog[m]
        grandfathered = m == cur_model
        if not grandfathered and not model_eligible(job, m, spec):
            continue
        for n in sizes:
            key = m if n is None else f"{m}:{n}"
            opt = _option(info, m, n, grandfathered, state, caps, request, fair, factor_cap)
            if opt is not None:
                options[key] = opt
    return options


def _option(info: JobInfo, m: str, n: int | None, grandfathered: bool, state: ClusterState,
            caps: _Capacity, request: PlanRequest, fair: bool,
            factor_cap: float = 1.0) -> Option | None:
    """The job's option on model `m` (an elastic gang: on n GPUs of it), None if it never
    fits; its value raised by `factor_cap`, the job's co-location factor cap (module doc)."""
    job = info.job
    policy = request.policy
    pre_cost = 0.0 if fair else policy.preemption_cost
    cur_model = state.model_of(job.current) if job.current else None
    spec = state.catalog[m]
    use = _option_use(info, m, grandfathered, state, caps, n)
    if use is None:
        return None
    pool, amount = use
    if caps.cap.get(pool, 0) <= 0 or amount > caps.cap[pool] + 1e-9:
        return None
    if fair:
        coef = 0.0
        thr = info.values.get(m) if n is None else info.size_values[n].get(m)
        if thr is None:
            thr = job_value(job, m, state.catalog, n)
    else:
        thr = 0.0
        coef_ = info.obj_values.get(m) if n is None else info.size_obj_values[n].get(m)
        coef = coef_ if coef_ is not None else objective_value_of(
            job, m, state.catalog, policy.objective, n)
    if factor_cap != 1.0:
        coef, thr = coef * factor_cap, thr * factor_cap
    if job.current:
        coef += pre_cost
        # placed on another model, or an elastic gang on another size (contract 5.1: its
        # GPU set changes) = migrated
        if (m != cur_model or (n is not None and n != len(job.current))) and not fair:
            coef -= policy.migration_cost
    mem = 0.0
    if pool[0] == "whole" and spec.memory_gib is not None:
        mem = (amount * spec.memory_gib if info.shape == "whole"
               else min(info.gpu_mem, spec.memory_gib))
    quota = quota_usage(job, spec, n) if request.cluster.quotas else 0.0
    return Option(pool, amount, _round_up(coef), _round_up(thr), mem, info.shape == "whole",
                  quota)


def _option_use(info: JobInfo, m: str, grandfathered: bool, state: ClusterState,
                caps: _Capacity, n: int | None = None) -> tuple[Pool, float] | None:
    """The pool and amount of it the job takes on model `m` (an elastic gang: on n GPUs);
    None if it never fits (no MIG profile covers it, or a gang larger than any node,
    domain or the pool)."""
    job = info.job
    spec = state.catalog[m]
    if info.shape == "mig":
        profs = mig_profiles_for(job, spec)
        if grandfathered and job.current and job.current[0].mig is not None:
            cur = spec.profile(job.current[0].mig.profile)
            profs = [*profs, cur] if cur is not None else profs
        if not profs:
            return None
        return ("mig", m), min(p.compute_slices for p in profs) / spec.compute_slices
    pool: Pool = ("whole", m)
    gpus = info.gpus if n is None else n
    amount = float(gpus) if info.shape == "whole" else info.share
    if grandfathered and info.shape == "share" and job.current:
        amount = min(amount, job.current[0].fraction or amount)
    if info.shape == "whole" and not grandfathered:
        levels = required_levels(job)
        if job.single_node:
            limit = caps.per_node.get(m, 0)
        elif levels:
            limit = min(caps.most_in_one(lv, m) for lv in levels)
        else:
            limit = caps.cap.get(pool, 0)
        if gpus > limit:
            return None
    return pool, amount


def _targets(groups: dict[GroupKey, GroupCount], members: dict[GroupKey, list[str]],
             cols: list[float] | None, amounts: dict[str, float] | None = None
             ) -> dict[str, str]:
    """Per group, hand the integer part of each option's LP count to the group's jobs
    (options of higher objective coefficient first, jobs in request order); `amounts`
    gets each such job's option amount (an elastic gang's size)."""
    if cols is None:
        return {}
    out: dict[str, str] = {}
    col = 0
    for key in groups:
        opts = []
        for opt in key.options:
            opts.append((opt.coef, opt.pool[1], cols[col], opt.amount))
            col += 1
        names = iter(members[key])
        for _coef, model, x, amount in sorted(opts, key=lambda o: (-o[0], o[1])):
            for _ in range(math.floor(x + 1e-6)):
                name = next(names, None)
                if name is None:
                    break
                out[name] = model
                if amounts is not None:
                    amounts[name] = amount
    return out


#: Share of the bound's time limit the integer re-solve (gang counts integral) may use.
MIP_SHARE = 0.5
#: The re-solve runs only when its slice is worth this many LP solves: HiGHS's MIP repeats
#: the LP and presolves before it looks at its clock (on L, a 0.44 s limit took 0.98 s),
#: so a shorter slice overruns the bound's limit and leaves the rounding no time.
MIP_MIN_LPS = 2.0

#: Most elastic gang columns made integral in the re-solve; beyond, they stay continuous.
MIP_ELASTIC_COLS = 10_000

#: Most node patterns per model; beyond, the threshold rows stand in for them.
MAX_PATTERNS = 3000

#: model -> (number of nodes with c free GPUs, per c the maximal gang-size multisets)
Patterns = dict[str, tuple[dict[int, int], dict[int, list[tuple[int, ...]]]]]


def _node_patterns(groups: dict[GroupKey, GroupCount], node_free: dict[str, list[int]]
                   ) -> Patterns:
    """Per model with single-node gangs: the number of nodes with c free GPUs, and for each
    c the maximal multisets of gang sizes (>= 2) that fit in c GPUs. A plan puts on each
    node a multiset of gangs that fits its free GPUs, contained in a maximal one, so the
    LP over node patterns (Gilmore-Gomory) is a relaxation, and a much tighter one than
    per-size thresholds when gangs of several sizes compete for nodes. Models whose
    enumeration passes `MAX_PATTERNS` keep the threshold rows."""
    sizes: dict[str, set[int]] = {}
    for opts, _tenant, fixed_group, single_k in groups:
        if single_k != 0 and not fixed_group:
            for opt in opts:
                k = gang_size(single_k, opt)
                if opt.pool[0] == "whole" and k:
                    sizes.setdefault(opt.pool[1], set()).add(k)
    out: Patterns = {}
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


# ---------------------------------------------------------------------- the bound LP
#
#     maximise   sum_{G, o} coef(o) x[G, o]                 (or t, for fairness)
#     group[G]:        fixed(G) <= sum_o x[G, o] <= |G|
#     pool[P]:         sum amount(o) x[G, o] <= cap(P)       (options o on pool P)
#     tenant[k]:       sum thr(o) x[G, o] - D_k t >= 0       (fairness: groups of tenant k)
#     gpu_memory[P]:   sum mem(o) x[G, o] <= cap(P) * M      (non-MIG pools of known memory)
#     gang_gpus[m, t]: sum_{k >= t} k x[G_k, o] <= GPUs of nodes with >= t free
#     gang_count[m,t]: sum_{k >= t} x[G_k, o] <= sum_n floor(free_n / t)
#                      (single-node gangs of size k on m, models without node patterns)
#     whole_gpus[m]:   sum_{whole o on m} amount(o) x[G, o] <= GPUs not pinned to shares
#     nodes[m, c]:     sum_{patterns q of c} z[m, c, q] <= nodes of m with c free GPUs
#     pattern_gangs[m, k]: sum x[G_k, o] - sum_q count(q, k) z[m, c, q] <= 0


def _solve_lp(groups: dict[GroupKey, GroupCount], cap: dict[Pool, int],
              node_free: dict[str, list[int]], whole_cap: dict[str, int],
              mem_cap: dict[str, float | None], fair: bool,
              demands: dict[str, float], time_limit_s: float,
              quotas: dict[str, Quota] | None = None
              ) -> tuple[float, list[float] | None] | None:
    """max sum coef x (or t for fairness) over the aggregated model (the LP above) and the
    optimal column values of its job columns (None with the capacity-free fallback);
    None if infeasible."""
    patterns = _node_patterns(groups, node_free)
    lp = HighsLp()
    _declare_rows(lp, groups, cap, node_free, whole_cap, mem_cap, fair, demands, patterns)
    if quotas:
        _declare_quota_rows(lp, groups, quotas)
    gang_cols, fallback = _job_columns(lp, groups, fair, patterns, quotas or {})
    if fair:
        t = lp.add_col(-1.0, hi=1.0)
        gang_cols.append(False)
        for ten in sorted(demands):
            lp.entry("tenant", ten, t, -demands[ten])
        fallback = 1.0
    n_job_cols = lp.num_cols
    _pattern_columns(lp, patterns)
    if lp.num_cols == 0:
        return 0.0, []
    return _run(lp, gang_cols, n_job_cols, fallback, fair, time_limit_s)


def _declare_rows(lp: HighsLp, groups: dict[GroupKey, GroupCount], cap: dict[Pool, int],
                  node_free: dict[str, list[int]], whole_cap: dict[str, int],
                  mem_cap: dict[str, float | None], fair: bool, demands: dict[str, float],
                  patterns: Patterns) -> None:
    """The rows of the bound LP with their bounds, family by family (HighsLp numbers them
    in this order)."""
    for gi, slot in enumerate(groups.values()):
        lp.add_row("group", gi, lo=slot.fixed if slot.fixed else -INF, hi=slot.count)
    for p in sorted(cap):
        lp.add_row("pool", p, hi=cap[p])
    if fair:
        for ten in sorted(demands):
            lp.add_row("tenant", ten, lo=0.0)
    for p in sorted(cap):
        if p[0] == "whole" and mem_cap.get(p[1]) is not None:
            # lo = 0 with fairness: never binding (memory use is >= 0), kept as it was
            lp.add_row("gpu_memory", p, lo=0.0 if fair else -INF,
                       hi=cap[p] * (mem_cap[p[1]] or 0.0))
    # Single-node gangs of k >= t GPUs on model m only fit nodes with >= t free GPUs:
    # sum k x <= sum of c_n over nodes with c_n >= t, and #gangs <= sum floor(c_n / t).
    for m in sorted(node_free):
        if m in patterns:
            continue
        for t in range(2, max(node_free[m], default=0) + 1):
            lp.add_row("gang_gpus", (m, t), hi=sum(c for c in node_free[m] if c >= t))
            lp.add_row("gang_count", (m, t), hi=sum(c // t for c in node_free[m]))
    # GPUs for whole jobs where non-preemptible shares keep some GPUs shared.
    for m in sorted(whole_cap):
        lp.add_row("whole_gpus", m, hi=whole_cap[m])
    # Node patterns: per model, one row per free-GPU count c (nodes using a pattern <= the
    # nodes with c free) and one per gang size k (gangs of k <= k-slots of the patterns).
    for m in sorted(patterns):
        counts, by_c = patterns[m]
        for c in sorted(counts):
            lp.add_row("nodes", (m, c), hi=counts[c])
        for k in sorted({k for pats in by_c.values() for pat in pats for k in pat}):
            lp.add_row("pattern_gangs", (m, k), hi=0.0)


def _declare_quota_rows(lp: HighsLp, groups: dict[GroupKey, GroupCount],
                        quotas: dict[str, Quota]) -> None:
    """quota[k, m] (module doc), after every other family: its bound is the limit, or what
    the fixed (non-preemptible running) jobs already use there when that is more."""
    fixed: dict[tuple[str, str], float] = {}
    for key, slot in groups.items():
        if slot.fixed:
            for opt in key.options:
                for qk in quota_keys(quotas, key.tenant, opt.pool[1]):
                    fixed[qk] = fixed.get(qk, 0.0) + opt.quota * slot.fixed
    for t in sorted(quotas):
        for k in sorted(quotas[t].limit):
            lp.add_row("quota", (t, k), hi=max(quotas[t].limit[k], fixed.get((t, k), 0.0)))


def _job_columns(lp: HighsLp, groups: dict[GroupKey, GroupCount], fair: bool,
                 patterns: Patterns, quotas: dict[str, Quota] | None = None
                 ) -> tuple[list[bool], float]:
    """x[G, o] per group and option, in order: whether each is a gang column (whole,
    >= 2 GPUs; an elastic gang's only while there are at most `MIP_ELASTIC_COLS` of them,
    module doc), and the capacity-free fallback bound (each job's best value)."""
    gang_cols: list[bool] = []
    elastic: list[int] = []
    fallback = 0.0
    for gi, (key, slot) in enumerate(groups.items()):
        best = 0.0
        for opt in key.options:
            model = opt.pool[1]
            k = 0 if key.fixed else gang_size(key.single_k, opt)
            single_gang = k >= 2
            on_patterns = single_gang and opt.pool[0] == "whole" and model in patterns
            # no node has room for the gang: the option is unusable
            usable = not on_patterns or lp.has_row("pattern_gangs", (model, k))
            col = lp.add_col(-opt.coef, hi=float(slot.count) if usable else 0.0)
            gang_cols.append(opt.whole and opt.amount >= 2)
            if gang_cols[-1] and key.single_k < 0:
                elastic.append(len(gang_cols) - 1)
            lp.entry("group", gi, col, 1.0)
            lp.entry("pool", opt.pool, col, opt.amount)
            if opt.mem > 0 and lp.has_row("gpu_memory", opt.pool):
                lp.entry("gpu_memory", opt.pool, col, opt.mem)
            if opt.whole and opt.pool[0] == "whole" and lp.has_row("whole_gpus", model):
                lp.entry("whole_gpus", model, col, opt.amount)
            if fair and lp.has_row("tenant", key.tenant):
                lp.entry("tenant", key.tenant, col, opt.thr)
            for qk in quota_keys(quotas, key.tenant, model) if quotas else ():
                if lp.has_row("quota", qk):
                    lp.entry("quota", qk, col, opt.quota)
            if on_patterns and usable:
                lp.entry("pattern_gangs", (model, k), col, 1.0)
            elif single_gang and opt.pool[0] == "whole" and not on_patterns:
                for t in range(2, k + 1):
                    if lp.has_row("gang_gpus", (model, t)):
                        lp.entry("gang_gpus", (model, t), col, float(k))
                        lp.entry("gang_count", (model, t), col, 1.0)
            best = max(best, opt.coef)
        fallback += best * slot.count
    if len(elastic) > MIP_ELASTIC_COLS:
        for c in elastic:
            gang_cols[c] = False
    return gang_cols, fallback


def _pattern_columns(lp: HighsLp, patterns: Patterns) -> None:
    """z[m, c, q] per model, free-GPU count and pattern: nodes of m with c free GPUs that
    host the gangs of pattern q."""
    for m in sorted(patterns):
        counts, by_c = patterns[m]
        for c in sorted(counts):
            for pat in by_c[c]:
                col = lp.add_col(0.0, hi=float(counts[c]))
                lp.entry("nodes", (m, c), col, 1.0)
                for k in set(pat):
                    lp.entry("pattern_gangs", (m, k), col, -float(pat.count(k)))


def _run(lp: HighsLp, gang_cols: list[bool], n_job_cols: int, fallback: float, fair: bool,
         time_limit_s: float) -> tuple[float, list[float] | None] | None:
    """Solve the bound LP; re-solve with gang columns integral when they come out
    fractional and time is left (module doc). (value, job column values), the fallback
    without a solution, None if infeasible."""
    h = lp.to_highs()
    h.setOptionValue("time_limit", max(0.05, time_limit_s))
    t0 = time.perf_counter()
    h.run()
    status = h.getModelStatus()
    if status == INFEASIBLE:
        return None
    if status != OPTIMAL:
        log.info("bound LP not solved (%s); using the capacity-free bound", status)
        return fallback, None
    value = float(-h.getInfo().objective_function_value)
    values = list(h.getSolution().col_value)
    gangs = [c for c in range(n_job_cols) if gang_cols[c]
             and abs(values[c] - round(values[c])) > 1e-6]
    lp_s = time.perf_counter() - t0
    left = time_limit_s - lp_s
    if gangs and not fair and min(left, MIP_SHARE * time_limit_s) > MIP_MIN_LPS * lp_s:
        # Gang counts are integers in every plan: re-solve with them integral (HiGHS
        # MIP, warm from the LP). Its incumbent gives targets a plan can follow (the
        # LP's fractional gangs round down and lose their value), its dual bound a
        # tighter valid bound.
        set_integral(h, [c for c in range(n_job_cols) if gang_cols[c]])
        h.setOptionValue("time_limit", max(0.05, min(left, MIP_SHARE * time_limit_s)))
        h.setOptionValue("mip_rel_gap", 1e-3)
        h.run()
        info = h.getInfo()
        if info.primal_solution_status == SOLUTION_FEASIBLE:
            values = list(h.getSolution().col_value)
        dual = float(-info.mip_dual_bound)
        if math.isfinite(dual):
            value = min(value, dual)
    return value, values[:n_job_cols]
