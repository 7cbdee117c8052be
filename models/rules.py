"""Contract rules shared by every planner: eligibility, job size and value (section 4).

A model is eligible for a job when (a) the job's throughput map is empty/absent or lists the
model, (b) `allowed_models` is absent or lists it, (c) its memory covers `gpu_memory_gib`
(unknown memory never constrains), and (d) the shape fits the hardware: whole and shared
jobs need a model that can run whole GPUs (any model), MIG jobs need a MIG profile that
covers their demand.

Where each domain rule lives (the validator, `solver/validate.py`, re-derives what it
checks on purpose; nothing else does):

- this module: eligibility (`model_eligible`, `eligible_models`, `mig_profiles_for`,
  `profile_covers`), size and value (`job_size`, `job_value`, `job_values`; speed is
  `models.request.speed`), elastic gangs (contract 5.1: `allowed_sizes`, `speedup`,
  `job_value` on n GPUs, `remaining_on`), capacity fit with its one tolerance (`HOST_TOL`: `fits`,
  `memory_fits`, `share_fits` for a GPU share, `host_fits` / `host_room` for a node's host
  CPU and memory), the strict priority order (`priority_key`), the objectives' horizon
  (`HORIZON_S`), co-location interference (contract 5.2: `interference_table`,
  `colocation_factor`, `colocation_factors`, `shared_value`, `class_census`,
  `colocation_factor_cap`), quotas (`quota_chain`, `quota_keys`, `quota_usage`,
  `guaranteed_served`) and priority classes (`priority_classes`, `lexicographic_levels`);
- `models.catalog`: MIG geometry (profiles, valid layouts, `MIG_COMPUTE_SLICES`);
- `models.capacity`: the per-node / per-domain / per-model GPU capacity summary, and the
  domain of a node at each topology level (`Topology`); the gang topology rules
  (`required_levels`, `preferred_level`, `costed_level`, `topology_cost`) are here;
- `models.reasons`: the static reasons a job cannot be placed whatever the plan;
- `models.instance`: the compiled instance (`JobInfo`) and the occupancy (`ClusterState`);
- `models.objective`: the objectives and the fairness demands.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from models.catalog import GpuModel, MigProfileSpec
from models.request import (
    ANY_MODEL,
    InterferencePair,
    Job,
    Placement,
    PlanRequest,
    Quota,
    speed,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from models.capacity import Topology

#: Tolerance of every capacity comparison (host CPU / memory, GPU fractions and memory): the
#: validator's, so that nothing a planner accepts is rejected later.
HOST_TOL = 1e-9

#: Normalising horizon of the `jct` and `makespan` objectives (seconds).
HORIZON_S = 3600.0


@overload
def fits(need: float, cap: float, used: float = 0.0) -> bool: ...


@overload
def fits(need: float, cap: npt.NDArray[Any], used: float = 0.0) -> npt.NDArray[np.bool_]: ...


def fits(need: Any, cap: Any, used: Any = 0.0) -> Any:
    """The one capacity comparison: `used + need <= cap` up to `HOST_TOL` (element-wise when
    `cap` is a numpy array)."""
    return used + need <= cap + HOST_TOL


def memory_fits(need: float | None, cap: float | None) -> bool:
    """Whether `need` GiB fit in `cap` GiB (an unknown need or memory never constrains)."""
    return need is None or cap is None or fits(need, cap)


def share_fits(used: float, used_mem: float, fraction: float, mem: float,
               mem_cap: float | None) -> bool:
    """Whether a share of `fraction` and `mem` GiB fits on a non-MIG GPU already holding
    shares of `used` (fractions) and `used_mem` GiB (None = unknown memory: no limit)."""
    return fits(fraction, 1.0, used) and (mem_cap is None or fits(mem, mem_cap, used_mem))


def host_fits(cpu: float, mem: float, cpu_free: float | None, mem_free: float | None) -> bool:
    """Whether `cpu` millicores and `mem` GiB fit in what a node has free (None = no limit)."""
    return ((cpu_free is None or fits(cpu, cpu_free))
            and (mem_free is None or fits(mem, mem_free)))


def host_room(cpu_each: float, mem_each: float, cpu_free: float | None,
              mem_free: float | None, limit: int = 1 << 30) -> int:
    """How many parts of (`cpu_each`, `mem_each`) fit in what a node has free (<= limit)."""
    room = limit
    if cpu_free is not None and cpu_each > 0:
        room = min(room, math.floor((cpu_free + HOST_TOL) / cpu_each))
    if mem_free is not None and mem_each > 0:
        room = min(room, math.floor((mem_free + HOST_TOL) / mem_each))
    return max(room, 0)


def priority_key(job: Job) -> tuple[float, float, str]:
    """The strict order of `priority_fifo` and of every FIFO pass: weight desc, submitted_at
    asc, name."""
    sub = job.submitted_at if job.submitted_at is not None else math.inf
    return (-job.weight, sub, job.name)


def profile_covers(job: Job, profile: MigProfileSpec) -> bool:
    """Whether an instance of `profile` can host MIG job `job`: the profile it names, or
    one with at least its compute slices and memory."""
    if job.mig_profile is not None:
        return profile.name == job.mig_profile
    if job.mig is None:
        return False
    return (profile.compute_slices >= job.mig.compute_slices
            and fits(job.mig.memory_gib, profile.memory_gib))


def mig_profiles_for(job: Job, model: GpuModel) -> list[MigProfileSpec]:
    """The profiles of `model` that can host MIG job `job` (smallest first)."""
    out = [p for p in model.mig_profiles if profile_covers(job, p)]
    return sorted(out, key=lambda p: (p.compute_slices, p.memory_slices, p.media_extensions))


def model_eligible(job: Job, name: str, model: GpuModel) -> bool:
    """Whether `job` may be placed on GPUs of model `name` (ignoring capacity)."""
    if job.throughput and name not in job.throughput:
        return False
    if job.allowed_models is not None and name not in job.allowed_models:
        return False
    if job.shape == "mig":
        return bool(mig_profiles_for(job, model))
    return memory_fits(job.gpu_memory_gib, model.memory_gib)


def eligible_models(job: Job, catalog: Mapping[str, GpuModel]) -> list[str]:
    """Names of every catalog model `job` may run on."""
    return [n for n, m in catalog.items() if model_eligible(job, n, m)]


def job_size(job: Job, model: GpuModel) -> float:
    """size_j: GPUs for a gang, demanded compute slices / total for MIG, the share else."""
    if job.gpus is not None:
        return float(job.gpus)
    if job.gpu_share is not None:
        return job.gpu_share
    if job.mig is not None:
        return job.mig.compute_slices / model.compute_slices
    spec = model.profile(job.mig_profile or "")
    return spec.compute_slices / model.compute_slices if spec is not None else 0.0


def allowed_sizes(job: Job) -> list[int]:
    """The GPU counts a whole-GPU job may get, ascending: `[gpus]` for a fixed gang; for an
    elastic gang the integers in [min_gpus, max_gpus] that are keys of `speedup` (all of
    them when `speedup` is absent or empty). Empty for shared and MIG jobs."""
    if job.gpus is None:
        return []
    el = job.elastic
    if el is None:
        return [job.gpus]
    if not el.speedup:
        return list(range(el.min_gpus, el.max_gpus + 1))
    return sorted(n for n in map(int, el.speedup) if el.min_gpus <= n <= el.max_gpus)


def speedup(job: Job, n: int) -> float:
    """speedup_j[n]: the job's throughput on n GPUs relative to one GPU. Linear (n) for a
    fixed gang (so `speedup[gpus] = gpus`) and for an elastic gang without a curve."""
    el = job.elastic
    if el is None or not el.speedup:
        return float(n)
    return el.speedup[str(n)]


def job_value(job: Job, name: str, catalog: Mapping[str, GpuModel],
              n: int | None = None) -> float:
    """weight_j * size_j * speed_j(model): the job's throughput value on model `name`; a
    whole-GPU gang on n GPUs (default: its nominal `gpus`) is worth
    weight_j * speedup_j[n] * speed_j(model) (contract 5.1)."""
    if job.gpus is not None and (n is not None or job.elastic is not None):
        return job.weight * speedup(job, n or job.gpus) * speed(job, name, catalog)
    model = catalog[name]
    return job.weight * job_size(job, model) * speed(job, name, catalog)


def job_values(job: Job, names: Sequence[str], catalog: Mapping[str, GpuModel]
               ) -> dict[str, float]:
    """`job_value` of `job` at its nominal size on each model of `names`, in their order:
    the weight times the size (or the speed-up at the nominal size) is the same on every
    model unless the job is a MIG job, so it is computed once (the same products in the
    same order as `job_value`, hence the same floats)."""
    if job.gpus is not None and job.elastic is not None:
        scale = job.weight * speedup(job, job.gpus)
    elif (job.gpus is not None or job.gpu_share is not None) and names:
        scale = job.weight * job_size(job, catalog[names[0]])
    else:
        return {m: job_value(job, m, catalog) for m in names}
    return {m: scale * speed(job, m, catalog) for m in names}


def best_value(job: Job, name: str, catalog: Mapping[str, GpuModel]) -> float:
    """The job's highest throughput value on model `name` over its allowed sizes (its
    value for a job that is not an elastic gang)."""
    if job.elastic is None:
        return job_value(job, name, catalog)
    return max(job_value(job, name, catalog, n) for n in allowed_sizes(job))


def remaining_on(job: Job, n: int | None = None) -> float | None:
    """The job's remaining time at speed 1 on n GPUs: R_j * speedup[gpus] / speedup[n]
    (contract 5.1; `remaining_work` itself, R_j, is for the nominal `gpus`). None when the
    job gives no `remaining_work`."""
    r = job.remaining_work
    if r is None or job.gpus is None or n is None or n == job.gpus:
        return r
    return r * speedup(job, job.gpus) / speedup(job, n)


def required_levels(job: Job) -> tuple[str, ...]:
    """The topology levels a gang that may span nodes keeps all of its GPUs in one domain
    of (contract 5.5): v1's `same_domain` is the level "domain" (a node without a
    `topology_domain` a domain of its own), then `topology.required`. A single-node gang
    holds every level by construction."""
    out: tuple[str, ...] = ("domain",) if job.same_domain else ()
    req = job.topology.required if job.topology is not None else None
    if req is not None and req not in out:
        out = (*out, req)
    return out


def preferred_level(job: Job) -> str | None:
    """The job's preferred topology level (contract 5.5), if any."""
    return job.topology.preferred if job.topology is not None else None


def costed_level(job: Job, topology: Topology, cost: float) -> str | None:
    """The preferred level where a gang that may span nodes can pay topology costs: None
    without one, with a zero `cost`, or when a required level nests in it (the gang then
    spans one domain of it anyway)."""
    level = preferred_level(job)
    if level is None or cost <= 0:
        return None
    if any(topology.nested(r, level) for r in required_levels(job)):
        return None
    return level


def topology_cost(job: Job, nodes: Iterable[str], topology: Topology, cost: float) -> float:
    """What a placement of `job` on the nodes named `nodes` pays at its preferred level:
    `cost` per domain beyond the first that it spans (contract 5.5)."""
    level = preferred_level(job)
    if level is None or cost <= 0:
        return 0.0
    return cost * max(len(topology.domains(nodes, level)) - 1, 0)


def within_required(job: Job, nodes: Iterable[str], topology: Topology) -> bool:
    """Whether nodes named `nodes` lie in one domain of every required level of `job`."""
    names = list(nodes)
    return all(len(topology.domains(names, lv)) <= 1 for lv in required_levels(job))


#: (class a, class b) -> the speed factor of a job of class a beside a job of class b.
InterferenceTable = Mapping[tuple[str, str], float]


def interference_table(pairs: Iterable[InterferencePair]) -> dict[tuple[str, str], float]:
    """The request's `interference` list as (a, b) -> speed (pairs are unique, contract 5.2);
    pairs whose speed is exactly 1.0 are left out, since they change nothing."""
    return {(p.a, p.b): p.speed for p in pairs if p.speed != 1.0}


def colocation_factor(cls: str | None, co_classes: Iterable[str | None],
                      table: InterferenceTable) -> float:
    """The speed factor of a job of class `cls` on a GPU it shares with jobs of classes
    `co_classes` (its co-residents, itself excluded): the product over co-residents of
    table[(cls, c)]; an absent pair, or a job without a class on either side, is 1.0."""
    if cls is None or not table:
        return 1.0
    f = 1.0
    for c in co_classes:
        if c is not None:
            f *= table.get((cls, c), 1.0)
    return f


def shared_value(job: Job, name: str, catalog: Mapping[str, GpuModel], factor: float) -> float:
    """Contract 5.2: weight_j * gpu_share_j * speed_j(model) * factor, the value of shared job
    `job` on model `name` whose co-residents' factors multiply to `factor`."""
    return job_value(job, name, catalog) * factor


def colocation_factors(jobs: Sequence[Job], placements: Mapping[str, Sequence[Placement]],
                       table: InterferenceTable) -> dict[str, float]:
    """Per placed shared job with a class, its factor (`colocation_factor`) given the other
    shared jobs `placements` puts on the same GPU; jobs absent from the result have 1.0."""
    if not table:
        return {}
    on_gpu: dict[tuple[str, int], list[Job]] = {}
    for job in jobs:
        pl = placements.get(job.name)
        if job.gpu_share is not None and pl and pl[0].fraction is not None:
            on_gpu.setdefault((pl[0].node, pl[0].gpu), []).append(job)
    out: dict[str, float] = {}
    for residents in on_gpu.values():
        if len(residents) < 2:
            continue
        for job in residents:
            if job.colocation_class is not None:
                out[job.name] = colocation_factor(
                    job.colocation_class,
                    (o.colocation_class for o in residents if o is not job), table)
    return out


def class_census(jobs: Iterable[Job]) -> dict[str, tuple[int, float]]:
    """Per co-location class, (its shared jobs, their smallest gpu_share)."""
    out: dict[str, tuple[int, float]] = {}
    for job in jobs:
        if job.gpu_share is not None and job.colocation_class is not None:
            n, share = out.get(job.colocation_class, (0, 1.0))
            out[job.colocation_class] = (n + 1, min(share, job.gpu_share))
    return out


def colocation_factor_cap(job: Job, census: Mapping[str, tuple[int, float]],
                          table: InterferenceTable) -> float:
    """An upper bound of shared job `job`'s factor in any plan (`census`: `class_census`
    of the request's jobs). Only co-residents whose class speeds it up (s > 1) can raise
    it, each by at most the largest such s, and at most k of them fit beside it: k the
    fewest of (those jobs' count, itself excluded) and (how many of the smallest of their
    shares fit in 1 - its own share). Factors <= 1 only lower it and are taken as 1.
    Returns 1.0 when nothing can speed it up."""
    cls = job.colocation_class
    if cls is None or not table:
        return 1.0
    best = 1.0
    count = 0
    smallest = 1.0
    for other, (n, share) in census.items():
        s = table.get((cls, other), 1.0)
        if s > 1.0:
            best = max(best, s)
            count += n - 1 if other == cls else n
            smallest = min(smallest, share)
    if count <= 0:
        return 1.0
    room = 1.0 - (job.gpu_share or 0.0)
    k = min(count, math.floor((room + HOST_TOL) / smallest))
    return best ** max(k, 0)
# ---------------------------------------------------------------- quotas (contract 5.3)

#: A quota key: (tenant, model name or "*").
QuotaKey = tuple[str, str]


def quota_chain(quotas: Mapping[str, Quota], tenant: str) -> list[str]:
    """The tenants whose usage a job of `tenant` counts for: `tenant` itself when it has a
    quota, then its ancestors (nearest first). Empty for a tenant without a quota. The
    request's cross-checks guarantee the parent links are acyclic and known."""
    out: list[str] = []
    t: str | None = tenant
    while t is not None and t in quotas and t not in out:
        out.append(t)
        t = quotas[t].parent
    return out


def quota_keys(quotas: Mapping[str, Quota], tenant: str, model: str) -> list[QuotaKey]:
    """The quota keys a placement of a job of `tenant` on `model` adds usage to: for the
    tenant and each ancestor, `model` and `"*"` where that tenant guarantees or limits them."""
    out: list[QuotaKey] = []
    for t in quota_chain(quotas, tenant):
        q = quotas[t]
        out.extend((t, key) for key in (model, ANY_MODEL)
                   if key in q.guaranteed or key in q.limit)
    return out


def quota_usage(job: Job, model: GpuModel, n: int | None = None) -> float:
    """The usage one placement of `job` on `model` adds to each of its quota keys: its
    `size` (section 4), the one home of which is `job_size`; a gang placed on n GPUs uses
    n (an elastic gang's chosen size, contract 5.3)."""
    if n is not None and job.gpus is not None:
        return float(n)
    return job_size(job, model)


def quota_limit(quotas: Mapping[str, Quota], key: QuotaKey) -> float | None:
    """The limit of a quota key (None: unlimited)."""
    return quotas[key[0]].limit.get(key[1])


def guaranteed_served(quotas: Mapping[str, Quota], usage: Mapping[QuotaKey, float]) -> float:
    """The quota level: sum over tenants and keys of min(usage, guaranteed)."""
    return sum(min(usage.get((t, key), 0.0), g)
               for t, q in quotas.items() for key, g in q.guaranteed.items())


# ------------------------------------------------------- priority classes (contract 5.4)

def priority_classes(jobs: Iterable[Job]) -> list[int]:
    """The distinct `priority` values of `jobs`, highest first."""
    return sorted({j.priority for j in jobs}, reverse=True)


def lexicographic_levels(request: PlanRequest) -> bool:
    """Whether the request has the levels of contract 5.3 / 5.4 (quotas, or more than one
    priority class); without them it means exactly what it meant in v1."""
    return bool(request.cluster.quotas) or _classes_of(request) > 1


#: id(request) -> (weak reference to it, id and length of its job list, its number of
#: priority classes): a solve asks `lexicographic_levels` about ten times, and counting
#: the classes of 20,000 jobs costs milliseconds each time. The last few requests only.
_CLASSES: dict[int, tuple[weakref.ref[PlanRequest], int, int, int]] = {}
_CLASSES_MAX = 8
_CLASSES_LOCK = threading.Lock()


def _classes_of(request: PlanRequest) -> int:
    """`len(priority_classes(request.jobs))`, remembered per request object and job list
    (a new list, or one of another length, is counted again)."""
    key, jobs = id(request), request.jobs
    hit = _CLASSES.get(key)
    if hit is not None and hit[0]() is request and hit[1] == id(jobs) \
            and hit[2] == len(jobs):
        return hit[3]
    count = len(priority_classes(jobs))
    with _CLASSES_LOCK:
        while len(_CLASSES) >= _CLASSES_MAX:
            _CLASSES.pop(next(iter(_CLASSES)))
        _CLASSES[key] = (weakref.ref(request), id(jobs), len(jobs), count)
    return count
