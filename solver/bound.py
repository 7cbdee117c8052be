"""A proven upper bound on the plan objective for any instance size.

`upper_bound(request)` solves the LP relaxation (HiGHS) of an aggregated model:

- resource pools: per GPU model, its non-MIG GPUs (capacity = their number) and its MIG
  GPUs (capacity = their number, in GPUs of compute). Usable GPUs (healthy, schedulable)
  count, and so do unusable ones that a running job occupies now (only a kept placement
  may use them: a pool holding such GPUs gets a `usable` row, in which every job
  takes its amount less the unusable GPUs it holds now, up to the pool's usable GPUs);
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
  costs (contract 5.5: >= 0 as well); required topology levels enter through that size
  test (a gang fits some domain of each) and the domain rows below. For `fairness` the LP
  maximises t subject to (placed value of tenant k) >= D_k * t.

Domains enter through the size test above and through domain rows: new gangs that must
keep their GPUs in one domain of a level (same_domain, a required topology level) fit,
per level, model and gang size t, only the domains with at least t usable free GPUs, in
number at most sum_d floor(c_d / t) (`_declare_domain_rows`). Without them, the pooled
LP counted L's six same-domain 64-GPU gangs on H100, where no domain has 64 free.

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
1e-5 geometric grid so that float noise does not split groups (the bound loosens by at
most 1e-5; a 0.2% grid cost L 0.11% of its bound for 1% fewer groups). If
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
from collections.abc import Iterable
from dataclasses import dataclass, field
from threading import Event
from typing import NamedTuple

from models import Gpu, Node, PlanRequest
from models.capacity import CapacitySummary, node_domains, usable
from models.catalog import MigProfileSpec
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
from solver.highs import (
    INF,
    INFEASIBLE,
    OPTIMAL,
    SOLUTION_FEASIBLE,
    HighsLp,
    interrupt_on,
    set_integral,
)

log = logging.getLogger(__name__)

#: Relative and absolute safety margins added to the LP optimum (solver tolerances).
_REL_MARGIN = 1e-7
_ABS_MARGIN = 1e-6

#: Relative grid on which objective coefficients are rounded up before grouping.
_GRID = 1e-5
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
    fairness), whether they are fixed (non-preemptible and running), for single-node
    gangs their size (0 otherwise; negative for an elastic gang: `ELASTIC_SINGLE` for
    a single-node one, whose options' sizes differ (`gang_size`), `ELASTIC_SPREAD`
    otherwise) and, for new gangs that may span nodes, the topology levels they must
    keep in one domain of (the domain rows, `_declare_domain_rows`)."""

    options: tuple[Option, ...]
    tenant: str
    fixed: bool
    single_k: int
    levels: tuple[str, ...] = ()
    #: (pool, count) per pool where each of its (running) jobs holds `count` unusable
    #: GPUs (the usable rows, `_usable_entry`)
    stranded: tuple[tuple[Pool, int], ...] = ()


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
    #: (topology level, model) -> each domain's usable non-MIG GPUs not held by a
    #: non-preemptible running job ("domain" is v1's `topology_domain`)
    domain_free: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    #: the unusable GPUs (node, index) a running job holds -> their pool: counted in
    #: `cap`, but only that job, kept there, can use them
    stranded: dict[tuple[str, int], Pool] = field(default_factory=dict)
    #: pool holding such GPUs -> its usable GPUs
    usable_cap: dict[Pool, int] = field(default_factory=dict)
    #: (level, model) -> the most counted non-MIG GPUs in one domain (`_most_in_one`)
    most_in: dict[tuple[str, str], int] = field(default_factory=dict)


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
    stranded: dict[tuple[str, int], Pool] = {}
    for key in occupied:
        gid = state.gid_of.get(key)
        if gid is not None and not state.gpus[gid].usable:
            g = state.gpus[gid]
            stranded[key] = ("mig" if g.mig else "whole", g.model)
    usable_cap = {p: cap[p] - sum(1 for q in stranded.values() if q == p)
                  for p in set(stranded.values())}
    return _Capacity(cap, per_node, dom_count, node_free, whole_cap, every,
                     _domain_free(request, free, stranded.keys() - held), stranded,
                     usable_cap)


def _domain_free(request: PlanRequest, free: CapacitySummary,
                 unusable: Iterable[tuple[str, int]]) -> dict[tuple[str, str], list[int]]:
    """`_Capacity.domain_free`: per topology level and model, each domain's usable
    non-MIG GPUs not held by a non-preemptible running job (the GPUs a new gang may take;
    the domain rows count new gangs only): `free`'s counts (GPUs counted and not held)
    less the `unusable` ones among them (occupied by preemptible running jobs)."""
    by_level: dict[tuple[str, str, tuple[str, bool]], int] = {
        ("domain", d, pool): c for (d, pool), c in free.domains.items()}
    by_level.update(free.level_domains)
    nodes = {n.name: n for n in request.cluster.nodes}
    listed = request.cluster.topology_levels
    for name, index in unusable:
        node = nodes[name]
        gpu = next(g for g in node.gpus if g.index == index)
        doms = node_domains(node, listed)
        for level in ("domain", *listed):
            by_level[(level, doms[level], (gpu.model, gpu.mig_enabled))] -= 1
    out: dict[tuple[str, str], list[int]] = {}
    for (level, _d, (m, mig)), c in by_level.items():
        if not mig:
            out.setdefault((level, m), []).append(c)
    return out


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
    #: with `relax(also_nearest=True)`: the targets of each LP count rounded to the
    #: nearest integer (`_targets_by_lift`), and their amounts, beside `targets`; the
    #: LP's own counts, also when the integer re-solve gave `targets` (`relax`)
    nearest: dict[str, str] = field(default_factory=dict)
    nearest_amounts: dict[str, float] = field(default_factory=dict)
    #: ... and, when the integer re-solve gave `targets`, its counts rounded to the
    #: nearest integer (empty otherwise)
    resolved_nearest: dict[str, str] = field(default_factory=dict)
    resolved_nearest_amounts: dict[str, float] = field(default_factory=dict)


def upper_bound(request: PlanRequest, *, time_limit_s: float = 2.0) -> float | None:
    """A proven upper bound on `request`'s objective (module doc); None if the hard
    constraints alone are infeasible in the relaxation (non-preemptible jobs overflow)."""
    rel = relax(request, time_limit_s=time_limit_s)
    return None if rel is None else rel.bound


def relax(request: PlanRequest, *, time_limit_s: float = 2.0, nearest: bool = False,
          also_nearest: bool = False, deadline: float | None = None, resolve: bool = True,
          stop: Event | None = None) -> Relaxation | None:
    """The aggregated LP relaxation of `request`: its bound (as `upper_bound`) and the
    integer part of its solution as per-job target models (see `heuristics/lp_round.py`,
    which rounds it into a plan); with `nearest`, each LP count rounded to the nearest
    integer instead (`_targets_by_lift`); with `also_nearest`, those in `Relaxation.nearest` as
    well; None if the relaxation is infeasible. Past `deadline` (a `time.monotonic()`
    instant; its Python part looks at it between stages and every `_LATE_EVERY` jobs,
    HiGHS is given no more than what is left) it stops: `CUT` (no bound, no targets); so
    it does once `stop` is set (HiGHS is interrupted then too). `resolve=False`: never
    the integer re-solve (`_run`), whose start and result depend on the wall clock
    (deterministic mode)."""
    t0 = time.perf_counter()
    until = Until(deadline, stop) if deadline is not None or stop is not None else None
    fair = request.policy.objective == "fairness"
    state = ClusterState(request)
    caps = _capacities(state, request)
    try:
        _check(until)
        grouped = _group_jobs(request, state, caps, fair, until)
        if grouped is None:
            return None
        groups, members, const = grouped
        mem_cap = {m: state.catalog[m].memory_gib for _, m in caps.cap}
        limit = max(0.1, time_limit_s - (time.perf_counter() - t0))
        solved = _solve_lp(groups, caps.cap, caps.node_free, caps.whole_cap,
                           mem_cap, fair,
                           tenant_demands(request) if fair else {},
                           limit, request.cluster.quotas, caps, until, resolve)
    except _Cut:
        return CUT
    if solved is None:
        return None
    bound, cols, lp_cols = solved
    if cols is None and _late(until):
        return CUT   # cut, not unsolved: the quick bound is the better stand-in
    value = bound if fair else bound + const
    # the nearest counts come from the LP's own values even when the integer re-solve
    # replaced them (`_run`): on M (1,024 GPUs / 1,500 jobs) seed 2 those of the
    # re-solve rounded to 1.35% below the bound, the LP's to 0.09% (seed 0: 0.21% and
    # 0.11%), while the re-solve's integer parts are the better ones on seed 1
    # (0.38-0.40% against 0.60%): the first two roundings then look at two different
    # solutions; the re-solve's nearest counts are kept too (seed 1 at 5 s: 0.32%)
    lifts = (NEAREST_LIFT if nearest else FLOOR_LIFT,) + ((NEAREST_LIFT,) if also_nearest
                                                         else ())
    made = _targets_by_lift(groups, members, cols, lifts)
    targets, amounts = made[0]
    near, near_amounts = made[1] if also_nearest else ({}, {})
    resolved: tuple[dict[str, str], dict[str, float]] = ({}, {})
    if also_nearest and lp_cols is not cols:
        resolved = near, near_amounts
        near, near_amounts = _targets_by_lift(groups, members, lp_cols, (NEAREST_LIFT,))[0]
    return Relaxation(value + _REL_MARGIN * abs(value) + _ABS_MARGIN, targets, amounts,
                      near, near_amounts, *resolved)


#: `_targets_by_lift`: an LP count's integer part (up from its float noise), or its nearest integer.
FLOOR_LIFT = 1e-6
NEAREST_LIFT = 0.5
#: What `relax` returns when its deadline cut it: no bound (infinite), no targets.
CUT = Relaxation(math.inf)
#: How often (in jobs) `relax` looks at its deadline while it reads the jobs.
_LATE_EVERY = 128


class _Cut(Exception):
    """`relax`'s deadline passed (or its stop was set) while it built the LP."""


class Until(NamedTuple):
    """When `relax` stops: past `deadline` (a `time.monotonic()` instant; None: never) or
    once `stop` is set (None: never)."""

    deadline: float | None
    stop: Event | None = None

    def passed(self) -> bool:
        """Whether it is time to stop."""
        return (self.deadline is not None and time.monotonic() >= self.deadline) or \
            (self.stop is not None and self.stop.is_set())


def _late(until: Until | None) -> bool:
    """Whether `until` (None: never) has come."""
    return until is not None and until.passed()


def _check(until: Until | None) -> None:
    """Raise `_Cut` when `until` has come."""
    if _late(until):
        raise _Cut


class JobEntry(NamedTuple):
    """One job as the bound LP sees it: its options per model (empty: it can never be
    placed), whether it is fixed where it runs, and its gang size when it packs into node
    patterns (a whole-GPU single-node gang of one size), else 0."""

    info: JobInfo
    options: dict[str, Option]
    fixed: bool
    single_k: int
    #: the levels of its domain rows (`_domain_levels`)
    levels: tuple[str, ...] = ()
    #: the unusable GPUs it holds, per pool (`GroupKey.stranded`)
    stranded: tuple[tuple[Pool, int], ...] = ()


def job_entries(request: PlanRequest, state: ClusterState, caps: _Capacity, fair: bool,
                until: Until | None = None) -> list[JobEntry] | None:
    """Every job's entry (options raised by its co-location factor cap, module doc); None
    when a fixed job has no option (the relaxation is infeasible). Once `until` comes
    (looked at every `_LATE_EVERY` jobs) it raises `_Cut`. The grouping of this module and
    of solver/level_bound.py both start here."""
    table = interference_table(request.interference)
    census = class_census(request.jobs) if table else {}
    out: list[JobEntry] = []
    alike: dict[tuple[object, ...], dict[str, Option]] = {}
    for n, info in enumerate(compile_jobs(request)):
        if until is not None and n % _LATE_EVERY == _LATE_EVERY - 1:
            _check(until)
        job = info.job
        cap = (colocation_factor_cap(job, census, table)
               if table and job.colocation_class is not None else 1.0)
        key = _options_key(info, request, fair, cap)
        options = alike.get(key) if key is not None else None
        if options is None:
            options = _job_options(info, request, state, caps, fair, cap)
            if key is not None:
                alike[key] = options
        fixed = info.pinned
        if not options and fixed:
            return None
        single_k = 0
        if info.elastic:
            single_k = ELASTIC_SINGLE if job.single_node else ELASTIC_SPREAD
        elif info.shape == "whole" and job.single_node:
            single_k = info.gpus
        held_pools = [caps.stranded[(p.node, p.gpu)] for p in job.current or ()
                      if (p.node, p.gpu) in caps.stranded]
        stranded = tuple(sorted((q, held_pools.count(q)) for q in set(held_pools)))
        out.append(JobEntry(info, options, fixed, single_k,
                            _domain_levels(info, request, state, stranded), stranded))
    return out


def _options_key(info: JobInfo, request: PlanRequest, fair: bool, factor_cap: float
                 ) -> tuple[object, ...] | None:
    """What a new (not running), non-elastic job's options depend on, without quotas
    (whose usage is per job): jobs with equal keys share one options dict (L: about half
    the jobs are new, of a few hundred kinds); None for the others."""
    if info.current or info.elastic or request.cluster.quotas:
        return None
    job = info.job
    values = info.values if fair else info.obj_values
    return (info.shape, info.gpus, info.share, info.gpu_mem, job.single_node,
            required_levels(job), tuple(sorted(values.items())),
            tuple(sorted((m, p[0]) for m, p in info.profiles.items() if p)), factor_cap)


def _domain_levels(info: JobInfo, request: PlanRequest, state: ClusterState,
                   stranded: tuple[tuple[Pool, int], ...]) -> tuple[str, ...]:
    """The topology levels whose domain rows a job's gang columns enter: the required
    levels of a whole-GPU gang that may span nodes (a single-node gang is in the node
    rows). A running one enters only when it is preemptible (a non-preemptible one holds
    its GPUs, which the rows do not count) and its current placement (which a plan may
    keep, grandfathered, contract 5.5) is itself in one domain of each, on usable GPUs: a
    kept placement counts in that domain's GPUs like a new one."""
    job = info.job
    if info.shape != "whole" or job.single_node:
        return ()
    levels = tuple(lv for lv in required_levels(job) if lv != "host")
    if not levels or not job.current:
        return levels
    if stranded or not job.preemptible:
        # a non-preemptible one holds its GPUs, which the domain rows do not count
        return ()
    nodes = {p.node for p in job.current}
    listed = request.cluster.topology_levels
    spans = {lv: {node_domains(request.cluster.nodes[state.node_of[n]], listed)[lv]
                  for n in nodes if n in state.node_of} for lv in levels}
    return levels if all(len(d) == 1 for d in spans.values()) else ()


def _group_jobs(request: PlanRequest, state: ClusterState, caps: _Capacity, fair: bool,
                until: Until | None = None
                ) -> tuple[dict[GroupKey, GroupCount], dict[GroupKey, list[str]], float] | None:
    """The jobs grouped by `GroupKey` (counts, member names) and the objective's constant
    (`-preemption_cost` per running job); None when a fixed job has no option. Once
    `until` comes it raises `_Cut` (`job_entries`)."""
    entries = job_entries(request, state, caps, fair, until)
    if entries is None:
        return None
    pre_cost = 0.0 if fair else request.policy.preemption_cost
    const = -pre_cost * sum(1 for e in entries if e.info.job.current)
    groups: dict[GroupKey, GroupCount] = {}
    members: dict[GroupKey, list[str]] = {}
    split = fair or bool(request.cluster.quotas)
    #: id(options dict) -> its sorted options (alike jobs share one dict, `_options_key`)
    ordered: dict[int, tuple[Option, ...]] = {}
    for e in entries:
        if not e.options:
            continue
        opts = ordered.get(id(e.options))
        if opts is None:
            opts = ordered[id(e.options)] = tuple(sorted(e.options.values()))
        key = GroupKey(opts, e.info.job.tenant if split else "", e.fixed, e.single_k,
                       e.levels, e.stranded)
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
        # the compiled job's models passed model_eligible already (models/instance.py)
        if not grandfathered and m not in info.values and not model_eligible(job, m, spec):
            continue
        for n in sizes:
            key = m if n is None else f"{m}:{n}"
            opt = _option(info, m, n, cur_model, state, caps, request, fair, factor_cap)
            if opt is not None:
                options[key] = opt
    return options


def _option(info: JobInfo, m: str, n: int | None, cur_model: str | None,
            state: ClusterState, caps: _Capacity, request: PlanRequest, fair: bool,
            factor_cap: float = 1.0) -> Option | None:
    """The job's option on model `m` (an elastic gang: on n GPUs of it; `cur_model`: the
    model a running job runs on), None if it never fits; its value raised by
    `factor_cap`, the job's co-location factor cap (module doc)."""
    job = info.job
    policy = request.policy
    pre_cost = 0.0 if fair else policy.preemption_cost
    spec = state.catalog[m]
    use = _option_use(info, m, m == cur_model, state, caps, n)
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
        # the compiled job's profiles on m (mig_profiles_for, smallest first)
        names = info.profiles.get(m)
        profs: list[MigProfileSpec | None] = (
            [spec.profile(names[0])] if names is not None else [*mig_profiles_for(job, spec)[:1]])
        if grandfathered and job.current and job.current[0].mig is not None:
            profs.append(spec.profile(job.current[0].mig.profile))
        slices = [p.compute_slices for p in profs if p is not None]
        if not slices:
            return None
        return ("mig", m), min(slices) / spec.compute_slices
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
            limit = min(_most_in_one(caps, lv, m) for lv in levels)
        else:
            limit = caps.cap.get(pool, 0)
        if gpus > limit:
            return None
    return pool, amount


def _most_in_one(caps: _Capacity, level: str, model: str) -> int:
    """The most counted non-MIG GPUs of `model` in one domain of `level`
    (`CapacitySummary.most_in_one`, which scans every domain: memoised per request)."""
    key = (level, model)
    hit = caps.most_in.get(key)
    if hit is None:
        hit = caps.most_in[key] = caps.summary.most_in_one(level, (model, False))
    return hit


def _targets_by_lift(groups: dict[GroupKey, GroupCount], members: dict[GroupKey, list[str]],
                     cols: list[float] | None, lifts: tuple[float, ...]
                     ) -> list[tuple[dict[str, str], dict[str, float]]]:
    """Per group, hand each option's LP count rounded up from `lift` (1e-6: its integer
    part; 0.5: the nearest integer) to the group's jobs (options of higher objective
    coefficient first, jobs in request order, as many as the group has), once per lift
    in `lifts`: (job -> model, job -> the option's amount, an elastic gang's size) each,
    the options of each group ordered once for all of them.

    Rounded down, a fractional gang column loses its gang, and the GPUs the LP gave it
    go to smaller jobs by value density; rounded to the nearest, the gang is placed when
    the LP gave it at least half (M sessions, LP without the integer re-solve: the
    rounded plans reached 0.998-1.003 of a cold 5 s solve's value where the integer
    parts gave 0.987-1.000)."""
    outs: list[tuple[dict[str, str], dict[str, float]]] = [({}, {}) for _ in lifts]
    if cols is None:
        return outs
    col = 0
    for key in groups:
        n = len(key.options)
        opts = sorted(((opt.coef, opt.pool[1], cols[col + i], opt.amount)
                       for i, opt in enumerate(key.options)), key=lambda o: (-o[0], o[1]))
        col += n
        names = members[key]
        for lift, (out, amounts) in zip(lifts, outs, strict=True):
            pos = 0
            for _coef, model, x, amount in opts:
                count = math.floor(x + lift)
                if count <= 0:
                    continue
                for name in names[pos:pos + count]:
                    out[name] = model
                    amounts[name] = amount
                pos = min(len(names), pos + count)
    return outs


#: Share of the bound's time limit the integer re-solve (gang counts integral) may use.
MIP_SHARE = 0.5
#: The re-solve runs only when its slice is worth this many LP solves, and its own limit
#: is the slice less `MIP_OVERHEAD_LPS` LP solves: HiGHS's MIP repeats the LP and
#: presolves before it looks at its clock (on L, a 0.44 s limit took 0.98 s, and at load
#: 7 a 0.78 s limit 2.3 s after an LP solve of 0.3-0.4 s), so a shorter slice overruns the
#: bound's limit and leaves the rounding no time. With 8 LP solves M lost it at 2 s (seed
#: 1: 0.60% instead of 0.38-0.39%, the LP's fractional gangs round down); on L it is worth
#: little now (one rounding of its targets 67,714 against 67,661 from the LP's, the bound
#: unchanged) and its slice is too short below about 20 s.
MIP_MIN_LPS = 5.0
MIP_OVERHEAD_LPS = 4.0
#: The integer re-solve's incumbent replaces the LP's values (the rounding's targets) when
#: HiGHS proved it optimal, or else within this share of the LP's value: cut by its
#: limit, HiGHS may hold an early, poor incumbent (L at 5 s: 56,333 against the LP's
#: 74,596 on the bound's sub-model), whose targets rounded to 65,910 where the LP's gave
#: 67,661. On M it ends optimal, within 0.07% of the LP.
MIP_TARGET_GAP = 0.01

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
    for opts, _tenant, fixed_group, single_k, *_ in groups:
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
#     quota[k, m]:     sum quota(o) x[G, o] <= limit            (options of tenant k on m)
#     domain_gpus[L, m, t]: sum_{k >= t} k x[G_k, o] <= sum_{d: c_d >= t} c_d
#     domain_count[L, m, t]: sum_{k >= t} x[G_k, o] <= sum_d floor(c_d / t)
#                      (new gangs of size k that keep to one domain of level L, on m)
#     usable[P]:       sum (amount(o) - unusable(G, P)) x[G, o] <= usable GPUs of P
#                      (unusable(G, P): P's unusable GPUs a job of G holds now; pools
#                      where running jobs hold unusable GPUs)


#: `_solve_lp`'s answer: (value, job column values, the LP's own job column values).
_Solved = tuple[float, list[float] | None, list[float] | None]


def _solve_lp(groups: dict[GroupKey, GroupCount], cap: dict[Pool, int],
              node_free: dict[str, list[int]], whole_cap: dict[str, int],
              mem_cap: dict[str, float | None], fair: bool,
              demands: dict[str, float], time_limit_s: float,
              quotas: dict[str, Quota] | None = None, caps: _Capacity | None = None,
              until: Until | None = None, resolve: bool = True) -> _Solved | None:
    """max sum coef x (or t for fairness) over the aggregated model (the LP above) and the
    optimal column values of its job columns (None with the capacity-free fallback), and
    the LP's own values (`_run`); None if infeasible. `caps` (when given) adds the
    domain and usable rows. Once `until` comes it raises `_Cut` before the solve; HiGHS
    gets at most what is left of its deadline and is interrupted when its stop is set.
    `resolve`: as `relax`'s."""
    patterns = _node_patterns(groups, node_free)
    lp = HighsLp()
    _declare_rows(lp, groups, cap, node_free, whole_cap, mem_cap, fair, demands, patterns)
    if quotas:
        _declare_quota_rows(lp, groups, quotas)
    if caps is not None:
        _declare_domain_rows(lp, groups, caps.domain_free)
        for p in sorted(caps.usable_cap):
            # usable[P]: the jobs not holding P's unusable GPUs use its usable ones only
            lp.add_row("usable", p, hi=caps.usable_cap[p])
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
        return 0.0, [], []
    _check(until)
    if until is not None and until.deadline is not None:
        time_limit_s = min(time_limit_s, until.deadline - time.monotonic())
    return _run(lp, gang_cols, n_job_cols, fallback, fair, time_limit_s, resolve,
                until.stop if until is not None else None)


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


def _declare_domain_rows(lp: HighsLp, groups: dict[GroupKey, GroupCount],
                         domain_free: dict[tuple[str, str], list[int]]) -> None:
    """domain_gpus[L, m, t] and domain_count[L, m, t], after every other family: new
    gangs that must keep their GPUs in one domain of level L (`GroupKey.levels`) and
    take t or more GPUs of model m fit only the domains with at least t free GPUs of m,
    so (c_d: domain d's usable non-MIG GPUs of m not held by non-preemptible running
    jobs)
        sum_{such gangs of size k >= t} k x <= sum_{d: c_d >= t} c_d
        sum_{such gangs of size k >= t} x <= sum_d floor(c_d / t)
    one pair per gang size t present (the rows of the sizes in between are implied).
    The pooled rows let many large same-domain gangs share one model's GPUs spread over
    domains none of which holds them (L: six 64-GPU gangs on H100 where at most a few
    domains have 64 free)."""
    sizes: dict[tuple[str, str], set[int]] = {}
    for key, slot in groups.items():
        if not key.levels or slot.fixed:
            continue
        for opt in key.options:
            if opt.pool[0] == "whole" and opt.amount >= 2:
                for level in key.levels:
                    sizes.setdefault((level, opt.pool[1]), set()).add(round(opt.amount))
    for (level, m), ks in sorted(sizes.items()):
        free = domain_free.get((level, m), [])
        for t in sorted(ks):
            lp.add_row("domain_gpus", (level, m, t), hi=sum(c for c in free if c >= t))
            lp.add_row("domain_count", (level, m, t), hi=sum(c // t for c in free))


def _domain_entries(lp: HighsLp, levels: tuple[str, ...], model: str, amount: float,
                    col: int) -> None:
    """The entries of a gang column of `amount` GPUs of `model` in the domain rows of
    `levels` (`_declare_domain_rows`)."""
    k = round(amount)
    for level in levels:
        for t in range(2, k + 1):
            if lp.has_row("domain_count", (level, model, t)):
                lp.entry("domain_gpus", (level, model, t), col, float(k))
                lp.entry("domain_count", (level, model, t), col, 1.0)


def _usable_entry(lp: HighsLp, key: GroupKey, opt: Option, col: int) -> None:
    """usable[P] (P: the option's pool, holding unusable GPUs that running jobs occupy):
    a job takes of P's usable GPUs its amount, less what its current placement holds of
    P's unusable GPUs (only a kept placement may use them, and it is the job's own):
        sum (amount(o) - unusable(G, P)) x[G, o] <= usable GPUs of P
    (a share or MIG job on an unusable GPU: all of its amount)."""
    held = dict(key.stranded).get(opt.pool, 0)
    coef = opt.amount if not held else (
        max(0.0, opt.amount - held) if opt.whole else 0.0)
    if coef > 0:
        lp.entry("usable", opt.pool, col, coef)


def _job_columns(lp: HighsLp, groups: dict[GroupKey, GroupCount], fair: bool,
                 patterns: Patterns, quotas: dict[str, Quota] | None = None
                 ) -> tuple[list[bool], float]:
    """x[G, o] per group and option, in order: whether each is a gang column (whole,
    >= 2 GPUs; an elastic gang's only while there are at most `MIP_ELASTIC_COLS` of them,
    module doc), and the capacity-free fallback bound (each job's best value)."""
    gang_cols: list[bool] = []
    elastic: list[int] = []
    fallback = 0.0
    # the row families by index, looked up once (the entries' order does not matter:
    # HighsLp.to_highs sorts them)
    group_row, pool_row = lp.rows_of("group"), lp.rows_of("pool")
    mem_row, whole_row = lp.rows_of("gpu_memory"), lp.rows_of("whole_gpus")
    tenant_row, quota_row = lp.rows_of("tenant"), lp.rows_of("quota")
    usable_row, pattern_row = lp.rows_of("usable"), lp.rows_of("pattern_gangs")
    gpus_row, count_row = lp.rows_of("gang_gpus"), lp.rows_of("gang_count")
    add = lp.entry_at
    for gi, (key, slot) in enumerate(groups.items()):
        best = 0.0
        g_row = group_row[gi]
        for opt in key.options:
            pool = opt.pool
            model = pool[1]
            on_whole = pool[0] == "whole"
            k = 0 if key.fixed else gang_size(key.single_k, opt)
            single_gang = k >= 2
            on_patterns = single_gang and on_whole and model in patterns
            # no node has room for the gang: the option is unusable
            usable = not on_patterns or (model, k) in pattern_row
            col = lp.add_col(-opt.coef, hi=float(slot.count) if usable else 0.0)
            gang = opt.whole and opt.amount >= 2
            gang_cols.append(gang)
            if gang and key.single_k < 0:
                elastic.append(len(gang_cols) - 1)
            add(g_row, col, 1.0)
            add(pool_row[pool], col, opt.amount)
            if opt.mem > 0 and pool in mem_row:
                add(mem_row[pool], col, opt.mem)
            if opt.whole and on_whole and model in whole_row:
                add(whole_row[model], col, opt.amount)
            if fair and key.tenant in tenant_row:
                add(tenant_row[key.tenant], col, opt.thr)
            for qk in quota_keys(quotas, key.tenant, model) if quotas else ():
                if qk in quota_row:
                    add(quota_row[qk], col, opt.quota)
            if pool in usable_row:
                _usable_entry(lp, key, opt, col)
            if key.levels and not key.fixed and on_whole:
                _domain_entries(lp, key.levels, model, opt.amount, col)
            if on_patterns and usable:
                add(pattern_row[(model, k)], col, 1.0)
            elif single_gang and on_whole and not on_patterns:
                for t in range(2, k + 1):
                    if (model, t) in gpus_row:
                        add(gpus_row[(model, t)], col, float(k))
                        add(count_row[(model, t)], col, 1.0)
            if opt.coef > best:
                best = opt.coef
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
         time_limit_s: float, resolve: bool = True, stop: Event | None = None
         ) -> _Solved | None:
    """Solve the bound LP; re-solve with gang columns integral when they come out
    fractional, time is left and `resolve` allows (module doc). (value, job column
    values, the LP's job column values: the same list unless the re-solve's replaced
    them), the fallback without a solution, None if infeasible. Once `stop` is set, HiGHS
    is interrupted (no solution: the fallback)."""
    h = lp.to_highs()
    if stop is not None:
        interrupt_on(h, stop)
    h.setOptionValue("time_limit", max(0.05, time_limit_s))
    t0 = time.perf_counter()
    h.run()
    status = h.getModelStatus()
    if status == INFEASIBLE:
        return None
    if status != OPTIMAL:
        log.info("bound LP not solved (%s); using the capacity-free bound", status)
        return fallback, None, None
    value = float(-h.getInfo().objective_function_value)
    values = lp_values = list(h.getSolution().col_value)[:n_job_cols]
    gangs = [c for c in range(n_job_cols) if gang_cols[c]
             and abs(values[c] - round(values[c])) > 1e-6]
    lp_s = time.perf_counter() - t0
    left = time_limit_s - lp_s
    mip_s = min(left, MIP_SHARE * time_limit_s)
    if resolve and gangs and not fair and mip_s > MIP_MIN_LPS * lp_s and \
            not (stop is not None and stop.is_set()):
        # Gang counts are integers in every plan: re-solve with them integral (HiGHS
        # MIP, warm from the LP). Its incumbent gives targets a plan can follow (the
        # LP's fractional gangs round down and lose their value), its dual bound a
        # tighter valid bound.
        set_integral(h, [c for c in range(n_job_cols) if gang_cols[c]])
        h.setOptionValue("time_limit", max(0.05, mip_s - MIP_OVERHEAD_LPS * lp_s))
        h.setOptionValue("mip_rel_gap", 1e-3)
        h.run()
        info = h.getInfo()
        if info.primal_solution_status == SOLUTION_FEASIBLE and (
                h.getModelStatus() == OPTIMAL or -info.objective_function_value
                >= value - MIP_TARGET_GAP * max(1.0, abs(value))):
            values = list(h.getSolution().col_value)[:n_job_cols]
        dual = float(-info.mip_dual_bound)
        if math.isfinite(dual):
            value = min(value, dual)
    return value, values, lp_values
