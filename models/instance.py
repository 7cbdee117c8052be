"""The compiled instance every planner works on: jobs against the cluster, and occupancy.

Both the solver (formulation, bound, share re-pack) and the heuristics import it; it holds
no rule of its own (those live in `models.rules`, see there) but applies them once per
request:

- `compile_jobs(request)` turns every job into a `JobInfo`: its shape, the models present
  in the cluster it may run on with their values, its MIG profiles, host requests and
  resolved current placement. The rules are asked once per class of jobs, the jobs
  with the same shape, size, weight, eligibility and speeds: their JobInfos share that
  class's `JobKind` and its value dicts. The result is cached per request object
  (`models.cache.per_request`, re-exported here with `forget_compiled`, which drops it
  after an in-place edit; other per-request precomputations, such as the static reasons,
  are kept beside it).
- `ClusterState(request)` is the occupancy: for every GPU what occupies it (a whole-GPU
  job, shared fractions and memory, or MIG instances and the jobs they host) and, for
  every node, the free host CPU/memory, with O(node) updates. Three indexes answer "where
  can this go?" without scanning the cluster:

  - whole GPUs: per model, buckets of nodes by their number of free whole GPUs of that
    model (and free counts per model and per (domain, model));
  - shared GPUs: per model, the partially shared GPUs bucketed by their remaining fraction;
  - MIG GPUs: per model, GPUs grouped by their layout signature (instances hosting jobs,
    free instances of the current layout), since what fits depends only on that signature.

  Only healthy GPUs on schedulable nodes enter the indexes (they alone take new
  placements); a kept running job may still occupy an unhealthy GPU or a cordoned node.

  With `cluster.quotas`, it also tracks the usage of every quota key (contract 5.3;
  `quota_fits`): `conflicts` refuses a placement that would break a limit, except a
  non-preemptible running job kept in place (it may already exceed it: then nothing else
  of its tenants may be added on that key).
- `MigGeometry` caches the MIG layout queries of the placers (positions, options, the
  largest instance still creatable).

Memory is O(GPUs + jobs): there is no jobs x GPUs structure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from models import GpuModel, Instance, Job, MigInstance, Node, Placement, PlanRequest
from models.cache import forget_compiled as forget_compiled
from models.cache import per_request as per_request
from models.capacity import usable, usable_summary
from models.catalog import MIG_COMPUTE_SLICES, instance_positions, is_valid_layout
from models.objective import (
    objective_factor_is_per_job,
    objective_value_of,
    objective_values,
    values_on,
)
from models.request import speed
from models.rules import (
    HOST_TOL,
    QuotaKey,
    allowed_sizes,
    fits,
    host_fits,
    host_room,
    job_value,
    job_values,
    mig_profiles_for,
    model_eligible,
    quota_keys,
    quota_usage,
    share_fits,
)

#: Number of buckets of the remaining fraction of a shared GPU.
SHARE_BUCKETS = 20


@dataclass(slots=True, eq=False)
class JobKind:
    """What the jobs of one class share once compiled (`_class_key`: the same shape, sizes,
    weight, eligibility and speeds): their JobInfos hold this one object and its dicts, so
    a pass over many jobs may work once per kind (keyed by the object's identity while the
    JobInfos live). Never mutated."""

    shape: str
    #: resources one placement takes, in GPU equivalents (`JobInfo.size`)
    size: float
    #: eligible present models -> value (`JobInfo.values`)
    values: dict[str, float]
    #: the policy objective's values (`JobInfo.obj_values`) when they are the kind's (every
    #: objective without a per-job factor); None when they are each job's own
    obj_values: dict[str, float] | None
    #: MIG jobs: model -> covering profile names, smallest first (`JobInfo.profiles`)
    profiles: dict[str, list[str]]
    #: `JobInfo.gpus`, `JobInfo.share` and `JobInfo.gpu_mem` (parts of the class's key)
    gpus: int
    share: float
    gpu_mem: float


@dataclass(slots=True)
class JobInfo:
    """A job compiled against the cluster: shape, eligible present models and values. It
    depends on the job, the catalog, the objective and the models the cluster has in each
    MIG mode, not on the job's position in the request (a planning session reuses it from
    one state to the next: solver/warm.py)."""

    job: Job
    name: str
    shape: str
    gpus: int
    share: float
    gpu_mem: float
    cpu: float
    host_mem: float
    #: eligible models present in the cluster (on GPUs of the right MIG mode) -> value
    values: dict[str, float]
    #: the same models -> the policy objective's per-job value (before costs)
    obj_values: dict[str, float]
    #: MIG jobs: model -> profile names that can host it, smallest first
    profiles: dict[str, list[str]]
    #: resources one placement takes, in GPU equivalents (for value density)
    size: float
    current: list[Placement] | None
    preemptible: bool
    #: the job's kind: what it shares with the jobs of its class (`JobKind`)
    kind: JobKind
    #: elastic gangs (contract 5.1): allowed size n -> model -> value on n GPUs, and the
    #: same for the policy objective's value; empty for every other job
    size_values: dict[int, dict[str, float]] = field(default_factory=dict)
    size_obj_values: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def pinned(self) -> bool:
        """A non-preemptible running job: it stays where it runs, no plan moves it."""
        return bool(self.current) and not self.preemptible

    @property
    def elastic(self) -> bool:
        """Whether the planner picks this job's GPU count (an elastic gang)."""
        return bool(self.size_values)

    @property
    def sizes(self) -> list[int]:
        """The GPU counts this job may get, ascending (`[gpus]` for a fixed gang)."""
        return sorted(self.size_values) if self.size_values else [self.gpus]

    def value_on(self, model: str, n: int) -> float:
        """Throughput value on n GPUs of `model` (n is ignored unless elastic)."""
        return self.size_values[n][model] if self.size_values else self.values[model]

    def obj_value_on(self, model: str, n: int) -> float:
        """The policy objective's value on n GPUs of `model` (n ignored unless elastic)."""
        return self.size_obj_values[n][model] if self.size_values else self.obj_values[model]

    @property
    def best_value(self) -> float:
        """The highest objective value of the job on any eligible present model (an
        elastic gang: at any allowed size)."""
        if self.size_values:
            return max((v for by_model in self.size_obj_values.values()
                        for v in by_model.values()), default=0.0)
        return max(self.obj_values.values(), default=0.0)

    @property
    def density(self) -> float:
        """Best objective value per GPU equivalent (an elastic gang: per GPU at its best
        size for that)."""
        if self.size_values:
            return max((v / n for n, by_model in self.size_obj_values.items()
                        for v in by_model.values()), default=0.0)
        return self.best_value / self.size if self.size > 0 else 0.0


def compile_jobs(request: PlanRequest) -> list[JobInfo]:
    """A JobInfo per job of `request`, in request order (cached per request object; the
    JobInfos are shared and must not be mutated)."""
    return per_request(request, "jobs", _compile)


def mig_geometry(request: PlanRequest) -> MigGeometry:
    """The `MigGeometry` of `request`'s catalog and policy, one per request object (as
    `compile_jobs`), so that every pass of a solve shares its cached layout queries. Its
    entries are pure functions of their keys: threads that fill it at once store the same
    values."""
    return per_request(request, "mig_geometry", lambda r: MigGeometry(
        r.cluster.catalog(), r.policy.allow_mig_reconfiguration))


def _class_key(job: Job) -> tuple[object, ...]:
    """What decides a job's eligible models, their speeds, its MIG profiles
    (`models.rules.model_eligible`, `speed`, `mig_profiles_for`), its shape and size and its
    throughput value on each model (`job_value` at its nominal size): jobs with equal keys
    share all of them, so `_compile` asks the rules once per key. The throughput map's
    and the speed-up curve's items keep their order (equal maps listed in another order
    only miss the sharing).

    Its first item, the eligibility key, is the part that decides the eligible models and
    MIG profiles (`_eligible`): kinds with equal ones share them. The shape needs no place
    in it: a MIG job names a profile or a MIG demand, a whole or shared job neither, and
    whole and shared jobs are eligible on the same models."""
    mig = job.mig
    thr = job.throughput
    allowed = job.allowed_models
    el = job.elastic
    return ((job.gpu_memory_gib, job.mig_profile,
             None if mig is None else (mig.compute_slices, mig.memory_gib),
             tuple(thr.items()) if thr else None,
             None if allowed is None else tuple(allowed)),
            job.gpus, job.gpu_share, job.weight,
            # an elastic gang's nominal value is on its curve (`models.rules.speedup`)
            None if el is None else (el.min_gpus, el.max_gpus, tuple(el.speedup.items())))


Eligible = tuple[list[str], dict[str, list[str]], float]


def _eligible(job: Job, pool: Sequence[str], catalog: Mapping[str, GpuModel]) -> Eligible:
    """The models of `pool` job may run on at a positive speed, its MIG profiles on each
    (MIG jobs) and its size when it is a MIG job."""
    models: list[str] = []
    profiles: dict[str, list[str]] = {}
    for m in pool:
        spec = catalog[m]
        if not model_eligible(job, m, spec) or speed(job, m, catalog) <= 0:
            continue
        if job.shape == "mig":
            profs = [p.name for p in mig_profiles_for(job, spec)]
            if not profs:
                continue
            profiles[m] = profs
        models.append(m)
    size = _mig_size(job, catalog, profiles) if job.shape == "mig" else 0.0
    return models, profiles, size


def compile_some(request: PlanRequest, jobs: Sequence[Job],
                 present: tuple[frozenset[str], frozenset[str]] | None = None
                 ) -> list[JobInfo]:
    """A JobInfo per job of `jobs`, compiled against `request`'s cluster and policy as
    `compile_jobs` compiles the request's own (not cached); `present`: the cluster's
    `models_by_mode` when the caller knows them (a planning session carries them from
    plan to plan: reading them costs a pass over every GPU, 0.02 s of CPU at 16,384)."""
    return _compile(request, jobs, present)


def models_by_mode(request: PlanRequest) -> tuple[frozenset[str], frozenset[str]]:
    """The GPU models of `request`'s cluster on non-MIG and on MIG GPUs: what a compiled
    job depends on of the cluster (a planning session recompiles when they change)."""
    pools = usable_summary(request).pools_present()
    return (frozenset(m for m, mig in pools if not mig),
            frozenset(m for m, mig in pools if mig))


def _compile(request: PlanRequest, jobs: Sequence[Job] | None = None,
             present: tuple[frozenset[str], frozenset[str]] | None = None) -> list[JobInfo]:
    """The JobInfos of `jobs` (default: the request's), in order. The rules are asked once
    per class of jobs (`_class_key`): its JobInfos share the value dicts and profiles
    (JobInfos are never mutated), and only a job's own fields and, for the objectives with
    a per-job factor (`jct`, `makespan`), its objective values are computed per job."""
    catalog = request.cluster.catalog()
    objective = request.policy.objective
    own_factor = objective_factor_is_per_job(objective)
    whole_models, mig_models = models_by_mode(request) if present is None else present
    pools = {False: sorted(whole_models), True: sorted(mig_models)}
    classes: dict[tuple[object, ...], JobKind] = {}
    eligible: dict[object, Eligible] = {}
    out: list[JobInfo] = []
    append = out.append
    class_key = _class_key
    for job in request.jobs if jobs is None else jobs:
        key = class_key(job)
        c = classes.get(key)
        if c is None:
            c = classes[key] = _new_class(job, key[0], pools, catalog, objective,
                                           own_factor, eligible)
        obj = c.obj_values
        if obj is None:
            obj = objective_values(job, c.values, catalog, objective)
        if job.elastic is None:
            size_values, size_obj = _NO_SIZES, _NO_SIZES
        else:
            size_values, size_obj = _size_values(job, c.values, catalog, objective)
        # positional, in the order of JobInfo's fields (keywords cost a tenth of the pass);
        # gpus, share and GPU memory are the class's (`_class_key`)
        append(JobInfo(job, job.name, c.shape, c.gpus, c.share, c.gpu_mem,
                       job.cpu_millicores or 0.0, job.host_memory_gib or 0.0, c.values, obj,
                       c.profiles, c.size, job.current, job.preemptible, c, size_values,
                       size_obj))
    return out


#: The (shared, never mutated) size values of every job that is not an elastic gang.
_NO_SIZES: dict[int, dict[str, float]] = {}


def _size_values(job: Job, values: Mapping[str, float], catalog: Mapping[str, GpuModel],
                 objective: str) -> tuple[dict[int, dict[str, float]],
                                          dict[int, dict[str, float]]]:
    """An elastic gang's values and objective values on each allowed size (`JobInfo`'s
    `size_values`, `size_obj_values`), on the models of `values`."""
    size_values: dict[int, dict[str, float]] = {}
    size_obj: dict[int, dict[str, float]] = {}
    for n in allowed_sizes(job):
        size_values[n] = {m: job_value(job, m, catalog, n) for m in values}
        size_obj[n] = {m: objective_value_of(job, m, catalog, objective, n) for m in values}
    return size_values, size_obj


def _new_class(job: Job, ekey: object, pools: Mapping[bool, Sequence[str]],
               catalog: Mapping[str, GpuModel], objective: str, own_factor: bool,
               eligible: dict[object, Eligible]) -> JobKind:
    """The kind of `job`, whose eligibility key (`_class_key`) is `ekey`: the shared part
    of the JobInfos of its class (`eligible`: the eligibility found so far, by that key)."""
    shape = job.shape
    hit = eligible.get(ekey)
    if hit is None:
        hit = eligible[ekey] = _eligible(job, pools[shape == "mig"], catalog)
    models, profiles, mig_size = hit
    if own_factor:   # the objective values are each job's own
        values, obj = job_values(job, models, catalog), None
    else:
        values, obj = values_on(job, models, catalog, objective)
    if shape == "whole":
        size = float(job.gpus or 1)
    elif shape == "share":
        size = float(job.gpu_share or 0.0)
    else:
        size = mig_size
    return JobKind(shape, max(size, 1e-6), values, obj, profiles,
                   job.gpus or 1, job.gpu_share or 0.0, job.gpu_memory_gib or 0.0)


def _mig_size(job: Job, catalog: Mapping[str, GpuModel], profiles: dict[str, list[str]]) -> float:
    """GPU equivalents a MIG job takes: its smallest instance's compute share."""
    best = 1.0
    for m, profs in profiles.items():
        spec = catalog[m]
        p = spec.profile(profs[0])
        if p is not None:
            best = min(best, p.compute_slices / spec.compute_slices)
    if not profiles and job.mig is not None:
        best = job.mig.compute_slices / MIG_COMPUTE_SLICES
    return best


#: One GPU as a fresh `ClusterState` sees it: (index, model, usable, MIG enabled, memory
#: GiB (1e18 when the catalog has none), current MIG instances).
GpuFacts = tuple[int, str, bool, bool, float, frozenset[Instance]]
#: One node: (name, topology domain, schedulable, CPU millicores, memory GiB, its GPUs).
NodeFacts = tuple[str, str | None, bool, float | None, float | None, list[GpuFacts]]


def cluster_facts(request: PlanRequest) -> list[NodeFacts]:
    """What a fresh `ClusterState` reads of each node and GPU, in cluster order, computed
    once per request object (`per_request`): the greedy, the LP bound and every rounding
    build a state, and on 16,384 GPUs reading the facts again cost about half of it."""
    return per_request(request, "cluster_facts", _cluster_facts)


def _cluster_facts(request: PlanRequest) -> list[NodeFacts]:
    catalog = request.cluster.catalog()
    return [node_facts(node, catalog) for node in request.cluster.nodes]


def node_facts(node: Node, catalog: Mapping[str, GpuModel]) -> NodeFacts:
    """What a fresh `ClusterState` reads of `node` and its GPUs (`cluster_facts`)."""
    gpus: list[GpuFacts] = []
    for gpu in node.gpus:
        spec = catalog[gpu.model]
        gpus.append((gpu.index, gpu.model, usable(node, gpu), gpu.mig_enabled,
                     spec.memory_gib if spec.memory_gib else 1e18,
                     frozenset(m.key() for m in gpu.mig_instances)))
    return (node.name, node.topology_domain, node.schedulable, node.cpu_millicores,
            node.memory_gib, gpus)


@dataclass(frozen=True, slots=True)
class _Layout:
    """A fresh `ClusterState`'s nodes and GPUs as arrays (`cluster_facts` laid out once
    per request): per GPU (gid, node index, index, model, usable, MIG, memory, current MIG
    instances); per node (name, domain, schedulable, CPU, memory, its gids); the
    (node, index) -> gid and name -> node maps; per node its usable whole GPUs by model
    (all free), and the MIG GPUs' gids in order."""

    gpus: list[tuple[int, int, int, str, bool, bool, float, frozenset[Instance]]]
    nodes: list[tuple[str, str | None, bool, float | None, float | None, list[int]]]
    gid_of: dict[tuple[str, int], int]
    node_of: dict[str, int]
    free: list[dict[str, list[int]]]
    mig: list[int]


def _layout(request: PlanRequest) -> _Layout:
    out = _Layout([], [], {}, {}, [], [])
    for ni, (name, domain, schedulable, cpu, mem, gpus) in enumerate(cluster_facts(request)):
        gids: list[int] = []
        free: dict[str, list[int]] = {}
        for index, model, ok, mig, gpu_mem, current in gpus:
            gid = len(out.gpus)
            out.gpus.append((gid, ni, index, model, ok, mig, gpu_mem, current))
            gids.append(gid)
            out.gid_of[(name, index)] = gid
            if mig:
                out.mig.append(gid)
            elif ok:
                free.setdefault(model, []).append(gid)
        out.nodes.append((name, domain, schedulable, cpu, mem, gids))
        out.node_of[name] = ni
        out.free.append(free)
    return out


@dataclass(slots=True)
class GpuSlot:
    """One GPU and what occupies it."""

    gid: int
    node: int
    index: int
    model: str
    usable: bool
    mig: bool
    mem: float
    whole_job: str | None = None
    share_used: float = 0.0
    share_mem: float = 0.0
    share_jobs: dict[str, float] = field(default_factory=dict)
    mig_used: dict[Instance, str] = field(default_factory=dict)
    mig_current: frozenset[Instance] = frozenset()

    @property
    def is_free(self) -> bool:
        """No whole, shared or MIG job on it."""
        return self.whole_job is None and not self.share_jobs and not self.mig_used

    def mig_signature(self) -> tuple[frozenset[Instance], frozenset[Instance]]:
        """(instances hosting jobs, current instances hosting none)."""
        used = frozenset(self.mig_used)
        return used, self.mig_current - used


@dataclass(slots=True)
class NodeSlot:
    """One node: its GPUs and its host capacity and use (None = unconstrained)."""

    idx: int
    name: str
    domain: str | None
    schedulable: bool
    cpu_cap: float | None
    mem_cap: float | None
    gpus: list[int]
    cpu_used: float = 0.0
    mem_used: float = 0.0

    @property
    def cpu_free(self) -> float | None:
        """Free host CPU millicores (None = unconstrained)."""
        return None if self.cpu_cap is None else self.cpu_cap - self.cpu_used

    @property
    def mem_free(self) -> float | None:
        """Free host memory GiB (None = unconstrained)."""
        return None if self.mem_cap is None else self.mem_cap - self.mem_used

    def host_fits(self, cpu: float, mem: float) -> bool:
        """Whether `cpu` millicores and `mem` GiB more fit on this node."""
        return host_fits(cpu, mem, self.cpu_free, self.mem_free)

    def host_room(self, cpu_per_gpu: float, mem_per_gpu: float) -> int:
        """How many gang parts of (cpu_per_gpu, mem_per_gpu) still fit (large if free)."""
        return host_room(cpu_per_gpu, mem_per_gpu, self.cpu_free, self.mem_free)


class ClusterState:
    """The occupancy of a cluster with indexes for fast best-fit queries."""

    def __init__(self, request: PlanRequest) -> None:
        self.request = request
        self.catalog: dict[str, GpuModel] = request.cluster.catalog()
        self.nodes: list[NodeSlot] = []
        self.gpus: list[GpuSlot] = []
        self.gid_of: dict[tuple[str, int], int] = {}
        self.node_of: dict[str, int] = {}
        # Whole-GPU index.
        self.free_gpus: list[dict[str, set[int]]] = []
        self.buckets: dict[str, list[set[int]]] = {}
        self.model_free: dict[str, int] = {}
        self.domain_free: dict[tuple[str | None, str], int] = {}
        # Shared and MIG indexes.
        self.share_index: dict[str, list[set[int]]] = {}
        self.mig_index: dict[str, dict[tuple[frozenset[Instance], frozenset[Instance]],
                                       set[int]]] = {}
        self._signatures: dict[tuple[frozenset[Instance], frozenset[Instance]],
                               tuple[frozenset[Instance], frozenset[Instance]]] = {}
        #: per model, every signature group of `mig_index` in the order they appeared (a
        #: group that empties and comes back is listed again): a placer keeps its own
        #: ordering of the groups and reads only what was appended since
        self.mig_sig_log: dict[str, list[tuple[frozenset[Instance], frozenset[Instance]]]] = {}
        # Quota usage per key, and the part of it non-preemptible kept jobs hold.
        self.quotas = request.cluster.quotas
        self.quota_used: dict[QuotaKey, float] = {}
        self.quota_fixed: dict[QuotaKey, float] = {}
        self._quota_keys: dict[tuple[str, str], list[QuotaKey]] = {}
        # Assignments: job -> (placements, node -> number of its GPUs there).
        self.placed: dict[str, list[Placement]] = {}
        self._host: dict[str, tuple[float, float, int]] = {}
        self._build(per_request(request, "occupancy_layout", _layout))

    def _build(self, layout: _Layout) -> None:
        """Fill the empty state with every node and GPU of `layout`, all GPUs free: what
        `_add_node` of each node in turn makes, from the request's cached arrays (16,384
        GPUs node by node cost about a tenth of a greedy pass's setup)."""
        self.gpus = [GpuSlot(gid, ni, index, model, ok, mig, mem, None, 0.0, 0.0, {}, {},
                             current)
                     for gid, ni, index, model, ok, mig, mem, current in layout.gpus]
        self.nodes = [NodeSlot(ni, name, domain, schedulable, cpu, mem, list(gids))
                      for ni, (name, domain, schedulable, cpu, mem, gids)
                      in enumerate(layout.nodes)]
        self.gid_of = dict(layout.gid_of)
        self.node_of = dict(layout.node_of)
        self.free_gpus = [{m: set(gids) for m, gids in free.items()} for free in layout.free]
        for ni, free in enumerate(self.free_gpus):
            for model, gids in free.items():
                self._set_free_count(ni, model, 0, len(gids))
        for gid in layout.mig:
            self._index_add(self.gpus[gid])

    def _add_node(self, facts: NodeFacts) -> None:
        """Append a node (`NodeFacts`), all its GPUs free."""
        name, domain, schedulable, cpu, mem, gpus = facts
        ni = len(self.nodes)
        slot = NodeSlot(ni, name, domain, schedulable, cpu, mem, [])
        self.nodes.append(slot)
        self.node_of[name] = ni
        free: dict[str, set[int]] = {}
        self.free_gpus.append(free)
        all_gpus, gid_of, own = self.gpus, self.gid_of, slot.gpus
        for index, model, ok, mig, gpu_mem, current in gpus:
            gid = len(all_gpus)
            # positional, in the order of GpuSlot's fields (16,384 of them on L)
            g = GpuSlot(gid, ni, index, model, ok, mig, gpu_mem, None, 0.0, 0.0, {}, {},
                        current)
            all_gpus.append(g)
            own.append(gid)
            gid_of[(name, index)] = gid
            if mig:
                self._index_add(g)
            elif ok:   # every GPU is free before any placement
                s = free.get(model)
                if s is None:
                    s = free[model] = set()
                s.add(gid)
        for model, gids in free.items():
            self._set_free_count(ni, model, 0, len(gids))

    def add_node(self, node: Node) -> None:
        """Append `node`, all its GPUs free: a planning session adds the nodes that
        joined to a carried state (solver/warm.py)."""
        self._add_node(node_facts(node, self.catalog))

    def refresh_node(self, node: Node) -> None:
        """Node `node` (known by name) after it was cordoned or uncordoned, or its GPUs'
        health or MIG layouts changed; nothing else of it may differ (same GPUs, models
        and MIG modes). The jobs on it stay: a planning session updates a carried state
        by the deltas (solver/warm.py), after taking out the jobs the deltas released."""
        slot = self.nodes[self.node_of[node.name]]
        slot.schedulable = node.schedulable
        for gpu in node.gpus:
            g = self.gpus[self.gid_of[(node.name, gpu.index)]]
            ok = usable(node, gpu)
            current = frozenset(m.key() for m in gpu.mig_instances) if g.mig \
                else g.mig_current
            if ok != g.usable or current != g.mig_current:
                self._index_remove(g)
                g.usable, g.mig_current = ok, current
                self._index_add(g)

    # ----------------------------------------------------------------- indexes
    def _set_free_count(self, ni: int, model: str, old: int, new: int) -> None:
        b = self.buckets.setdefault(model, [])
        while len(b) <= max(old, new):
            b.append(set())
        if old > 0:
            b[old].discard(ni)
        if new > 0:
            b[new].add(ni)
        delta = new - old
        self.model_free[model] = self.model_free.get(model, 0) + delta
        key = (self.nodes[ni].domain, model)
        self.domain_free[key] = self.domain_free.get(key, 0) + delta

    def _index_add(self, g: GpuSlot) -> None:
        """Put `g` into the index matching its occupancy (usable GPUs only)."""
        if not g.usable:
            return
        if g.mig:
            # one object per distinct signature: the placers' caches keyed by it then
            # compare by identity, not element by element
            sig = g.mig_signature()
            sig = self._signatures.setdefault(sig, sig)
            groups = self.mig_index.setdefault(g.model, {})
            members = groups.get(sig)
            if members is None:
                members = groups[sig] = set()
                self.mig_sig_log.setdefault(g.model, []).append(sig)
            members.add(g.gid)
        elif g.is_free:
            free = self.free_gpus[g.node].setdefault(g.model, set())
            old = len(free)
            free.add(g.gid)
            self._set_free_count(g.node, g.model, old, old + 1)
        elif g.share_jobs and g.share_used < 1 - HOST_TOL:
            b = self.share_index.setdefault(g.model, [set() for _ in range(SHARE_BUCKETS + 1)])
            b[_share_bucket(1.0 - g.share_used)].add(g.gid)

    def _index_remove(self, g: GpuSlot) -> None:
        """Take `g` out of whatever index holds it (call before changing it)."""
        if not g.usable:
            return
        if g.mig:
            groups = self.mig_index.get(g.model, {})
            sig = g.mig_signature()
            s = groups.get(sig)
            if s is not None:
                s.discard(g.gid)
                if not s:
                    del groups[sig]
        elif g.is_free:
            free = self.free_gpus[g.node][g.model]
            old = len(free)
            free.discard(g.gid)
            self._set_free_count(g.node, g.model, old, old - 1)
        elif g.share_jobs:
            b = self.share_index.get(g.model)
            if b is not None:
                b[_share_bucket(1.0 - g.share_used)].discard(g.gid)

    # ----------------------------------------------------------------- queries
    def free_count(self, ni: int, model: str) -> int:
        """Free whole usable GPUs of `model` on node `ni`."""
        s = self.free_gpus[ni].get(model)
        return len(s) if s else 0

    def nodes_with_free(self, model: str, at_least: int) -> Iterable[int]:
        """Nodes with >= `at_least` free GPUs of `model`, fewest free first (best fit)."""
        b = self.buckets.get(model, [])
        for c in range(max(at_least, 1), len(b)):
            if b[c]:
                yield from sorted(b[c])

    def shared_candidates(self, model: str, frac: float) -> Iterable[int]:
        """Partially shared usable GPUs of `model` whose remaining fraction may fit `frac`,
        roughly tightest first."""
        b = self.share_index.get(model)
        if b is None:
            return
        for k in range(_share_bucket(frac), SHARE_BUCKETS + 1):
            if b[k]:
                yield from sorted(b[k])

    def mig_groups(self, model: str) -> list[tuple[tuple[frozenset[Instance],
                                                         frozenset[Instance]], set[int]]]:
        """Usable MIG GPUs of `model` grouped by layout signature."""
        return [(sig, gids) for sig, gids in self.mig_index.get(model, {}).items() if gids]

    def share_fits(self, g: GpuSlot, frac: float, mem: float) -> bool:
        """Whether a share of `frac` and `mem` GiB fits on non-MIG GPU `g` (ignoring host)."""
        if g.mig or g.whole_job is not None:
            return False
        return share_fits(g.share_used, g.share_mem, frac, mem, g.mem)

    def quota_keys(self, tenant: str, model: str) -> list[QuotaKey]:
        """`models.rules.quota_keys`, cached per tenant and model."""
        keys = self._quota_keys.get((tenant, model))
        if keys is None:
            keys = self._quota_keys[(tenant, model)] = quota_keys(self.quotas, tenant, model)
        return keys

    def quota_fits(self, info: JobInfo, model: str, n: int | None = None) -> bool:
        """Whether one more placement of `info` on `model` (an elastic gang: on n GPUs)
        keeps every quota key of its tenant and ancestors within its limit (always true
        without quotas)."""
        if not self.quotas:
            return True
        size = quota_usage(info.job, self.catalog[model], n)
        for key in self.quota_keys(info.job.tenant, model):
            lim = self.quotas[key[0]].limit.get(key[1])
            if lim is not None and not fits(size, max(lim, self.quota_fixed.get(key, 0.0)),
                                            self.quota_used.get(key, 0.0)):
                return False
        return True

    def _charge_quota(self, info: JobInfo, placements: Sequence[Placement],
                      sign: float) -> None:
        model = self.model_of(placements)
        # a gang uses the GPUs it got (an elastic gang's n), other shapes their size
        size = sign * quota_usage(info.job, self.catalog[model], len(placements))
        fixed = info.current is not None and not info.preemptible
        for key in self.quota_keys(info.job.tenant, model):
            self.quota_used[key] = self.quota_used.get(key, 0.0) + size
            if fixed:
                self.quota_fixed[key] = self.quota_fixed.get(key, 0.0) + size

    def value_of_placed(self, infos: Sequence[JobInfo]) -> float:
        """Sum of the policy per-job values of placed jobs (costs excluded)."""
        total = 0.0
        for info in infos:
            pl = self.placed.get(info.name)
            if pl:
                model = self.gpus[self.gid_of[(pl[0].node, pl[0].gpu)]].model
                if info.elastic:
                    total += info.size_obj_values.get(len(pl), {}).get(model, 0.0)
                else:
                    total += info.obj_values.get(model, 0.0)
        return total

    # ------------------------------------------------------------- mutations
    def conflicts(self, info: JobInfo, placements: Sequence[Placement]) -> str | None:
        """Why `placements` cannot be added now (None when they can). Eligibility and
        usability are the caller's business (kept placements are grandfathered)."""
        per_node: dict[int, int] = {}
        seen: set[int] = set()
        for p in placements:
            gid = self.gid_of.get((p.node, p.gpu))
            if gid is None:
                return f"unknown GPU {p.node}/{p.gpu}"
            g = self.gpus[gid]
            if p.mig is not None:
                if not g.mig:
                    return "MIG placement on a non-MIG GPU"
                inst = p.mig.key()
                if inst in g.mig_used:
                    return f"instance {inst.profile}@{inst.start} is taken"
                if not is_valid_layout(self.catalog[g.model], [*g.mig_used, inst]):
                    return "the MIG layout would be invalid"
                if (not self.request.policy.allow_mig_reconfiguration
                        and inst not in g.mig_current):
                    return "MIG reconfiguration is not allowed"
            elif p.fraction is not None:
                if not self.share_fits(g, p.fraction, info.gpu_mem):
                    return f"GPU {p.node}/{p.gpu} has no room for the share"
            else:
                if gid in seen or not g.is_free or g.mig:
                    return f"GPU {p.node}/{p.gpu} is not free"
            seen.add(gid)
            per_node[g.node] = per_node.get(g.node, 0) + 1
        for ni, k in per_node.items():
            part = _host_part(info, k)
            if not self.nodes[ni].host_fits(info.cpu * part, info.host_mem * part):
                return f"host CPU/memory of node {self.nodes[ni].name} exceeded"
        if self.quotas and (info.preemptible or not info.current) and placements:
            model = self.model_of(placements)
            n = len(placements) if info.shape == "whole" else None
            if not self.quota_fits(info, model, n):
                return f"a quota limit of tenant {info.job.tenant} on {model} would be exceeded"
        return None

    def place(self, info: JobInfo, placements: list[Placement]) -> None:
        """Record `placements` for job `info` (they must not conflict)."""
        per_node: dict[int, int] = {}
        for p in placements:
            g = self.gpus[self.gid_of[(p.node, p.gpu)]]
            self._index_remove(g)
            if p.mig is not None:
                g.mig_used[p.mig.key()] = info.name
            elif p.fraction is not None:
                g.share_used += p.fraction
                g.share_mem += info.gpu_mem
                g.share_jobs[info.name] = p.fraction
            else:
                g.whole_job = info.name
            self._index_add(g)
            per_node[g.node] = per_node.get(g.node, 0) + 1
        self._charge_host(info, per_node)
        if self.quotas and placements:
            self._charge_quota(info, placements, 1.0)
        self.placed[info.name] = placements

    def _charge_host(self, info: JobInfo, per_node: dict[int, int]) -> None:
        """Add `info`'s host CPU and memory to the nodes it takes GPUs of (`per_node`:
        node -> its GPUs there), each node its part (`_host_part`)."""
        nodes = self.nodes
        for ni, k in per_node.items():
            part = _host_part(info, k)
            nodes[ni].cpu_used += info.cpu * part
            nodes[ni].mem_used += info.host_mem * part

    def keep_many(self, infos: Sequence[JobInfo], gids: Sequence[list[int] | None]
                  ) -> list[bool]:
        """Keep each running job of `infos` where it runs (`JobInfo.current`) unless that
        conflicts with the state and the jobs before it that were kept: `conflicts` then
        `place` job by job, per job whether it was kept. `gids`: per job the `gpus`
        indexes of its current placements, None for a job not to keep (its placement is
        not consistent: `Greedy.current_ok`). In bulk: the whole GPUs and shares taken
        leave the free-GPU index at once, each node's free counts moving once at the end
        (`conflicts` reads no count, and a MIG placement, placed as `place` does, touches
        none): keeping 6,785 running jobs of L moved them GPU by GPU."""
        out = []
        moved: dict[tuple[int, str], int] = {}   # (node, model) -> free count before
        for info, taken in zip(infos, gids, strict=True):
            placements = info.current
            if taken is None or not placements or self.conflicts(info, placements) is not None:
                out.append(False)
                continue
            if self.quotas or any(p.mig is not None for p in placements):
                # with quotas every kept job goes here (`moved` stays empty); a MIG GPU
                # is never in the free-GPU index
                self.place(info, list(placements))
            else:
                self._keep_clear(info, list(placements), taken, moved)
            out.append(True)
        self._settle_free_counts(moved)
        return out

    def _keep_clear(self, info: JobInfo, placements: list[Placement], gids: list[int],
                    moved: dict[tuple[int, str], int]) -> None:
        """`place` for an item of `keep_many` on whole GPUs or shares, the free counts
        of its nodes left to `_settle_free_counts` (`moved`: (node, model) -> free count
        before)."""
        gpus, name = self.gpus, info.name
        per_node: dict[int, int] = {}
        for p, gid in zip(placements, gids, strict=True):
            g = gpus[gid]
            if g.usable:
                if g.is_free:
                    free = self.free_gpus[g.node][g.model]
                    moved.setdefault((g.node, g.model), len(free))
                    free.discard(gid)
                elif g.share_jobs:
                    self._index_remove(g)
            if p.fraction is None:
                g.whole_job = name
            else:
                g.share_used += p.fraction
                g.share_mem += info.gpu_mem
                g.share_jobs[name] = p.fraction
                if g.usable:
                    self._index_add(g)
            per_node[g.node] = per_node.get(g.node, 0) + 1
        self._charge_host(info, per_node)
        self.placed[name] = placements

    def _settle_free_counts(self, moved: dict[tuple[int, str], int]) -> None:
        """Bring the free-count indexes of the (node, model) pairs of `moved` (-> their
        count before) to their free sets after `keep_many` took GPUs out of them."""
        for (ni, model), old in moved.items():
            self._set_free_count(ni, model, old, len(self.free_gpus[ni][model]))
        moved.clear()

    def remove(self, info: JobInfo) -> list[Placement] | None:
        """Take job `info` out of the state; returns its placements (None if unplaced)."""
        placements = self.placed.pop(info.name, None)
        if placements is None:
            return None
        if self.quotas and placements:
            self._charge_quota(info, placements, -1.0)
        per_node: dict[int, int] = {}
        for p in placements:
            g = self.gpus[self.gid_of[(p.node, p.gpu)]]
            self._index_remove(g)
            if p.mig is not None:
                g.mig_used.pop(p.mig.key(), None)
            elif p.fraction is not None:
                frac = g.share_jobs.pop(info.name, 0.0)
                g.share_used = max(0.0, g.share_used - frac) if g.share_jobs else 0.0
                g.share_mem = max(0.0, g.share_mem - info.gpu_mem) if g.share_jobs else 0.0
            else:
                g.whole_job = None
            self._index_add(g)
            per_node[g.node] = per_node.get(g.node, 0) + 1
        for ni, k in per_node.items():
            part = _host_part(info, k)
            self.nodes[ni].cpu_used = max(0.0, self.nodes[ni].cpu_used - info.cpu * part)
            self.nodes[ni].mem_used = max(0.0, self.nodes[ni].mem_used - info.host_mem * part)
        return placements

    def model_of(self, placements: Sequence[Placement]) -> str:
        """The GPU model of a placement list (its first GPU)."""
        p = placements[0]
        return self.gpus[self.gid_of[(p.node, p.gpu)]].model


def _host_part(info: JobInfo, k: int) -> float:
    """The part of `info`'s host CPU and memory a node holding `k` of its GPUs carries: a
    whole-GPU gang's split by its GPUs, a share's or MIG job's whole on its node."""
    return k / info.gpus if info.shape == "whole" else 1.0


def _share_bucket(frac: float) -> int:
    return max(0, min(SHARE_BUCKETS, int(frac * SHARE_BUCKETS + HOST_TOL)))


def mig_placement(node: str, gpu: int, inst: Instance) -> Placement:
    """A Placement on MIG instance `inst`."""
    return Placement(node=node, gpu=gpu, mig=MigInstance(profile=inst.profile, start=inst.start))


class MigGeometry:
    """Cached MIG layout queries per model name (layouts are few, queries are many)."""

    def __init__(self, catalog: Mapping[str, GpuModel], reconfigure: bool) -> None:
        self.catalog = catalog
        self.reconfigure = reconfigure
        self._max_free: dict[tuple[str, frozenset[Instance]], int] = {}
        self._options: dict[tuple[str, frozenset[Instance], frozenset[Instance],
                                  tuple[str, ...]], tuple[MigOption, ...]] = {}
        self._positions: dict[str, list[tuple[Instance, int]]] = {}
        self._can_host: dict[tuple[str, frozenset[Instance], frozenset[Instance],
                                   tuple[str, ...]], bool] = {}

    def _pos(self, model: str) -> list[tuple[Instance, int]]:
        out = self._positions.get(model)
        if out is None:
            spec = self.catalog[model]
            out = []
            for pos in instance_positions(spec):
                prof = spec.profile(pos.profile)
                out.append((pos, prof.compute_slices if prof is not None else 0))
            out.sort(key=lambda x: -x[1])
            self._positions[model] = out
        return out

    def max_free(self, model: str, used: frozenset[Instance]) -> int:
        """Compute slices of the largest instance that can still be added beside `used`."""
        key = (model, used)
        best = self._max_free.get(key)
        if best is None:
            spec = self.catalog[model]
            best = 0
            for pos, c in self._pos(model):
                if c > best and is_valid_layout(spec, [*used, pos]):
                    best = c
            self._max_free[key] = best
        return best

    def free_compute(self, model: str, used: frozenset[Instance]) -> int:
        """Compute slices not taken by `used`."""
        spec = self.catalog[model]
        taken = 0
        for inst in used:
            prof = spec.profile(inst.profile)
            taken += prof.compute_slices if prof is not None else 0
        return spec.compute_slices - taken

    def can_host(self, model: str, used: frozenset[Instance],
                 current_free: frozenset[Instance], profiles: tuple[str, ...]) -> bool:
        """Whether `options` has any (the first valid position found ends the search:
        no scores, so a question asked for many layouts costs a fraction of `options`)."""
        key = (model, used, current_free, profiles)
        cached = self._options.get(key)
        if cached is not None:
            return bool(cached)
        hit = self._can_host.get(key)
        if hit is None:
            hit = next(self._valid(model, used, current_free, profiles), None) is not None
            self._can_host[key] = hit
        return hit

    def _valid(self, model: str, used: frozenset[Instance], current_free: frozenset[Instance],
               profiles: tuple[str, ...]) -> Iterator[tuple[int, Instance, bool]]:
        """(rank of its profile in `profiles`, instance, whether it is free in the current
        layout) of each position that can host a job needing one of `profiles` beside
        `used`: an existing free instance, or a new one when reconfiguring is allowed, in
        a valid layout."""
        spec = self.catalog[model]
        for rank, pname in enumerate(profiles):
            prof = spec.profile(pname)
            if prof is None:
                continue
            for start in prof.starts:
                inst = Instance(pname, start)
                existing = inst in current_free
                if (self.reconfigure or existing) and is_valid_layout(spec, [*used, inst]):
                    yield rank, inst, existing

    def options(self, model: str, used: frozenset[Instance], current_free: frozenset[Instance],
                profiles: tuple[str, ...]) -> tuple[MigOption, ...]:
        """Instance positions that can host a job needing one of `profiles` beside `used`,
        best first, each with its score (smaller is better).

        Score: smallest profile first; then the fewest free instances of the current layout
        destroyed (fewer reconfigurations); then the smallest loss of the largest instance
        that can still be created (keep large instances free); then an existing free
        instance before a new one; then the GPU with the least free compute (pack); then
        the lowest start.
        """
        key = (model, used, current_free, profiles)
        cached = self._options.get(key)
        if cached is not None:
            return cached
        spec = self.catalog[model]
        out: list[MigOption] = []
        before = self.max_free(model, used)
        fc = self.free_compute(model, used)
        for rank, inst, existing in self._valid(model, used, current_free, profiles):
            after = self.max_free(model, used | {inst})
            destroyed = 0 if existing else sum(
                1 for other in current_free
                if not is_valid_layout(spec, [*used, inst, other]))
            out.append(MigOption(inst, (rank, destroyed, before - after,
                                        0 if existing else 1, fc, inst.start)))
        out.sort(key=lambda o: o.score)
        result = tuple(out)
        self._options[key] = result
        return result


@dataclass(frozen=True, slots=True)
class MigOption:
    """A MIG instance position for a job with its score (smaller is better)."""

    inst: Instance
    score: tuple[int, int, int, int, int, int]
