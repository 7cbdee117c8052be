"""The objectives of docs/semantics.md, evaluated on a set of placements.

`evaluate(request, placements)` is what every planner reports as `objective_value`; the
validator recomputes it independently (solver/validate.py) so that a slip here is caught.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from models.capacity import Topology
from models.catalog import GpuModel
from models.request import Job, Placement, PlanRequest, speed
from models.rules import (
    HORIZON_S,
    best_value,
    eligible_models,
    job_value,
    model_eligible,
    preferred_level,
    remaining_on,
    topology_cost,
)


def same_placement(a: Sequence[Placement], b: Sequence[Placement]) -> bool:
    """True when two placement lists name the same GPUs / instances (order-free)."""
    def key(p: Placement) -> tuple[str, int, str, int]:
        return (p.node, p.gpu, p.mig.profile if p.mig else "", p.mig.start if p.mig else -1)
    return sorted(map(key, a)) == sorted(map(key, b))


def gpu_models_of(request: PlanRequest) -> dict[tuple[str, int], str]:
    """(node, gpu index) -> model name."""
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


def tenant_demands(request: PlanRequest) -> dict[str, float]:
    """D_k: per tenant, the sum over its jobs of their best value on an eligible model.

    One pass over the cluster and one over the jobs: linear in GPUs + jobs x models."""
    catalog = request.cluster.catalog()
    # Models the cluster has in each mode: MIG jobs need MIG GPUs, the others non-MIG ones.
    present: dict[bool, set[str]] = {False: set(), True: set()}
    for n in request.cluster.nodes:
        for g in n.gpus:
            present[g.mig_enabled].add(g.model)
    gpu_models: dict[tuple[str, int], str] | None = None
    out: dict[str, float] = {}
    for job in request.jobs:
        models = [m for m in eligible_models(job, catalog) if m in present[job.shape == "mig"]]
        if job.current:
            # A running job's own model counts even when no longer eligible.
            if gpu_models is None:
                gpu_models = gpu_models_of(request)
            models.append(gpu_models[(job.current[0].node, job.current[0].gpu)])
        if not models:
            continue
        best = max(best_value(job, m, catalog) for m in models)
        out[job.tenant] = out.get(job.tenant, 0.0) + best
    return {k: v for k, v in out.items() if v > 0}


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


def topology_costs(request: PlanRequest,
                   placements: Mapping[str, Sequence[Placement]]) -> float:
    """The topology costs of `placements`: per placed job with a preferred level,
    `policy.topology_cost` per domain beyond the first that it spans there."""
    cost = request.policy.topology_cost
    jobs = [j for j in request.jobs if preferred_level(j) is not None
            and placements.get(j.name)]
    if not jobs or cost <= 0:
        return 0.0
    topo = Topology(request.cluster)
    return sum(topology_cost(j, {p.node for p in placements[j.name]}, topo, cost)
               for j in jobs)


def evaluate(request: PlanRequest, placements: Mapping[str, Sequence[Placement]]) -> Evaluation:
    """Evaluate `request.policy.objective` for `placements` (job -> placements; absent =
    unplaced)."""
    catalog = request.cluster.catalog()
    models = gpu_models_of(request)
    policy = request.policy
    objective = policy.objective
    migrated: list[str] = []
    preempted: list[str] = []
    gained = 0.0
    thr = 0.0
    placed_value: dict[str, float] = {}
    for job in request.jobs:
        pl = placements.get(job.name)
        if job.current and not pl:
            preempted.append(job.name)
            continue
        if not pl:
            continue
        if job.current and not same_placement(pl, job.current):
            migrated.append(job.name)
        model = models[(pl[0].node, pl[0].gpu)]
        n = len(pl) if job.elastic is not None else None
        v = job_value(job, model, catalog, n)
        thr += v
        placed_value[job.tenant] = placed_value.get(job.tenant, 0.0) + v
        if objective in ("jct", "makespan"):
            gained += objective_value_of(job, model, catalog, objective, n)
    topo = topology_costs(request, placements)
    costs = (policy.migration_cost * len(migrated) + policy.preemption_cost * len(preempted)
             + topo)
    thr -= costs
    min_share: float | None = None
    if objective == "fairness":
        demands = tenant_demands(request)
        min_share = min((placed_value.get(k, 0.0) / d for k, d in demands.items()),
                        default=0.0)
        value = min_share
    elif objective in ("jct", "makespan"):
        value = gained - costs
    else:
        value = thr
    return Evaluation(value, thr, tuple(migrated), tuple(preempted), min_share, topo)


def eligible_on(job: Job, model: str, catalog: Mapping[str, GpuModel]) -> bool:
    """Whether `model` is eligible for `job` (re-exported for planners)."""
    spec = catalog.get(model)
    return spec is not None and model_eligible(job, model, spec)
