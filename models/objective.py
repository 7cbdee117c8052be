"""The objectives of docs/semantics.md, evaluated on a set of placements.

`evaluate(request, placements)` is what every planner reports as `objective_value`; the
validator recomputes it independently (solver/validate.py) so that a slip here is caught.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from models.cache import beside, cached
from models.capacity import Topology
from models.catalog import GpuModel
from models.request import Job, Placement, PlanRequest, speed
from models.rules import (
    HORIZON_S,
    QuotaKey,
    best_value,
    colocation_factors,
    eligible_models,
    guaranteed_served,
    interference_table,
    job_value,
    job_values,
    lexicographic_levels,
    model_eligible,
    preferred_level,
    priority_key,
    quota_keys,
    quota_usage,
    remaining_on,
    topology_cost,
)

if TYPE_CHECKING:
    from models.gpu_table import GpuTable
    from models.instance import JobInfo


def same_placement(a: Sequence[Placement], b: Sequence[Placement]) -> bool:
    """True when two placement lists name the same GPUs / instances (order-free)."""
    if len(a) != len(b):
        return False
    if a == b:
        # equal lists (the very same objects too: a running job kept as it runs): the
        # list compares them in C, identity first, without a key per placement
        return True

    def key(p: Placement) -> tuple[str, int, str, int]:
        return (p.node, p.gpu, p.mig.profile if p.mig else "", p.mig.start if p.mig else -1)
    return sorted(map(key, a)) == sorted(map(key, b))


def gpu_models_of(request: PlanRequest) -> dict[tuple[str, int], str]:
    """(node, gpu index) -> model name: from the request's GPU table when the cache keeps
    one (models/gpu_table.py; 16,384 GPUs: 1 ms of CPU against 5 ms for a pass over the
    GPU objects), else read from the cluster."""
    table = cast("GpuTable | None", cached(request, "gpu_table"))
    if table is not None:
        return dict(zip(table.keys, table.models, strict=True))
    return {(n.name, g.index): g.model for n in request.cluster.nodes for g in n.gpus}


def work_factor(job: Job, objective: str, n: int | None = None) -> float:
    """The per-job multiplier of the `jct` / `makespan` objectives (1 otherwise); an
    elastic gang on n GPUs uses its remaining time there (`models.rules.remaining_on`)."""
    rem = remaining_on(job, n)
    r = max(rem, 1.0) if rem is not None else HORIZON_S
    if objective == "jct":
        return HORIZON_S / r
    if objective == "makespan":
        return r / HORIZON_S
    return 1.0


def objective_value_of(job: Job, model: str, catalog: Mapping[str, GpuModel],
                       objective: str, n: int | None = None) -> float:
    """The contribution of placing `job` on `model` (a whole-GPU gang on n GPUs, default
    its nominal `gpus`) under `objective` (before costs)."""
    if objective == "jct":
        return job.weight * speed(job, model, catalog) * work_factor(job, objective, n)
    return job_value(job, model, catalog, n) * work_factor(job, objective, n)


def objective_factor_is_per_job(objective: str) -> bool:
    """Whether `objective` multiplies a job's value by a factor of its own (`work_factor`
    is 1 for every job but under `jct` and `makespan`)."""
    return objective in ("jct", "makespan")


def objective_values(job: Job, values: Mapping[str, float],
                     catalog: Mapping[str, GpuModel], objective: str) -> dict[str, float]:
    """`objective_value_of` of `job` at its nominal size on each model of `values` (its
    `job_value` there, in its order): the work factor is the job's, computed once, and
    the throughput value is reused where the objective is a multiple of it."""
    factor = work_factor(job, objective)
    if objective == "jct":
        return {m: job.weight * speed(job, m, catalog) * factor for m in values}
    return {m: v * factor for m, v in values.items()}


def values_on(job: Job, models: Sequence[str], catalog: Mapping[str, GpuModel],
              objective: str) -> tuple[dict[str, float], dict[str, float]]:
    """(`job_value`, `objective_value_of`) of `job` at its nominal size on each of
    `models`, in one pass (`objective_values`; equal to calling both per model)."""
    values = job_values(job, models, catalog)
    if not objective_factor_is_per_job(objective):
        return values, dict(values)   # `objective_values` with a factor of 1: v * 1.0 is v
    return values, objective_values(job, values, catalog, objective)


def tenant_demands(request: PlanRequest, jobs: Sequence[Job] | None = None
                   ) -> dict[str, float]:
    """D_k: per tenant, the sum over its jobs (of `jobs`, default all) of their best value
    on an eligible model.

    One pass over the cluster and one over the jobs: linear in GPUs + jobs x models. The
    jobs' terms of all the jobs are kept beside the request's other precomputations (they
    depend on the request alone)."""
    terms = (beside(request, "demand_terms", _demand_terms) if jobs is None
             else _demand_terms(request, jobs))
    return _demands_of(terms)


def _demands_of(terms: Iterable[tuple[str, float] | None]) -> dict[str, float]:
    """D_k from the jobs' `_demand_terms`, summed in their order."""
    out: dict[str, float] = {}
    for term in terms:
        if term is not None:
            tenant, best = term
            out[tenant] = out.get(tenant, 0.0) + best
    return {k: v for k, v in out.items() if v > 0}


def _demand_terms(request: PlanRequest, jobs: Sequence[Job] | None = None
                  ) -> list[tuple[str, float] | None]:
    """Per job of `jobs` (default all), in order: (its tenant, its best value on an
    eligible model present in its MIG mode, or on its running model), or None when it has
    no such model."""
    catalog = request.cluster.catalog()
    # Models the cluster has in each mode: MIG jobs need MIG GPUs, the others non-MIG ones.
    present: dict[bool, set[str]] = {False: set(), True: set()}
    for n in request.cluster.nodes:
        for g in n.gpus:
            present[g.mig_enabled].add(g.model)
    gpu_models: dict[tuple[str, int], str] | None = None
    out: list[tuple[str, float] | None] = []
    for job in request.jobs if jobs is None else jobs:
        models = [m for m in eligible_models(job, catalog) if m in present[job.shape == "mig"]]
        if job.current:
            # A running job's own model counts even when no longer eligible.
            if gpu_models is None:
                gpu_models = gpu_models_of(request)
            models.append(gpu_models[(job.current[0].node, job.current[0].gpu)])
        if not models:
            out.append(None)
            continue
        out.append((job.tenant, max(best_value(job, m, catalog) for m in models)))
    return out


@dataclass(frozen=True)
class Evaluation:
    """The objective of a plan and its parts."""

    objective_value: float
    throughput: float
    migrated: tuple[str, ...]
    preempted: tuple[str, ...]
    min_share: float | None = None
    #: the topology costs of the plan (contract 5.5), included in the objective
    topology_cost: float = 0.0
    #: contract 5.2: throughput value lost to interference (`interference_loss`)
    interference_loss: float = 0.0


def topology_costs(request: PlanRequest,
                   placements: Mapping[str, Sequence[Placement]]) -> float:
    """The topology costs of `placements`: per placed job with a preferred level,
    `policy.topology_cost` per domain beyond the first that it spans there."""
    cost = request.policy.topology_cost
    if cost <= 0:
        return 0.0
    jobs = [j for j in beside(request, "preferring", _preferring) if placements.get(j.name)]
    if not jobs:
        return 0.0
    topo = Topology(request.cluster)
    return sum(topology_cost(j, {p.node for p in placements[j.name]}, topo, cost)
               for j in jobs)


def _preferring(request: PlanRequest) -> list[Job]:
    """The jobs of `request` with a preferred topology level, in order (a job without a
    `topology` field has none: only the others are asked)."""
    return [j for j in request.jobs if j.topology is not None and preferred_level(j) is not None]


def interference_loss(values: Mapping[str, float], factors: Mapping[str, float]) -> float:
    """`stats.interference_loss`: the throughput value the placed shared jobs lose to
    co-location interference, summed per job and clipped at 0 per job:
    sum over jobs j with factor F_j < 1 of value_j(factor 1) * (1 - F_j). A job that a
    co-resident speeds up (F_j > 1) gains, but its gain offsets no other job's loss (the
    gain is in `objective_value`). `values`: job -> value at factor 1."""
    return sum(values[name] * (1.0 - f) for name, f in factors.items()
               if f < 1.0 and name in values)


def compiled_infos(request: PlanRequest) -> Sequence[JobInfo] | None:
    """The compiled jobs of `request` (`models.instance.compile_jobs`) when the cache holds
    them and they are those of its very job objects, in order; else None (the caller then
    reads the jobs themselves). A JobInfo's `name`, `current` and `preemptible` are its
    job's, and a pass reading them from JobInfos costs a fraction of one reading them from
    the job models (16,384 GPUs / 20,000 jobs: 0.3 ms against 3 ms a field)."""
    infos = cast("Sequence[JobInfo] | None", cached(request, "jobs"))
    jobs = request.jobs
    if infos is None or len(infos) != len(jobs) or not all(
            map(operator.is_, map(_JOB_OF, infos), jobs)):
        return None
    return infos


_JOB_OF = operator.attrgetter("job")


def evaluate(request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
             models: Mapping[tuple[str, int], str] | None = None,
             factors: Mapping[str, float] | None = None) -> Evaluation:
    """Evaluate `request.policy.objective` for `placements` (job -> placements; absent =
    unplaced); `models` is `gpu_models_of(request)` when the caller has it; `factors` the
    co-location factors (contract 5.2) when they come from a larger plan than
    `placements` (a priority class's jobs share GPUs with other classes' jobs). A request
    whose jobs are compiled (`compiled_infos`) is read through its JobInfos: their values
    are these rules' for each job, and a pass over them touches no job model that is not
    placed."""
    if models is None:
        models = beside(request, "gpu_models", gpu_models_of)
    if factors is None:
        factors = colocation_factors(request.jobs, placements,
                                     interference_table(request.interference))
    infos = compiled_infos(request)
    migrated: list[str] = []
    preempted: list[str] = []
    get = placements.get
    lost, moved = preempted.append, migrated.append
    same = same_placement
    # (job, placements, compiled values or None, objective values or None, elastic) of
    # each placed job, in request order; a running job left out is preempted
    placed: list[_Placed] = []
    keep = placed.append
    # the JobInfos, or uncompiled the jobs themselves: both have name and current
    items: Iterable[Any] = request.jobs if infos is None else infos
    for item in items:
        name, current = item.name, item.current
        pl = get(name)
        if not pl:
            if current:
                lost(name)
            continue
        if current and pl is not current and not same(pl, current):
            moved(name)
        if infos is None:
            keep((item, pl, None, None, item.elastic is not None))
        else:
            # the compiled values are these rules' at the nominal size (`models.instance`)
            keep((item.job, pl, item.values, item.obj_values, item.elastic))
    return _score(request, placements, models, factors, migrated, preempted, placed)


#: A placed job as `_score` reads it: (job, placements, compiled values or None, compiled
#: objective values or None, whether its size is its placements' count).
_Placed = tuple[Job, Sequence[Placement], "dict[str, float] | None",
                "dict[str, float] | None", bool]


def _score(request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
           models: Mapping[tuple[str, int], str], factors: Mapping[str, float],
           migrated: list[str], preempted: list[str], placed: Sequence[_Placed],
           demands: Mapping[str, float] | None = None) -> Evaluation:
    """`evaluate` from the placed jobs of `request` (in request order) and its moved and
    stopped running jobs; `demands`: its `tenant_demands` when the caller has them."""
    catalog = request.cluster.catalog()
    policy = request.policy
    objective = policy.objective
    per_job = objective_factor_is_per_job(objective)
    fairness = objective == "fairness"
    gained = 0.0
    thr = 0.0
    placed_value: dict[str, float] = {}
    plain: dict[str, float] = {}
    for job, pl, values, obj, elastic in placed:
        first = pl[0]
        model = models[(first.node, first.gpu)]
        n = len(pl) if elastic else None
        v = values.get(model) if values is not None and n is None else None
        if v is None:
            v = job_value(job, model, catalog, n)
        f = factors.get(job.name) if factors else None
        if f is not None:
            # Contract 5.2: interference scales the job's speed, so every objective's
            # per-job value.
            plain[job.name] = v
            v *= f
        thr += v
        if fairness:
            placed_value[job.tenant] = placed_value.get(job.tenant, 0.0) + v
        if per_job:
            o = obj.get(model) if obj is not None and n is None else None
            if o is None:
                o = objective_value_of(job, model, catalog, objective, n)
            gained += o * (1.0 if f is None else f)
    topo = topology_costs(request, placements)
    costs = (policy.migration_cost * len(migrated) + policy.preemption_cost * len(preempted)
             + topo)
    thr -= costs
    min_share: float | None = None
    if objective == "fairness":
        if demands is None:
            demands = tenant_demands(request)
        min_share = min((placed_value.get(k, 0.0) / d for k, d in demands.items()),
                        default=0.0)
        value = min_share
    elif objective in ("jct", "makespan"):
        value = gained - costs
    else:
        value = thr
    return Evaluation(value, thr, tuple(migrated), tuple(preempted), min_share,
                      topology_cost=topo, interference_loss=interference_loss(plain, factors))


def eligible_on(job: Job, model: str, catalog: Mapping[str, GpuModel]) -> bool:
    """Whether `model` is eligible for `job` (re-exported for planners)."""
    spec = catalog.get(model)
    return spec is not None and model_eligible(job, model, spec)


# ------------------------------------------------ the levels of contract 5.3 / 5.4


def quota_usage_of(request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
                   models: Mapping[tuple[str, int], str] | None = None
                   ) -> dict[QuotaKey, float]:
    """Usage of every quota key (tenant, model or "*") by the placed jobs.

    The keys of each (tenant, model) pair are looked up once per call, and a job whose
    pair has none adds nothing (its size is not computed); the sums are the same, in the
    same order."""
    quotas = request.cluster.quotas
    if not quotas:
        return {}
    catalog = request.cluster.catalog()
    models = gpu_models_of(request) if models is None else models
    usage: dict[QuotaKey, float] = {}
    keys_of: dict[tuple[str, str], list[QuotaKey]] = {}
    get = placements.get
    for job in request.jobs:
        pl = get(job.name)
        if not pl:
            continue
        model = models[(pl[0].node, pl[0].gpu)]
        pair = (job.tenant, model)
        keys = keys_of.get(pair)
        if keys is None:
            keys = keys_of[pair] = quota_keys(quotas, job.tenant, model)
        if not keys:
            continue
        # a gang uses the GPUs it got (an elastic gang's n), other shapes their size
        size = quota_usage(job, catalog[model], len(pl))
        for key in keys:
            usage[key] = usage.get(key, 0.0) + size
    return usage


def _class_evaluations(request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
                       models: Mapping[tuple[str, int], str]
                       ) -> Iterator[tuple[int, list[Job], Evaluation]]:
    """Per priority class, from the highest: its jobs and `evaluate` over them alone
    (their own costs; for fairness, the demands of their own jobs). A job's co-location
    factor counts its co-residents of every class, so the factors come from the whole
    plan, once.

    One pass over the jobs sorts them into their classes (in request order within each);
    a compiled request (`compiled_infos`) lends each class its jobs' compiled values,
    which `evaluate` would read for the class's own request had it compiled it (these
    rules' values; an elastic gang's is computed on its placements' count as for a
    request that is not compiled)."""
    factors = colocation_factors(request.jobs, placements,
                                 interference_table(request.interference))
    infos = compiled_infos(request)
    get = placements.get
    same = same_placement
    #: priority -> (its jobs, their placements, moved, stopped, placed jobs)
    groups: dict[int, tuple[list[Job], dict[str, Sequence[Placement]], list[str],
                            list[str], list[_Placed]]] = {}
    for i, job in enumerate(request.jobs):
        p = job.priority
        g = groups.get(p)
        if g is None:
            g = groups[p] = ([], {}, [], [], [])
        g[0].append(job)
        name, current = job.name, job.current
        pl = get(name)
        if not pl:
            if current:
                g[3].append(name)
            continue
        g[1][name] = pl
        if current and pl is not current and not same(pl, current):
            g[2].append(name)
        elastic = job.elastic is not None
        if infos is not None and not elastic:
            info = infos[i]
            g[4].append((job, pl, info.values, info.obj_values, False))
        else:
            g[4].append((job, pl, None, None, elastic))
    # fairness: each class's demands, from the terms of the whole request's jobs (kept
    # beside it), summed in request order as `tenant_demands` of the class's jobs sums them
    demands: dict[int, dict[str, float]] = {}
    if request.policy.objective == "fairness":
        terms = beside(request, "demand_terms", _demand_terms)
        by_class: dict[int, list[tuple[str, float] | None]] = {p: [] for p in groups}
        for job, term in zip(request.jobs, terms, strict=True):
            by_class[job.priority].append(term)
        demands = {p: _demands_of(t) for p, t in by_class.items()}
    for p in sorted(groups, reverse=True):
        jobs, sub_placements, moved, stopped, placed = groups[p]
        sub = request.model_copy(update={"jobs": jobs})
        yield p, jobs, _score(sub, sub_placements, models, factors, moved, stopped, placed,
                              demands.get(p))


def level_values(request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
                 usage: Mapping[QuotaKey, float] | None = None) -> list[tuple[str, float]]:
    """The lexicographic levels of the plan, highest first: `("quota", guaranteed usage
    served)` when there are quotas, then `("priority <p>", value)` per class from the
    highest down, the value being the policy objective over the class's jobs (its own
    migration and preemption costs included; for fairness its minimum tenant share over
    its own demands). Empty for a request without levels (it means what it meant in v1).
    `usage`: `quota_usage_of(request, placements)` when the caller has it."""
    if not lexicographic_levels(request):
        return []
    out: list[tuple[str, float]] = []
    models = beside(request, "gpu_models", gpu_models_of)
    if request.cluster.quotas:
        if usage is None:
            usage = quota_usage_of(request, placements, models)
        out.append(("quota", guaranteed_served(request.cluster.quotas, usage)))
    out.extend((f"priority {p}", ev.objective_value)
               for p, _, ev in _class_evaluations(request, placements, models))
    return out


def fifo_order(request: PlanRequest) -> list[Job]:
    """The jobs of `request` sorted by `priority_key` (stable), kept beside the request's
    other precomputations (shared: not to be changed)."""
    return beside(request, "fifo_order", _fifo_order)


def _fifo_order(request: PlanRequest) -> list[Job]:
    return sorted(request.jobs, key=priority_key)


def level_key(request: PlanRequest, placements: Mapping[str, Sequence[Placement]]
              ) -> tuple[float, ...]:
    """The levels as a tuple that ranks plans lexicographically (rounded to 1e-9 so float
    noise does not decide); empty without levels. Each class contributes what its
    objective ranks by: `priority_fifo` whether each of its jobs is placed in priority
    order, then its throughput; `fairness` its minimum share, then its throughput; the
    other objectives their value."""
    if not lexicographic_levels(request):
        return ()
    out: list[float] = []
    models = beside(request, "gpu_models", gpu_models_of)
    if request.cluster.quotas:
        usage = quota_usage_of(request, placements, models)
        out.append(round(guaranteed_served(request.cluster.quotas, usage), 9))
    objective = request.policy.objective
    placed: dict[int, list[float]] = {}
    if objective == "priority_fifo":
        # each class's jobs in priority order: the request's order filtered (a stable
        # sort of a class's jobs is the stable sort of all the jobs, filtered)
        get = placements.get
        for j in fifo_order(request):
            flags = placed.get(j.priority)
            if flags is None:
                flags = placed[j.priority] = []
            flags.append(1.0 if get(j.name) else 0.0)
    for p, _, ev in _class_evaluations(request, placements, models):
        if objective == "priority_fifo":
            out.extend(placed[p])
            out.append(round(ev.throughput, 9))
        elif objective == "fairness":
            out.extend((round(ev.objective_value, 9), round(ev.throughput, 9)))
        else:
            out.append(round(ev.objective_value, 9))
    return tuple(out)
