"""The request side of the wire contract: PlanRequest, Cluster, Node, Gpu, Job, Policy.

Everything is checked at the boundary (pydantic v2, unknown fields forbidden) so that the
solver only ever sees consistent input: unique names, one demand shape per job, finite
non-negative numbers within sane upper bounds, GPU model names that the catalog (or
`cluster.gpu_models`) knows, MIG layouts that are valid for their model, and `current`
placements that name GPUs that exist.

Upper bounds (documented in the OpenAPI schema as `maximum`) are far beyond any real
cluster; they exist so that no finite number can overflow the planner's arithmetic (CP-SAT
needs every scaled coefficient, and sums of them, inside 64-bit integers):

| field | maximum | for scale |
| --- | --- | --- |
| `Node.cpu_millicores`, `Job.cpu_millicores` | 1e8 (100,000 cores) | largest hosts: ~1,000 cores |
| `Node.memory_gib`, `Job.host_memory_gib` | 1e6 GiB (1 PiB) | largest hosts: ~32 TiB |
| `Job.gpu_memory_gib`, `MigDemand.memory_gib` | 1e4 GiB | largest GPUs: ~192 GiB |
| `Job.weight` | 1e6 | priorities are usually 1..100 |
| `Job.throughput` values | 1e3 | relative speeds are usually 0.1..10 |
| `Job.remaining_work` | 1e9 s (~31 years) | |
| `Job.submitted_at` | 1e12 s (seconds, not milliseconds) | Unix time now: ~1.8e9 |
| `Policy.migration_cost`, `Policy.preemption_cost` | 1e6 | objective units |
| `Gpu.index`, `Placement.gpu` | 65,535 | GPUs per node: <= 16 |
| `Elastic.speedup` values | 1e4 | a linear curve reaches 4,096 |
| `PlanRequest.interference` | 10,000 pairs | Gavel's matrix: ~50 pairs |

Elastic gangs (contract 5.1): `Job.elastic` is checked in `_elastic_errors` (the field
paths of the 422s: `jobs.<i>.elastic` on a job that is not a whole-GPU gang,
`jobs.<i>.elastic.max_gpus` below `min_gpus`, `jobs.<i>.elastic.speedup.<key>` for a key
that is not an integer in the range, `jobs.<i>.gpus` when the nominal size is not allowed).

Co-location interference (contract 5.2): `Job.colocation_class` is accepted on shared jobs
only, every `interference` speed lies in (0, 2], and an (a, b) pair is given once. Class
names are not cross-checked: a class that no job carries, or a job class that no pair
names, is legal (an absent pair means 1.0, and one interference matrix, Gavel's, serves
every request whatever subset of its classes the jobs use).
| `Quota.guaranteed`, `Quota.limit` values | 1e7 (GPUs) | largest clusters: ~1e5 GPUs |
| `Job.priority` | -2^31 .. 2^31 - 1 | Kubernetes PriorityClass values: int32 |

Quotas (contract 5.3, `Cluster.quotas`) are checked as a whole (`quota_errors`): a parent
must be a tenant of the map, the parent links must not form a cycle, a key is `"*"` or a
model the catalog knows, the children of a tenant guarantee on each key no more than the
tenant itself (a model key the parent does not name is compared with the parent's `"*"`
guarantee), and a tenant's guarantee on a key never exceeds its own limit on that key (a
guarantee above the limit could never be served: we reject it rather than guess which of
the two the user meant).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from models.catalog import BUILTIN_CATALOG, GpuModel, Instance, layout_violations

#: Upper bounds of the numeric fields (see the module docstring).
MAX_MILLICORES = 1e8
MAX_HOST_MEMORY_GIB = 1e6
MAX_GPU_MEMORY_GIB = 1e4
MAX_WEIGHT = 1e6
MAX_SPEED = 1e3
MAX_REMAINING_WORK_S = 1e9
MAX_SUBMITTED_AT_S = 1e12
MAX_COST = 1e6
MAX_GPU_INDEX = 65535
MAX_SPEEDUP = 1e4
MAX_GANG_GPUS = 4096
MAX_INTERFERENCE_PAIRS = 10_000
#: Largest co-location speed factor of contract 5.2.
MAX_INTERFERENCE_SPEED = 2.0
MAX_QUOTA = 1e7
#: The quota key that counts usage over every model.
ANY_MODEL = "*"

Millicores = Annotated[float, Field(ge=0, le=MAX_MILLICORES, allow_inf_nan=False)]
HostMemory = Annotated[float, Field(ge=0, le=MAX_HOST_MEMORY_GIB, allow_inf_nan=False)]
GpuMemory = Annotated[float, Field(ge=0, le=MAX_GPU_MEMORY_GIB, allow_inf_nan=False)]
Speed = Annotated[float, Field(ge=0, le=MAX_SPEED, allow_inf_nan=False)]
Cost = Annotated[float, Field(ge=0, le=MAX_COST, allow_inf_nan=False)]
GpuIndex = Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)]
Speedup = Annotated[float, Field(gt=0, le=MAX_SPEEDUP, allow_inf_nan=False)]

Objective = Literal["throughput", "fairness", "makespan", "priority_fifo", "jct"]
SolverName = Literal["auto", "cp_sat", "milp", "heuristic"]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MigInstance(_Wire):
    """A MIG GPU instance: a profile at a start memory slice."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = Field(min_length=1, examples=["3g.40gb"])
    start: int = Field(ge=0, le=7)

    def key(self) -> Instance:
        return Instance(self.profile, self.start)


class Placement(_Wire):
    """One GPU of a placement: a whole GPU, a MIG instance on it, or a fraction of it."""

    # For OpenAPI: not both a MIG instance and a fraction.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": {
        "required": ["mig", "fraction"],
        "properties": {"mig": {"type": "object"}, "fraction": {"type": "number"}}}})

    node: str = Field(min_length=1)
    gpu: GpuIndex
    mig: MigInstance | None = None
    fraction: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_kind(self) -> Placement:
        if self.mig is not None and self.fraction is not None:
            raise ValueError("a placement is a MIG instance or a fraction, not both")
        return self


class Gpu(_Wire):
    """One physical GPU of a node."""

    # For OpenAPI: MIG instances only on a GPU whose mig_enabled is true.
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "if": {"required": ["mig_instances"], "properties": {"mig_instances": {"minItems": 1}}},
        "then": {"required": ["mig_enabled"], "properties": {"mig_enabled": {"const": True}}},
    })

    index: GpuIndex
    model: str = Field(min_length=1, examples=["A100-SXM4-80GB"])
    healthy: bool = True
    mig_enabled: bool = False
    mig_instances: list[MigInstance] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mig_only_when_enabled(self) -> Gpu:
        if self.mig_instances and not self.mig_enabled:
            raise PydanticCustomError(
                "mig_on_non_mig_gpu",
                "MIG instances given for a GPU whose mig_enabled is false",
            )
        return self


class Node(_Wire):
    """A host with GPUs, optional host capacity and an optional topology domain."""

    name: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    schedulable: bool = True
    topology_domain: str | None = None
    #: topology level -> this node's domain at that level, one entry per
    #: `Cluster.topology_levels` (contract 5.5)
    topology: dict[str, Annotated[str, Field(min_length=1)]] = Field(
        default_factory=dict, examples=[{"zone": "z1", "block": "b2", "rack": "r7"}])
    cpu_millicores: Millicores | None = None
    memory_gib: HostMemory | None = None
    gpus: list[Gpu] = Field(default_factory=list)

    @field_validator("gpus")
    @classmethod
    def _unique_indices(cls, gpus: list[Gpu]) -> list[Gpu]:
        seen: set[int] = set()
        for g in gpus:
            if g.index in seen:
                raise ValueError(f"duplicate GPU index {g.index}")
            seen.add(g.index)
        return gpus


QuotaAmount = Annotated[float, Field(ge=0, le=MAX_QUOTA, allow_inf_nan=False)]


class Quota(_Wire):
    """A tenant's quota (contract 5.3): GPUs guaranteed and GPUs at most, per model name or
    `"*"` (all models), and an optional parent whose usage includes this tenant's.

    Usage on a key is the sum of the `size` of the tenant's placed jobs there (a MIG slice
    counts its compute fraction, a share its fraction). A key absent from `guaranteed`
    guarantees nothing; a key absent from `limit` is unlimited."""

    guaranteed: dict[str, QuotaAmount] = Field(default_factory=dict,
                                               examples=[{"*": 8, "H100-SXM5-80GB": 4}])
    limit: dict[str, QuotaAmount] = Field(default_factory=dict, examples=[{"*": 16}])
    parent: str | None = Field(default=None, min_length=1)


class Cluster(_Wire):
    """The cluster snapshot: nodes, optional GPU model overrides and tenant quotas."""

    nodes: list[Node] = Field(default_factory=list)
    gpu_models: dict[str, GpuModel] = Field(default_factory=dict)
    #: topology level names, widest first; the node itself is the implicit narrowest
    #: level "host" (contract 5.5)
    topology_levels: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, examples=[["zone", "block", "rack"]])
    #: tenant -> its quota (contract 5.3); tenants absent are not limited.
    quotas: dict[str, Quota] = Field(default_factory=dict)

    def catalog(self) -> dict[str, GpuModel]:
        """The effective catalog: built-in models overridden/extended by `gpu_models`."""
        return {**BUILTIN_CATALOG, **self.gpu_models}


class MigDemand(_Wire):
    """A MIG demand: an instance with at least this many compute slices and memory."""

    compute_slices: int = Field(ge=1, le=8)
    memory_gib: GpuMemory = 0.0


class Elastic(_Wire):
    """An elastic gang's sizes (contract 5.1): the planner picks n GPUs among the allowed
    sizes, the integers in [min_gpus, max_gpus] that are keys of `speedup` (every integer
    of the range, with speedup n, when `speedup` is absent or empty)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"min_gpus": 2, "max_gpus": 8, "speedup": {"2": 1.9, "4": 3.5, "8": 6.0}}]})

    min_gpus: int = Field(ge=1, le=MAX_GANG_GPUS)
    max_gpus: int = Field(ge=1, le=MAX_GANG_GPUS)
    #: "<n>" -> throughput on n GPUs relative to one GPU (JSON keys are strings)
    speedup: dict[str, Speedup] = Field(default_factory=dict)


class JobTopology(_Wire):
    """A gang's topology levels (contract 5.5): `required` keeps all of its GPUs in one
    domain of that level; `preferred` costs `policy.topology_cost` per domain beyond the
    first that it spans at that level."""

    required: str | None = Field(default=None, min_length=1, examples=["block"])
    preferred: str | None = Field(default=None, min_length=1, examples=["rack"])


#: JSON Schema of "exactly one demand shape": one branch per shape, each matching when
#: that shape is given and not null (the `_one_shape` validator's rule, for OpenAPI).
_ONE_SHAPE_SCHEMA: JsonDict = {"oneOf": [
    {"required": [s], "properties": {s: {"not": {"type": "null"}}}}
    for s in ("gpus", "mig", "mig_profile", "gpu_share")]}


class Job(_Wire):
    """A job: training or inference, with exactly one demand shape."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_ONE_SHAPE_SCHEMA)

    name: str = Field(min_length=1)
    kind: Literal["training", "inference"] = "training"
    tenant: str = "default"
    weight: float = Field(default=1.0, gt=0, le=MAX_WEIGHT, allow_inf_nan=False)
    # Demand shapes (exactly one).
    gpus: int | None = Field(default=None, ge=1, le=MAX_GANG_GPUS)
    single_node: bool = True
    same_domain: bool = False
    topology: JobTopology | None = None
    mig: MigDemand | None = None
    mig_profile: str | None = Field(default=None, min_length=1)
    gpu_share: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    #: v1.1 elastic gang (whole-GPU jobs only): the planner picks its size
    elastic: Elastic | None = None
    # Eligibility and host resources.
    gpu_memory_gib: GpuMemory | None = None
    throughput: dict[str, Speed] | None = None
    allowed_models: list[str] | None = None
    cpu_millicores: Millicores | None = None
    host_memory_gib: HostMemory | None = None
    # Running state.
    preemptible: bool = True
    current: list[Placement] | None = Field(default=None, min_length=1)
    remaining_work: float | None = Field(default=None, ge=0, le=MAX_REMAINING_WORK_S,
                                         allow_inf_nan=False)
    submitted_at: float | None = Field(default=None, ge=0, le=MAX_SUBMITTED_AT_S,
                                       allow_inf_nan=False)
    # Co-location interference (contract 5.2; shared jobs only).
    colocation_class: str | None = Field(default=None, min_length=1, max_length=253)
    #: Strict priority class (contract 5.4): higher classes are served first.
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1)

    @model_validator(mode="after")
    def _one_shape(self) -> Job:
        shapes = [
            s for s, v in (("gpus", self.gpus), ("mig", self.mig),
                           ("mig_profile", self.mig_profile), ("gpu_share", self.gpu_share))
            if v is not None
        ]
        if len(shapes) != 1:
            raise PydanticCustomError(
                "demand_shape",
                "a job needs exactly one demand shape (gpus, mig, mig_profile or gpu_share); "
                "got {got}",
                {"got": ", ".join(shapes) or "none"},
            )
        cur = self.current
        if cur is not None:
            if self.gpus is not None:
                if len(cur) != self.gpus or any(p.mig or p.fraction for p in cur):
                    raise ValueError(f"current must list {self.gpus} whole-GPU placements")
                if len({(p.node, p.gpu) for p in cur}) != len(cur):
                    raise ValueError("current lists the same GPU twice")
            elif self.gpu_share is not None:
                if len(cur) != 1 or cur[0].fraction is None or cur[0].mig is not None:
                    raise ValueError("current of a shared job is one placement with a fraction")
            elif len(cur) != 1 or cur[0].mig is None:
                raise ValueError("current of a MIG job is one placement with a mig instance")
        return self

    @property
    def shape(self) -> Literal["whole", "mig", "share"]:
        if self.gpus is not None:
            return "whole"
        if self.gpu_share is not None:
            return "share"
        return "mig"


class Policy(_Wire):
    """How to plan: objective, backend, limits and the costs of disturbing running jobs."""

    objective: Objective = "throughput"
    solver: SolverName = "auto"
    milp_backend: Literal["cbc", "highs"] = "cbc"
    time_limit_s: float = Field(default=10.0, gt=0, le=3600, allow_inf_nan=False)
    mip_gap: float = Field(default=0.0001, ge=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    threads: int | None = Field(default=None, ge=1, le=256)
    #: Work limits instead of wall-clock decisions: with `seed` and `threads: 1`, the same
    #: request gives the same plan (docs/semantics.md).
    deterministic: bool = False
    migration_cost: Cost = 0.5
    preemption_cost: Cost = 1.0
    allow_preemption: bool = True
    allow_mig_reconfiguration: bool = True
    #: objective units per domain beyond the first that a gang spans at its preferred
    #: topology level (contract 5.5)
    topology_cost: Cost = 0.1


class InterferencePair(_Wire):
    """Contract 5.2: a job of class `a` runs at `speed` times its own speed while it shares
    a GPU with a job of class `b` (not symmetric)."""

    a: str = Field(min_length=1, max_length=253, examples=["resnet50"])
    b: str = Field(min_length=1, max_length=253, examples=["transformer"])
    speed: float = Field(gt=0, le=MAX_INTERFERENCE_SPEED, allow_inf_nan=False,
                         examples=[0.72])


def _err(loc: tuple[str | int, ...], msg: str) -> InitErrorDetails:
    return InitErrorDetails(
        type=PydanticCustomError("invalid_reference", msg),
        loc=loc,
        input=None,
    )


class PlanRequest(_Wire):
    """A planning request: the cluster snapshot, the jobs and the policy."""

    cluster: Cluster
    jobs: list[Job] = Field(default_factory=list)
    policy: Policy = Field(default_factory=Policy)
    #: Co-location interference factors (contract 5.2); empty = none.
    interference: list[InterferencePair] = Field(default_factory=list,
                                                 max_length=MAX_INTERFERENCE_PAIRS)

    #: Set once the cross-checks passed: pydantic hands a validated instance back as it is
    #: (instances are never revalidated) but still runs this after-validator on it, which
    #: costs tens of milliseconds on a large request.
    _cross_checked: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _cross_checks(self) -> PlanRequest:
        if self._cross_checked:
            return self
        errors = list(_request_errors(self))
        if errors:
            raise ValidationError.from_exception_data("PlanRequest", errors)
        self._cross_checked = True
        return self


def closest_models(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known model names closest to `name` (difflib, case-insensitive), best first."""
    by_folded: dict[str, str] = {}
    for k in known:
        by_folded.setdefault(k.casefold(), k)
    hits = difflib.get_close_matches(name.casefold(), list(by_folded), n=n, cutoff=0.4)
    return [by_folded[h] for h in hits]


def unknown_model_message(name: str, catalog: Mapping[str, GpuModel]) -> str:
    """The error for a model name in neither the catalog nor cluster.gpu_models."""
    close = closest_models(name, catalog)
    hint = (f"; did you mean {', '.join(repr(c) for c in close)}?" if close
            else f"; known models: {', '.join(sorted(catalog))}")
    return f"GPU model {name!r} is in neither the catalog nor cluster.gpu_models{hint}"


def unknown_job_models(job: Job, catalog: Mapping[str, GpuModel]
                       ) -> list[tuple[tuple[str | int, ...], str]]:
    """(location within the job, name) of each model name in `throughput` or
    `allowed_models` that the effective catalog does not know."""
    out: list[tuple[tuple[str | int, ...], str]] = [
        (("throughput", name), name) for name in job.throughput or {} if name not in catalog]
    out.extend((("allowed_models", i), name) for i, name in enumerate(job.allowed_models or [])
               if name not in catalog)
    return out


def _request_errors(req: PlanRequest) -> list[InitErrorDetails]:
    """Cross-object checks that a single field validator cannot see."""
    errors: list[InitErrorDetails] = []
    catalog = req.cluster.catalog()
    gpus: dict[tuple[str, int], Gpu] = {}
    seen_nodes: set[str] = set()
    for ni, node in enumerate(req.cluster.nodes):
        if node.name in seen_nodes:
            errors.append(_err(("cluster", "nodes", ni, "name"),
                               f"duplicate node name {node.name!r}"))
        seen_nodes.add(node.name)
        for gi, gpu in enumerate(node.gpus):
            loc: tuple[str | int, ...] = ("cluster", "nodes", ni, "gpus", gi)
            gpus[(node.name, gpu.index)] = gpu
            model = catalog.get(gpu.model)
            if model is None:
                errors.append(_err((*loc, "model"), unknown_model_message(gpu.model, catalog)))
                continue
            if gpu.mig_enabled and not model.mig_capable:
                errors.append(_err((*loc, "mig_enabled"),
                                   f"model {gpu.model} is not MIG-capable"))
                continue
            if gpu.mig_instances:
                bad = layout_violations(model, [m.key() for m in gpu.mig_instances])
                if bad:
                    errors.append(_err((*loc, "mig_instances"),
                                       "invalid MIG layout: " + "; ".join(bad)))
    seen_jobs: set[str] = set()
    for ji, job in enumerate(req.jobs):
        if job.name in seen_jobs:
            errors.append(_err(("jobs", ji, "name"), f"duplicate job name {job.name!r}"))
        seen_jobs.add(job.name)
        errors.extend(_err(("jobs", ji, *where), unknown_model_message(name, catalog))
                      for where, name in unknown_job_models(job, catalog))
        if job.mig_profile is not None and not any(
            m.profile(job.mig_profile) for m in catalog.values()
        ):
            errors.append(_err(("jobs", ji, "mig_profile"),
                               f"no model in the catalog has MIG profile {job.mig_profile!r}"))
        errors.extend(_elastic_errors(job, ji))
        for pi, p in enumerate(job.current or []):
            ploc: tuple[str | int, ...] = ("jobs", ji, "current", pi)
            held = gpus.get((p.node, p.gpu))
            if held is None:
                what = "node" if p.node not in seen_nodes else "GPU"
                errors.append(_err(ploc, f"current placement names a missing {what}: "
                                         f"{p.node}/{p.gpu}"))
                continue
            if p.mig is not None:
                if not held.mig_enabled:
                    errors.append(_err((*ploc, "mig"),
                                       f"MIG placement on non-MIG GPU {p.node}/{p.gpu}"))
                elif p.mig not in held.mig_instances:
                    errors.append(_err((*ploc, "mig"),
                                       f"instance {p.mig.profile}@{p.mig.start} is not in the "
                                       f"current layout of {p.node}/{p.gpu}"))
            elif held.mig_enabled:
                errors.append(_err(ploc, f"whole or shared placement on MIG GPU "
                                         f"{p.node}/{p.gpu}"))
    errors.extend(_topology_errors(req))
    errors.extend(_interference_errors(req))
    errors.extend(_err(loc, msg) for loc, msg in quota_errors(req.cluster.quotas, catalog))
    return errors


def quota_errors(quotas: Mapping[str, Quota], catalog: Mapping[str, GpuModel]
                 ) -> list[tuple[tuple[str | int, ...], str]]:
    """(field path, message) of each inconsistency of `cluster.quotas` (module doc)."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    base: tuple[str, ...] = ("cluster", "quotas")
    for tenant, q in quotas.items():
        for part in ("guaranteed", "limit"):
            out.extend(((*base, tenant, part, key), unknown_model_message(key, catalog))
                       for key in getattr(q, part) if key != ANY_MODEL and key not in catalog)
        for key, g in q.guaranteed.items():
            lim = q.limit.get(key)
            if lim is not None and g > lim:
                out.append(((*base, tenant, "guaranteed", key),
                            f"tenant {tenant!r} guarantees {g:g} on {key!r}, above its "
                            f"limit {lim:g}"))
        if q.parent is not None and q.parent not in quotas:
            out.append(((*base, tenant, "parent"),
                        f"parent {q.parent!r} of tenant {tenant!r} has no quota entry"))
    cyclic = _quota_cycle(quotas)
    if cyclic:
        out.append(((*base, cyclic[0], "parent"),
                    "quota parents form a cycle: " + " -> ".join([*cyclic, cyclic[0]])))
        return out
    children: dict[str, list[str]] = {}
    for tenant, q in quotas.items():
        if q.parent is not None and q.parent in quotas:
            children.setdefault(q.parent, []).append(tenant)
    for parent, kids in children.items():
        keys = {k for kid in kids for k in quotas[kid].guaranteed}
        for key in sorted(keys):
            total = sum(quotas[kid].guaranteed.get(key, 0.0) for kid in kids)
            own = quotas[parent].guaranteed
            cap = own.get(key, own.get(ANY_MODEL, 0.0))
            if total > cap * (1 + 1e-12) + 1e-9:
                out.append(((*base, parent, "guaranteed", key),
                            f"the children of {parent!r} ({', '.join(sorted(kids))}) "
                            f"guarantee {total:g} on {key!r}, more than its {cap:g}"))
    return out


def _quota_cycle(quotas: Mapping[str, Quota]) -> list[str]:
    """The tenants of one cycle of parent links (empty when there is none)."""
    done: set[str] = set()
    for start in quotas:
        path: list[str] = []
        on_path: set[str] = set()
        t: str | None = start
        while t is not None and t in quotas and t not in done:
            if t in on_path:
                return path[path.index(t):]
            path.append(t)
            on_path.add(t)
            t = quotas[t].parent
        done.update(path)
    return []


def _interference_errors(req: PlanRequest) -> list[InitErrorDetails]:
    """Contract 5.2's cross-checks: a class on shared jobs only, each (a, b) pair once."""
    errors = [_err(("jobs", ji, "colocation_class"),
                   f"colocation_class is for shared jobs (gpu_share) only; job {job.name!r} "
                   f"is a {job.shape} job")
              for ji, job in enumerate(req.jobs)
              if job.colocation_class is not None and job.gpu_share is None]
    seen: set[tuple[str, str]] = set()
    for i, pair in enumerate(req.interference):
        if (pair.a, pair.b) in seen:
            errors.append(_err(("interference", i),
                               f"duplicate interference pair ({pair.a!r}, {pair.b!r})"))
        seen.add((pair.a, pair.b))
    return errors


def _elastic_errors(job: Job, ji: int) -> list[InitErrorDetails]:
    """The 422s of contract 5.1 (module doc): whole-GPU jobs only, min <= max, speedup
    keys integers in the range (canonical decimal), the nominal `gpus` an allowed size."""
    el = job.elastic
    if el is None:
        return []
    loc: tuple[str | int, ...] = ("jobs", ji, "elastic")
    if job.gpus is None:
        return [_err(loc, "elastic applies to whole-GPU jobs (gpus) only, not to shared "
                          "or MIG jobs")]
    if el.min_gpus > el.max_gpus:
        return [_err((*loc, "max_gpus"),
                     f"max_gpus {el.max_gpus} is below min_gpus {el.min_gpus}")]
    errors: list[InitErrorDetails] = []
    for key in el.speedup:
        n = int(key) if key.isascii() and key.isdigit() else None
        if n is None or str(n) != key:
            errors.append(_err((*loc, "speedup", key),
                               f"speedup key {key!r} is not an integer GPU count"))
        elif not el.min_gpus <= n <= el.max_gpus:
            errors.append(_err((*loc, "speedup", key),
                               f"speedup key {n} is outside [{el.min_gpus}, {el.max_gpus}]"))
    if errors:
        return errors
    if not el.min_gpus <= job.gpus <= el.max_gpus or (el.speedup
                                                      and str(job.gpus) not in el.speedup):
        errors.append(_err(("jobs", ji, "gpus"),
                           f"gpus {job.gpus} is not an allowed size of the elastic gang"))
    return errors


#: The implicit topology levels: every node is a domain of its own at "host"; "domain" is
#: v1's `topology_domain` (a node without one a domain of its own). Neither may be listed
#: in `Cluster.topology_levels`.
IMPLICIT_LEVELS = ("host", "domain")


def _topology_errors(req: PlanRequest) -> list[InitErrorDetails]:
    """Topology levels (contract 5.5): levels listed once and not implicit, each node
    naming a domain for every level and for no other, jobs naming known levels."""
    errors: list[InitErrorDetails] = []
    levels = req.cluster.topology_levels
    seen: set[str] = set()
    for i, level in enumerate(levels):
        if level in IMPLICIT_LEVELS:
            errors.append(_err(("cluster", "topology_levels", i),
                               f"topology level {level!r} is implicit and cannot be listed"))
        elif level in seen:
            errors.append(_err(("cluster", "topology_levels", i),
                               f"duplicate topology level {level!r}"))
        seen.add(level)
    for ni, node in enumerate(req.cluster.nodes):
        for level in node.topology:
            if level not in seen or level in IMPLICIT_LEVELS:
                errors.append(_err(("cluster", "nodes", ni, "topology", level),
                                   _unknown_level(level, levels)))
        missing = [lv for lv in levels if lv not in node.topology and lv not in IMPLICIT_LEVELS]
        if missing:
            errors.append(_err(("cluster", "nodes", ni, "topology"),
                               f"node {node.name!r} names no domain for topology level(s) "
                               f"{', '.join(repr(m) for m in missing)}"))
    known = seen | set(IMPLICIT_LEVELS)
    for ji, job in enumerate(req.jobs):
        topo = job.topology
        if topo is None:
            continue
        for where, named in (("required", topo.required), ("preferred", topo.preferred)):
            if named is not None and named not in known:
                errors.append(_err(("jobs", ji, "topology", where),
                                   _unknown_level(named, levels)))
    return errors


def _unknown_level(level: str, levels: list[str]) -> str:
    """The error for a topology level that the cluster does not define."""
    listed = ", ".join(repr(lv) for lv in levels) or "none"
    return (f"unknown topology level {level!r} (cluster.topology_levels: {listed}; "
            f"'host' and 'domain' are implicit)")


def speed(job: Job, model_name: str, catalog: Mapping[str, GpuModel]) -> float:
    """speed_j(model): the throughput map entry if the map is non-empty, else the catalog's.

    A model absent from a non-empty throughput map has speed 0 (it is ineligible).
    """
    if job.throughput:
        return job.throughput.get(model_name, 0.0)
    spec = catalog.get(model_name)
    return spec.relative_speed if spec is not None else 0.0

