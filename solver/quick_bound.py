"""A cheap proven upper bound: the Lagrangian of the pooled capacities.

The LP bound (solver/bound.py) is tight but its Python part grows with the request and
its solve may not finish on a loaded machine; this bound costs one pass over the compiled
jobs and a few vector operations, so a plan always carries a bound from the first
fraction of its budget.

The relaxation keeps one row per GPU pool p (a model's non-MIG GPUs, or its MIG GPUs in
GPUs of compute), counting usable GPUs and those a running job holds now, exactly as the
LP bound's pools do, and drops every other constraint (host, memory, MIG geometry; nodes
and domains but for the test below). A pinned job (non-preemptible and running, not
elastic) stays where it runs in every plan: its value there goes to the constant and what
it takes there comes off its pool (on M, 1,024 GPUs / 1,500 jobs, 51 such jobs: the bound
fell from 9% above the LP bound to 2.4%). Job j's options o are its eligible models
with a positive speed plus, for a running job, its current model; option o takes a_o of
its pool (a gang's GPUs, a share's fraction, the compute share of the smallest MIG profile
covering it; a gang's option on another model than its current one only where one
node holds it, single-node, and one domain of each required level holds it: on M the
same-domain 64-GPU gangs on models whose domains are smaller took the bound 0.7-1.7%
above the LP's) and earns c_o, the job's objective value there, plus the preemption cost a
placed running job saves, minus the migration cost when the model is not its current one.
An elastic gang (contract 5.1) has one option per model and allowed size n (n GPUs, its
value on n GPUs); a shared job with a co-location class (contract 5.2) earns its value
times its factor cap (`models.rules.colocation_factor_cap`, >= any factor it can reach,
since speeds up to 2 can raise it). Topology costs (contract 5.5) are >= 0 and dropped.
Every plan is a point of this relaxation with the same objective (the constant
-preemption_cost per running job added back, and the pinned jobs' values), so for any
prices lambda >= 0

    B(lambda) = const + sum_p lambda_p cap_p + sum_j max(0, max_o (c_o - lambda_p(o) a_o))

is an upper bound (weak duality). The prices are chosen by exact coordinate descent: with
the other prices fixed, B is convex and piecewise linear in lambda_p, minimised where the
amounts of the jobs preferring pool p first exceed its capacity. For `fairness` the bound
is the capacity-free one: min over tenants of the value of all its jobs over its demand.
"""

from __future__ import annotations

import time
from collections import Counter
from itertools import chain
from typing import Any

import numpy as np

from models import GpuModel, PlanRequest, Policy
from models.capacity import CapacitySummary
from models.gpu_table import gpu_table
from models.instance import JobInfo, compile_jobs, per_request
from models.objective import gpu_models_of, objective_value_of, tenant_demands
from models.reasons import StaticReasons
from models.request import speed
from models.rules import (
    class_census,
    colocation_factor_cap,
    interference_table,
    mig_profiles_for,
    required_levels,
)

#: Coordinate-descent passes over the pools (each pass lowers the bound or stops it), at
#: most; past the caller's deadline at least `MIN_PASSES` are made (the bound holds at
#: any prices: fewer passes only loosen it; on L (16,384 GPUs / 20,000 jobs, seed 0) a
#: pass takes about 0.7 ms of CPU at load 8, and 8 passes give 69,690 where 28, the
#: descent converged, give 68,330).
PASSES = 40
MIN_PASSES = 8
#: Past the deadline, after `MIN_PASSES`, passes go on while the descent has taken less
#: than this share of what grouping the jobs took, or than `DESCENT_MIN_S`: a pass is a
#: few vector operations over the groups, small beside the pass over the jobs, and on M
#: (1,024 GPUs / 1,500 jobs) 40 passes give 5,192 where 8 give 5,491 (the LP bound is
#: 4,749), which the plans of M's shortest limits reported as their bound. They were
#: 0.25 and 0.02 s; a pass now costs 1/1.6 of what it did on M and 1/2.2-2.4 on L (16,384
#: GPUs / 20,000 jobs; 40 passes: M 13.6 -> 8.6 ms, L 48 -> 20 ms, L with 30% elastic
#: gangs 178 -> 80 ms, load 8), so 0.015 s buys M 1.2 times the passes it had, and 0.15
#: of the grouping (L: ~60 ms at load 8; with elastic gangs 0.15-0.5 s, where the share
#: decides) 1.3 times as many on L (its floor: more).
DESCENT_SHARE = 0.15
DESCENT_MIN_S = 0.015
#: Relative and absolute safety margins added to the bound (floating-point sums).
_REL_MARGIN = 1e-9
_ABS_MARGIN = 1e-6
#: A pool whose preferring amounts total less than its capacity by this share of it is
#: priced 0 without sorting them (the rounding of a sum of n terms is within n * 1.1e-16
#: of it: 2e-13 for 2,000 terms).
_FIT_MARGIN = 1e-9

Pool = tuple[str, bool]


class _Pools(dict[Pool, int]):
    """GPUs per pool that a placement may use (`_capacity`), and the usable GPUs of the
    cluster per node and topology domain (the shared `StaticReasons` summary, which a
    solve has built before its bound; asked for only when a gang needs it), which say
    what a new placement can never get."""

    def __init__(self, totals: dict[Pool, int], request: PlanRequest) -> None:
        super().__init__(totals)
        self._request = request
        self._usable: CapacitySummary | None = None
        #: (model, GPUs, single-node, required levels) -> whether a gang fits (`fits_gang`)
        self._fits: dict[tuple[object, ...], bool] = {}

    @property
    def usable(self) -> CapacitySummary:
        """The usable GPUs per node and domain (module doc of models/capacity.py)."""
        if self._usable is None:
            self._usable = StaticReasons.of(self._request).capacity
        return self._usable

    def fits_gang(self, info: JobInfo, m: str, gpus: int) -> bool:
        """Whether a new placement of whole-GPU job `info` on `gpus` GPUs of model `m`
        can exist: within the pool, one node for a single-node gang, one domain of each
        of its required topology levels (only usable GPUs are new to it)."""
        pool = (m, False)
        if gpus > self[pool]:
            return False
        if gpus < 2:
            return True
        # memoised: many gangs ask the same (an elastic one for each model and size), and
        # the capacity of a listed topology level is a scan over its domains
        job = info.job
        key = (m, gpus, job.single_node, required_levels(job))
        fits = self._fits.get(key)
        if fits is None:
            fits = self._fits[key] = not (
                job.single_node and gpus > self.usable.most_on_one_node(pool)) and all(
                gpus <= self.usable.most_in_one(level, pool) for level in key[3])
        return fits


def _capacity(request: PlanRequest) -> _Pools:
    """GPUs per pool that a placement may use: usable ones, and those a running job holds
    now (only a kept placement may use them)."""
    # the pool totals of `CapacitySummary(cluster, counted)`, without its per-node and
    # per-domain tables (this bound reads only the totals): every GPU counted in C, less
    # the few unusable ones that no running job holds
    # (read from the request's GPU table, one pass over the GPU objects shared with the
    # plan's statistics, rather than from the objects again)
    t = gpu_table(request)
    totals = Counter(zip(t.models, t.mig, strict=True))
    unusable = [i for i, ok in enumerate(t.usable) if not ok]
    if unusable:
        on = {t.keys[i][0] for i in unusable}
        held = {(p.node, p.gpu) for info in compile_jobs(request) if info.current
                for p in info.current if p.node in on}
        for i in unusable:
            if t.keys[i] not in held:
                totals[(t.models[i], t.mig[i])] -= 1
    return _Pools({pool: n for pool, n in totals.items() if n > 0}, request)


def _options(request: PlanRequest, cap: _Pools, held: dict[int, float] | None = None
             ) -> tuple[dict[tuple[tuple[int, float, float], ...], int], float]:
    """The jobs grouped by their options (module doc; (pool index, amount, coefficient)
    each) with the size of each group, and the constant (-preemption_cost per running
    job). With `held`, a pinned job (module doc) joins no group: its value goes to the
    constant and what it takes to `held` (pool index -> amount)."""
    policy = request.policy
    catalog = request.cluster.catalog()
    gpu_model = per_request(request, "gpu_models", gpu_models_of)
    pools = {p: i for i, p in enumerate(sorted(cap))}
    const = 0.0
    table = interference_table(request.interference)
    census = class_census(request.jobs) if table else {}
    kinds: dict[tuple[object, ...], list[tuple[str, int, float]]] = {}
    # Jobs are counted per key of their options, in the order they come: most jobs by
    # their compiled kind (`JobKind`, when their objective values are the kind's), factor
    # and, running, their current model and what their current placement takes, since the
    # jobs of one such key have the same options; the others by their options. A gang's
    # options also depend on the nodes and domains it needs (`_gang_needs`), which its
    # kind does not say: they join its key (without them, a gang kept to a domain and
    # one that may span domains shared the options of the first met, and on L (16,384
    # GPUs / 20,000 jobs) seeds 1 and 2 the bound came out 260 and 181 too low).
    # key -> [its options, its jobs]
    keyed: dict[tuple[object, ...], list[Any]] = {}
    preemption_cost = policy.preemption_cost
    for info in compile_jobs(request):
        kind = info.kind
        factor = colocation_factor_cap(info.job, census, table) if table else 1.0
        needs = _gang_needs(info) if kind.shape == "whole" and kind.gpus > 1 else None
        current = info.current
        cur = opts = None
        if current:
            const -= preemption_cost
            first = current[0]
            cur = gpu_model.get((first.node, first.gpu))
            mig = first.mig
            key: tuple[object, ...] = (kind, factor, needs, cur, first.fraction,
                                       None if mig is None else mig.profile)
            # (running: pinned unless preemptible, `JobInfo.pinned`)
            if held is not None and not info.preemptible and (
                    kept := _pinned(info, cur, pools, cap, catalog, factor, policy)):
                held[kept[0]] = held.get(kept[0], 0.0) + kept[1]
                const += kept[2]
                continue
        else:
            key = (kind, factor, needs)
        if info.size_values or kind.obj_values is None:
            opts = _job_options(info, cur, pools, cap, catalog, kinds, factor, policy, needs)
            key = ("options", opts)
        entry = keyed.get(key)
        if entry is None:
            if opts is None:
                opts = _job_options(info, cur, pools, cap, catalog, kinds, factor, policy,
                                    needs)
            keyed[key] = [opts, 1]
        else:
            entry[1] += 1
    groups: dict[tuple[tuple[int, float, float], ...], int] = {}
    for opts, n in keyed.values():
        if opts:
            groups[opts] = groups.get(opts, 0) + n
    return groups, const


Needs = tuple[bool, tuple[str, ...]]

#: `_job_options`'s default `needs`: not given, worked out from the job.
_ASK: Any = object()


def _gang_needs(info: JobInfo) -> Needs:
    """What decides where a whole-GPU gang of `info` may be placed beyond its kind:
    single-node, and its required topology levels (`fits_gang`)."""
    job = info.job
    return job.single_node, required_levels(job)


def _needs_of(info: JobInfo) -> Needs | None:
    """`_gang_needs` of a whole-GPU job on more than one GPU, None for any other job
    (where it may be placed, its kind says)."""
    return _gang_needs(info) if info.shape == "whole" and info.gpus > 1 else None


def _pinned(info: JobInfo, cur: str | None, pools: dict[Pool, int], cap: _Pools,
            catalog: dict[str, GpuModel], factor: float, policy: Policy
            ) -> tuple[int, float, float] | None:
    """(pool index, amount, value) of pinned job `info` (non-preemptible and running,
    not elastic) kept where it runs on model `cur`, as every plan keeps it: its amount
    there (`_amount`, at most what it takes) and its value times its factor cap plus the
    preemption cost it saves (at least what it earns, its value being >= 0); None when
    it is not that simple (elastic, an unknown model or pool, a negative value), and the
    job is then bounded with the others."""
    if info.size_values or cur is None:
        return None
    pool = pools.get((cur, info.shape == "mig"))
    amount = None if pool is None else _amount(info, cur, cur, cap, catalog[cur])
    value = info.obj_values.get(cur)
    if value is None:
        value = (objective_value_of(info.job, cur, catalog, policy.objective)
                 if speed(info.job, cur, catalog) > 0 else 0.0)
    if pool is None or amount is None or value < 0:
        return None
    return pool, amount, value * factor + policy.preemption_cost


def _job_options(info: JobInfo, cur: str | None, pools: dict[Pool, int], cap: _Pools,
                 catalog: dict[str, GpuModel],
                 kinds: dict[tuple[object, ...], list[tuple[str, int, float]]],
                 factor: float, policy: Policy, needs: Needs | None = _ASK
                 ) -> tuple[tuple[int, float, float], ...]:
    """The options of job `info` (running on model `cur` now, or None), sorted; `needs`:
    its `_needs_of` when the caller has it."""
    if info.size_values:
        return _elastic_options(info, cur, pools, cap, catalog, factor, policy)
    if needs is _ASK:
        needs = _needs_of(info)
    if not info.current:
        return _new_options(info, pools, cap, catalog, kinds, factor, needs)
    return _running_options(info, cur, pools, cap, catalog, kinds, factor, policy, needs)


def _elastic_options(info: JobInfo, cur: str | None, pools: dict[Pool, int],
                     cap: _Pools, catalog: dict[str, GpuModel], factor: float,
                     policy: Policy) -> tuple[tuple[int, float, float], ...]:
    """The options of an elastic gang, sorted: one per model it values (or runs on now,
    `cur`) and allowed size n, taking n GPUs and earning its value on n GPUs there (plus
    the preemption cost saved minus the migration cost, running)."""
    job = info.job
    opts: list[tuple[int, float, float]] = []
    sizes = info.sizes
    mig = info.shape == "mig"
    by_size = info.size_obj_values
    running = bool(job.current)
    for m in set(info.obj_values) | ({cur} if cur is not None else set()):
        pool = pools.get((m, mig))
        if pool is None:
            continue
        spec = catalog[m]
        for n in sizes:
            amount = _amount(info, m, cur, cap, spec, n)
            if amount is None:
                continue
            value = by_size.get(n, {}).get(m)
            if value is None:
                value = (objective_value_of(job, m, catalog, policy.objective, n)
                         if speed(job, m, catalog) > 0 else 0.0)
            value *= factor
            if running:
                value += policy.preemption_cost - (
                    policy.migration_cost if m != cur else 0.0)
            if value > 0:
                opts.append((pool, amount, value))
    return tuple(sorted(opts))


def _kind_plan(info: JobInfo, pools: dict[Pool, int], cap: _Pools,
               catalog: dict[str, GpuModel],
               kinds: dict[tuple[object, ...], list[tuple[str, int, float]]],
               needs: Needs | None) -> list[tuple[str, int, float]]:
    """(model, pool, amount) for each model a job that is not elastic values and may be
    placed on as a new placement, in pool order. What a job takes of a pool depends on its
    kind only (shape, gang size or share, MIG profiles per model, the models it values;
    for a whole-GPU gang, `needs`: whether it is single-node and its required levels), so
    the list is made once per kind (cached in `kinds`). A MIG job's profiles are keyed by
    their dict, which the kinds of one eligibility share (models/instance.py `_compile`;
    equal dicts of other kinds only miss the sharing), as a tuple of them cost more than
    the rest of the key."""
    values = info.obj_values
    mig = info.shape == "mig"
    kind: tuple[object, ...] = (info.shape, info.gpus, info.share, tuple(values),
                                id(info.profiles) if mig else None, needs)
    plan = kinds.get(kind)
    if plan is None:
        plan = []
        for m in values:
            pool = pools.get((m, mig))
            if pool is None:
                continue
            amount = info.share if info.shape == "share" else _amount(
                info, m, None, cap, catalog[m])
            if amount is not None:
                plan.append((m, pool, amount))
        plan.sort(key=lambda x: (x[1], x[2]))
        kinds[kind] = plan
    return plan


def _new_options(info: JobInfo, pools: dict[Pool, int], cap: _Pools,
                 catalog: dict[str, GpuModel],
                 kinds: dict[tuple[object, ...], list[tuple[str, int, float]]],
                 factor: float, needs: Needs | None
                 ) -> tuple[tuple[int, float, float], ...]:
    """The options of a job that is neither running nor elastic (most jobs), sorted: the
    general loop of `_options` without its running-job and size cases (a job's models are
    all MIG or all not: one pool each, so the kind's plan is already in option order)."""
    values = info.obj_values
    return tuple([(pool, amount, v) for m, pool, amount in _kind_plan(info, pools, cap,
                                                                      catalog, kinds, needs)
                  if (v := values[m] * factor) > 0])


def _running_options(info: JobInfo, cur: str | None, pools: dict[Pool, int],
                     cap: _Pools, catalog: dict[str, GpuModel],
                     kinds: dict[tuple[object, ...], list[tuple[str, int, float]]],
                     factor: float, policy: Policy, needs: Needs | None
                     ) -> tuple[tuple[int, float, float], ...]:
    """The options of a running job that is not elastic, sorted: the general loop of
    `_options` for one size. On a model other than its current one `cur` it takes what a
    new placement takes (the kind's plan) and earns its value plus the preemption cost
    saved minus the migration cost; on `cur` its own amount (`_amount`) and no migration
    cost."""
    values = info.obj_values
    gain = policy.preemption_cost - policy.migration_cost
    opts = [(pool, amount, v) for m, pool, amount in _kind_plan(info, pools, cap, catalog,
                                                                kinds, needs)
            if m != cur and (v := values[m] * factor + gain) > 0]
    pool = None if cur is None else pools.get((cur, info.shape == "mig"))
    if cur is not None and pool is not None:
        amount = _amount(info, cur, cur, cap, catalog[cur])
        value = values.get(cur)
        if value is None:
            value = (objective_value_of(info.job, cur, catalog, policy.objective)
                     if speed(info.job, cur, catalog) > 0 else 0.0)
        value = value * factor + policy.preemption_cost
        if amount is not None and value > 0:
            opts.append((pool, amount, value))
    return tuple(sorted(opts))


def _amount(info: JobInfo, m: str, cur: str | None, cap: _Pools, spec: GpuModel,
            n: int | None = None) -> float | None:
    """What job `info` takes of model `m`'s pool at least (module doc; an elastic gang on
    n GPUs: n); None when it can never be placed there (no covering MIG profile, a gang
    larger than the pool)."""
    job = info.job
    if info.shape == "mig":
        # the covering profiles (compiled per job for the models it values)
        names = (list(info.profiles[m]) if m in info.profiles
                 else [p.name for p in mig_profiles_for(job, spec)])
        if m == cur and job.current and job.current[0].mig is not None:
            names.append(job.current[0].mig.profile)
        slices = [p.compute_slices for p in map(spec.profile, names) if p is not None]
        return min(slices) / spec.compute_slices if slices else None
    if info.shape == "share":
        frac = job.current[0].fraction if m == cur and job.current else None
        return min(info.share, frac) if frac else info.share
    gpus = info.gpus if n is None else n
    if m != cur and not cap.fits_gang(info, m, gpus):
        return None   # a gang larger than the pool, any node or domain it needs
    return float(gpus)


def _fairness_bound(request: PlanRequest) -> float:
    """min over tenants of (every job of the tenant at its best value, size and factor
    cap) / its demand."""
    demands = tenant_demands(request)
    table = interference_table(request.interference)
    census = class_census(request.jobs) if table else {}
    best: dict[str, float] = {}
    for info in compile_jobs(request):
        values = ([v for by_model in info.size_values.values() for v in by_model.values()]
                  if info.elastic else list(info.values.values()))
        top = max(values, default=0.0) * (
            colocation_factor_cap(info.job, census, table) if table else 1.0)
        best[info.job.tenant] = best.get(info.job.tenant, 0.0) + top
    return min((best.get(k, 0.0) / d for k, d in demands.items() if d > 0), default=0.0)


def quick_bound(request: PlanRequest, deadline: float | None = None) -> float:
    """A proven upper bound on `request`'s objective (module doc); the price descent
    stops at `deadline` (`time.monotonic()`), after `MIN_PASSES` passes at least and at
    least `DESCENT_SHARE` of what grouping the jobs took (or `DESCENT_MIN_S`)."""
    if request.policy.objective == "fairness":
        value = _fairness_bound(request)
        return value + _REL_MARGIN * abs(value) + _ABS_MARGIN
    t0 = time.monotonic()
    cap = _capacity(request)
    held: dict[int, float] = {}
    groups, const = _options(request, cap, held)
    grace = max(DESCENT_MIN_S, DESCENT_SHARE * (time.monotonic() - t0))
    if not groups:
        return const + _ABS_MARGIN
    # the options' columns, group by group (each group's options consecutive, in order)
    flat = np.fromiter(chain.from_iterable(chain.from_iterable(groups)), dtype=float,
                       count=3 * sum(map(len, groups))).reshape(-1, 3)
    group = np.repeat(np.arange(len(groups), dtype=np.int64), list(map(len, groups)))
    lp = _Lagrangian(group, flat[:, 0].astype(np.int64), flat[:, 1], flat[:, 2],
                     np.array(list(groups.values()), dtype=float),
                     np.array([cap[p] - held.get(i, 0.0) for i, p in enumerate(sorted(cap))]))
    value = const + lp.value(lp.prices(deadline, grace))
    return float(value + _REL_MARGIN * abs(value) + _ABS_MARGIN)


class _Lagrangian:
    """B(lambda) over grouped options: option i of group `group[i]` takes `amount[i]` of
    pool `pool[i]` and earns `coef[i]`; group g has `count[g]` jobs; pool p holds
    `caps[p]`. Each group's options are consecutive rows, in pool order (as `quick_bound`
    lists them), and every group has one.

    The descent keeps, per pool p and group g, the best reduced value of g's options in p,
    `best[p, g]` = max_{o in g, p(o) = p} (c_o - lambda_p a_o) (-inf without one): moving
    lambda_p changes row p only, a group's best is the maximum of its column, and its best
    outside p that of its column without row p. These are the very maxima a pass over all
    the options finds (a maximum is exact), so B and the prices are the same numbers, at
    a fraction of the work per pass."""

    def __init__(self, group: np.ndarray, pool: np.ndarray, amount: np.ndarray,
                 coef: np.ndarray, count: np.ndarray, caps: np.ndarray) -> None:
        self.count, self.caps = count, caps
        #: per pool: its rows' groups, amounts, coefficients, amounts times group sizes,
        #: and (for `np.maximum.reduceat`) where each group's rows start and that group
        self._pools: list[tuple[np.ndarray, ...]] = []
        for p in range(len(caps)):
            on = np.flatnonzero(pool == p)
            g = group[on]
            starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(on) else on
            self._pools.append((g, amount[on], coef[on], amount[on] * count[g], starts,
                                g[starts]))
        self._best = np.full((len(caps), len(count)), -np.inf)
        #: per pool, the order of its rows by decreasing threshold its last price used
        self._orders: list[np.ndarray | None] = [None] * len(caps)

    def _set(self, p: int, lam_p: float) -> None:
        """Row p of the best reduced values at lambda_p = `lam_p`."""
        _, amount, coef, _, starts, groups = self._pools[p]
        if len(starts):
            self._best[p, groups] = np.maximum.reduceat(coef - lam_p * amount, starts)

    def _value(self, lam: np.ndarray) -> float:
        """B(lambda) without the constant, from the best reduced values at `lam`."""
        best = np.maximum(self._best.max(axis=0, initial=-np.inf), 0.0)
        return float(lam @ self.caps + best @ self.count)

    def value(self, lam: np.ndarray) -> float:
        """B(lambda) without the constant."""
        for p, lam_p in enumerate(lam):
            self._set(p, float(lam_p))
        return self._value(lam)

    def prices(self, deadline: float | None = None, grace: float = 0.0) -> np.ndarray:
        """Pool prices minimising B by exact coordinate descent (module doc), cut at
        `deadline` after `MIN_PASSES` passes and `grace` seconds of descent."""
        lam = np.zeros(len(self.caps))
        last = self.value(lam)
        start = time.monotonic()
        for k in range(PASSES):
            if (deadline is not None and k >= MIN_PASSES and (now := time.monotonic())
                    >= deadline and now - start >= grace):
                break
            for p in range(len(lam)):
                lam[p] = self._coordinate(p)
                self._set(p, float(lam[p]))
            now = self._value(lam)
            if now > last - 1e-9 * max(1.0, abs(last)):
                break
            last = now
        return lam

    def _coordinate(self, p: int) -> float:
        """The minimiser of B along lambda_p, the other prices fixed (at the best reduced
        values kept): a group prefers pool p while lambda_p < its threshold t, its best in
        p less its best elsewhere (at least 0) over the amount; the price is the threshold
        at which the preferring groups' amounts, in decreasing order of t, first exceed
        the pool."""
        g, amount, coef, filling, _, _ = self._pools[p]
        if not len(g):
            return 0.0
        best = self._best
        row = best[p].copy()
        best[p] = -np.inf
        alt = np.maximum(best.max(axis=0), 0.0)
        best[p] = row
        t = (coef - alt[g]) / amount
        cap = float(self.caps[p])
        slack = _FIT_MARGIN * max(1.0, abs(cap))
        if float(filling[t > 0].sum()) < cap - slack:
            return 0.0   # every group with t > 0 fits: the price is 0, no sort needed
        # The thresholds move little from one pass to the next: the last pass's order,
        # re-sorted (a stable sort of an almost sorted array is a merge of runs), is in
        # decreasing t too, ties perhaps otherwise. The price found on it is the
        # threshold tau of the tie block where the amounts first exceed the pool; any
        # order of the ties finds the same one when the amounts with t > tau total at most
        # the pool, and those with t >= tau more, each by more than the rounding of any
        # order of summing them. Else the order is the one a fresh sort gives.
        prev = self._orders[p]
        if prev is not None:
            order = prev[np.argsort(-t[prev], kind="stable")]
            k = int(np.searchsorted(np.cumsum(filling[order]), cap, side="right"))
            tau = float(t[order[k]]) if k < len(order) else None
            if tau is not None and (float(filling[t > tau].sum()) <= cap - slack
                                    and float(filling[t >= tau].sum()) > cap + slack):
                self._orders[p] = order
                return max(0.0, tau)
        order = np.argsort(-t)
        self._orders[p] = order
        k = int(np.searchsorted(np.cumsum(filling[order]), cap, side="right"))
        return max(0.0, float(t[order[k]])) if k < len(order) else 0.0
