"""`kubectl get nodes -o json` + `kubectl get pods -A -o json` -> a PlanRequest.

Pending pods that ask for `nvidia.com/gpu` or `nvidia.com/mig-*` become jobs (pods of one
pod group form one gang job); running pods become jobs with their `current` placement.
Whatever cannot be mapped is listed in `Snapshot.issues` and left out, never guessed.

GPU indices of running pods are not in the pod object. A pod may name them with
`gpuplan.io/gpu-indices` (and `gpuplan.io/mig-start` for a MIG device); the others get, per
node and in order of creation (then namespace/name), the lowest free GPUs (whole), the first
GPU with room (shared) or the first free instance of their profile by (GPU, start) (MIG).

The optional objects of contract 5 (`K8sObjects`: Kueue and KAI queues, PriorityClasses,
Topologies, PodGroups) add `cluster.quotas` (`queues.py`), `cluster.topology_levels` and
`Node.topology` (`topology.py`), and each job's tenant, `priority`, `topology` and `elastic`
(`queues.py`, `topology.py`, `workload.py`). A v1.1 field a job cannot take as read (an
elastic range its own size lies outside, a level the Topology lacks) is left out and
reported; the job is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from api.importing import ImportIssue, SnapshotError, assemble_request, wire_gpu
from api.k8s import names
from api.k8s.nodes import NodeProblem, NodeState, is_gpu_node, parse_node
from api.k8s.objects import K8sObjects
from api.k8s.pods import (
    PodInfo,
    PodProblem,
    check_demand,
    gang_job_name,
    group_of,
    group_total,
    job_options,
    parse_pod,
)
from api.k8s.queues import QuotaImport, pod_tenant
from api.k8s.topology import chosen_topology, job_topology, levels_of, node_topology
from api.k8s.workload import elastic_of, group_priority, pod_priority
from models import (
    BUILTIN_CATALOG,
    Cluster,
    GpuModel,
    Instance,
    Job,
    MigInstance,
    Node,
    Placement,
    PlanRequest,
    Policy,
)
from models.request import unknown_job_models, unknown_model_message

#: Job fields of contract 5 that the import leaves out (reported) when a job cannot take
#: them, last first, rather than dropping the job.
_OPTIONAL_FIELDS = ("topology", "elastic")

#: Job fields that are demand shapes, not options.
_DEMAND_FIELDS = ("gpu_share", "mig_profile")


@dataclass
class Snapshot:
    """The imported request, what could not be mapped, and how jobs map back to pods."""

    request: PlanRequest
    issues: list[ImportIssue]
    nodes: dict[str, NodeState]
    job_pods: dict[str, list[PodInfo]] = field(default_factory=dict)


def list_items(obj: object, loc: str, kind: str | None = None) -> list[object]:
    """The `items` of a Kubernetes List object (`kubectl get ... -o json`).

    Items that state a `kind` other than `kind` (e.g. pods passed as nodes) are an error.
    """
    if isinstance(obj, dict) and obj.get("items") is None and "kind" in obj:
        return []
    if not isinstance(obj, dict) or not isinstance(obj.get("items"), list):
        raise SnapshotError((loc,), "expected a Kubernetes List object with an `items` list "
                                    "(kubectl get ... -o json)")
    items = list(obj["items"])
    for i, item in enumerate(items):
        got = item.get("kind") if isinstance(item, dict) else None
        if kind is not None and isinstance(got, str) and got != kind:
            raise SnapshotError((loc, "items", i, "kind"), f"expected a {kind}, got a {got}")
    return items


def _sort_key(pod: PodInfo) -> tuple[float, str, str]:
    return (pod.created if pod.created is not None else float("inf"), pod.namespace, pod.name)


def demand_of(pod: PodInfo, options: Mapping[str, Any], node: NodeState | None) -> dict[str, Any]:
    """The Job demand shape of a pod (on `node` when it is bound there)."""
    check_demand(pod)
    if pod.mig:
        if any(k in options for k in _DEMAND_FIELDS):
            raise PodProblem("gpu-share / mig-profile annotations apply to nvidia.com/gpu only")
        return {"mig_profile": next(iter(pod.mig))}
    n = pod.whole_gpus
    for key in _DEMAND_FIELDS:
        if key in options:
            if n != 1:
                raise PodProblem(f"{key} annotation needs nvidia.com/gpu: 1, got {n}")
            return {key: options[key]}
    if node is not None and node.single_profile is not None:
        if n != 1:
            raise PodProblem(f"uses {n} MIG devices on single-strategy node {node.name}; a "
                             "gpuplan MIG job is one instance")
        return {"mig_profile": node.single_profile}
    return {"gpus": n}


@dataclass
class _Usage:
    whole: set[int] = field(default_factory=set)
    share: dict[int, float] = field(default_factory=dict)
    mig: set[tuple[int, Instance]] = field(default_factory=set)


def _indices(pod: PodInfo) -> list[int] | None:
    raw = pod.annotations.get(names.ANN_GPU_INDICES)
    if raw is None:
        return None
    try:
        out = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError as e:
        raise PodProblem(f"annotation {names.ANN_GPU_INDICES}={raw!r} is not a list of "
                         "GPU indices") from e
    if not out or len(set(out)) != len(out):
        raise PodProblem(f"annotation {names.ANN_GPU_INDICES}={raw!r} must list distinct "
                         "indices")
    return out


def _place_whole(pod: PodInfo, n: int, node: NodeState, use: _Usage) -> list[Placement]:
    free = [g.index for g in node.gpus
            if not g.mig_enabled and g.index not in use.whole and g.index not in use.share]
    wanted = _indices(pod)
    if wanted is not None:
        if len(wanted) != n or any(i not in free for i in wanted):
            raise PodProblem(f"{names.ANN_GPU_INDICES} must name {n} free whole GPUs of "
                             f"{node.name} (free: {free})")
        chosen = wanted
    elif len(free) < n:
        raise PodProblem(f"needs {n} whole GPUs on {node.name}, only {len(free)} unaccounted")
    else:
        chosen = free[:n]
    use.whole.update(chosen)
    return [Placement(node=node.name, gpu=i) for i in chosen]


def _place_share(pod: PodInfo, share: float, node: NodeState, use: _Usage) -> list[Placement]:
    def room(i: int) -> bool:
        return i not in use.whole and use.share.get(i, 0.0) + share <= 1.0 + 1e-9

    cands = [g.index for g in node.gpus if not g.mig_enabled and room(g.index)]
    wanted = _indices(pod)
    if wanted is not None:
        if len(wanted) != 1 or wanted[0] not in cands:
            raise PodProblem(f"{names.ANN_GPU_INDICES} must name one GPU of {node.name} "
                             "with room for its share")
        gpu = wanted[0]
    else:
        partly = [i for i in cands if i in use.share]
        if not (partly or cands):
            raise PodProblem(f"no GPU of {node.name} has room for a {share:g} share")
        gpu = (partly or cands)[0]
    use.share[gpu] = use.share.get(gpu, 0.0) + share
    return [Placement(node=node.name, gpu=gpu, fraction=share)]


def _place_mig(pod: PodInfo, profile: str, node: NodeState, use: _Usage) -> list[Placement]:
    free = [(g.index, inst) for g in node.gpus if g.mig_enabled for inst in g.instances
            if inst.profile == profile and (g.index, inst) not in use.mig]
    wanted = _indices(pod)
    start_raw = pod.annotations.get(names.ANN_MIG_START)
    if wanted is not None or start_raw is not None:
        ok = (wanted is not None and len(wanted) == 1 and start_raw is not None
              and start_raw.isdigit() and (wanted[0], Instance(profile, int(start_raw))) in free)
        if not ok:
            raise PodProblem(f"{names.ANN_GPU_INDICES} and {names.ANN_MIG_START} must name a "
                             f"free {profile} instance of {node.name}")
        assert wanted is not None and start_raw is not None
        chosen = (wanted[0], Instance(profile, int(start_raw)))
    elif not free:
        raise PodProblem(f"no unaccounted {profile} instance on {node.name}")
    else:
        chosen = free[0]
    use.mig.add(chosen)
    gpu, inst = chosen
    return [Placement(node=node.name, gpu=gpu,
                      mig=MigInstance(profile=inst.profile, start=inst.start))]


_PLACERS: Mapping[str, Callable[[PodInfo, Any, NodeState, _Usage], list[Placement]]] = {
    "gpus": _place_whole,
    "gpu_share": _place_share,
    "mig_profile": _place_mig,
}


class _Builder:
    """Accumulates nodes, jobs and issues for one snapshot."""

    def __init__(self, catalog: Mapping[str, GpuModel], aliases: Mapping[str, str],
                 objects: K8sObjects) -> None:
        self.catalog = catalog
        self.aliases = aliases
        self.objects = objects
        self.issues: list[ImportIssue] = list(objects.issues)
        topology = chosen_topology(objects, self.issues)
        #: the Topology's levels (None: no Topology given)
        self.levels: list[str] | None = levels_of(topology) if topology else None
        self.nodes: dict[str, NodeState] = {}
        self.jobs: list[Job] = []
        self.job_pods: dict[str, list[PodInfo]] = {}

    def skip(self, obj: str, message: str) -> None:
        self.issues.append(ImportIssue(object=obj, skipped=True, message=message))

    def note(self, obj: str, message: str) -> None:
        self.issues.append(ImportIssue(object=obj, skipped=False, message=message))

    @property
    def variants(self) -> dict[str, str]:
        """Single-strategy node models -> their catalog model."""
        return {s.model: s.base_model for s in self.nodes.values() if s.base_model}

    def _restrict(self, pod: PodInfo, fields: dict[str, Any]) -> None:
        """Keep MIG jobs on GPUs that advertise their resource name.

        Under the single strategy MIG devices are `nvidia.com/gpu`: a pod asking for
        `nvidia.com/mig-<profile>` cannot use them, and a MIG job that asks for
        `nvidia.com/gpu` can only use them.
        """
        if "mig_profile" not in fields:
            return
        variants = self.variants
        if not variants:
            return
        user = fields.get("allowed_models")
        if pod.mig:
            base = user if user is not None else [
                m for m in self.catalog if m not in variants]
            profile = fields["mig_profile"]
            fields["allowed_models"] = [m for m in base if m not in variants
                                        and m in self.catalog
                                        and self.catalog[m].profile(profile) is not None]
        else:
            fields["allowed_models"] = [v for v, b in variants.items()
                                        if user is None or b in user or v in user]
        tp = fields.get("throughput")
        if tp:
            fields["throughput"] = {**tp, **{v: tp[b] for v, b in variants.items() if b in tp}}

    def add_nodes(self, items: Iterable[object]) -> None:
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                self.skip(f"node/#{i}", "not an object")
                continue
            if not is_gpu_node(item):
                continue
            name = (item.get("metadata") or {}).get("name") or f"#{i}"
            try:
                state = parse_node(item, self.catalog, self.aliases, self.issues)
            except NodeProblem as e:
                self.skip(f"node/{name}", str(e))
                continue
            if state.name in self.nodes:
                self.skip(f"node/{name}", "duplicate node name")
                continue
            self.nodes[state.name] = state

    def read_pods(self, items: Iterable[object]) -> list[PodInfo]:
        pods: list[PodInfo] = []
        for i, item in enumerate(items):
            meta = item.get("metadata") if isinstance(item, dict) else None
            ref = (f"pod/{meta.get('namespace', 'default')}/{meta.get('name')}"
                   if isinstance(meta, dict) and meta.get("name") else f"pod/#{i}")
            try:
                pod = parse_pod(item)
            except PodProblem as e:
                self.skip(ref, str(e))
                continue
            if pod.wants_gpu and pod.phase not in ("Succeeded", "Failed"):
                pods.append(pod)
        return sorted(pods, key=_sort_key)

    def _job(self, ref: str, **fields: Any) -> Job | None:
        optional = [k for k in _OPTIONAL_FIELDS if fields.get(k) is not None]
        while True:
            try:
                job = Job(**fields)
                unknown = unknown_job_models(job, self.catalog)
                if unknown:  # e.g. a typo in an annotation: skip the pod, not the snapshot
                    where, name = unknown[0]
                    self.skip(ref, f"{'.'.join(map(str, where))}: "
                                   f"{unknown_model_message(name, self.catalog)}")
                    return None
                if optional:
                    self._check_alone(job)
                return job
            except ValidationError as e:
                err = e.errors()[0]
                loc = ".".join(str(x) for x in err["loc"]) or "job"
                if not optional:
                    self.skip(ref, f"{loc}: {err['msg']}")
                    return None
                dropped = optional.pop()
                fields.pop(dropped)
                self.note(ref, f"{dropped} left out ({loc}: {err['msg']})")

    def _check_alone(self, job: Job) -> None:
        """The request's own checks of one job (contract 5 fields: elastic sizes,
        topology levels); raises ValidationError as the assembled request would."""
        variants = {k: v for k, v in self.catalog.items() if k not in BUILTIN_CATALOG}
        PlanRequest(cluster=Cluster(gpu_models=variants,
                                    topology_levels=self.levels or []),
                    jobs=[job.model_copy(update={"current": None})])

    def add_running(self, pods: list[PodInfo]) -> None:
        usage = {name: _Usage() for name in self.nodes}
        # Pods that name their GPUs claim them before the others are assigned.
        ordered = sorted(pods, key=lambda p: names.ANN_GPU_INDICES not in p.annotations)
        for pod in ordered:
            ref = f"pod/{pod.ref}"
            node = self.nodes.get(pod.node_name or "")
            if node is None:
                self.skip(ref, f"runs on node {pod.node_name} which is not an imported "
                               "GPU node; its GPUs are not accounted for")
                continue
            try:
                options = job_options(pod)
                demand = demand_of(pod, options, node)
                (shape, value), = demand.items()
                current = _PLACERS[shape](pod, value, node, usage[node.name])
            except PodProblem as e:
                self.skip(ref, str(e))
                continue
            self._add_job([pod], ref, options, demand, current=current)
        for node in self.nodes.values():
            self._mark_unhealthy(node, usage[node.name])

    def _mark_unhealthy(self, node: NodeState, use: _Usage) -> None:
        """Whole GPUs the device plugin withholds (capacity - allocatable) are unhealthy;
        which ones is not visible, so the highest free indices are marked."""
        if not node.unhealthy_whole:
            return
        free = [g for g in node.gpus
                if not g.mig_enabled and g.index not in use.whole and g.index not in use.share]
        marked = free[::-1][: node.unhealthy_whole]
        for g in marked:
            g.healthy = False
        self.issues.append(ImportIssue(object=f"node/{node.name}", skipped=False, message=(
            f"{node.unhealthy_whole} GPU(s) not allocatable; GPU(s) "
            f"{sorted(g.index for g in marked)} marked unhealthy")))

    def _v11_fields(self, pods: list[PodInfo], ref: str, options: Mapping[str, Any],
                    demand: Mapping[str, Any], group_running: int) -> dict[str, Any]:
        """Tenant, priority, topology and elastic of a job (module doc); problems are
        reported and the field left out."""
        out: dict[str, Any] = {}
        objects = self.objects
        if "tenant" not in options:
            tenant, problem = pod_tenant(pods[0], objects)
            if tenant is not None:
                out["tenant"] = tenant
            if problem is not None:
                self.note(ref, problem)
        group_value, problem = group_priority(pods, objects)
        if problem is not None:
            self.note(ref, problem)
        priorities = [] if group_value is None else [group_value]
        for pod in pods if group_value is None else ():
            value, problem = pod_priority(pod, objects)
            if value is not None:
                priorities.append(value)
            if problem is not None:
                self.note(ref, problem)
        if priorities and max(priorities) != 0:
            out["priority"] = max(priorities)
        try:
            if len(pods) > 1:
                out["topology"] = job_topology(pods[0], self.levels)
            if "gpus" in demand:
                out["elastic"] = elastic_of(pods, objects, group_running)
        except PodProblem as e:
            self.note(ref, f"{e}; planned without it")
        return {k: v for k, v in out.items() if v is not None}

    def _add_job(self, pods: list[PodInfo], ref: str, options: Mapping[str, Any],
                 demand: Mapping[str, Any], group_running: int = 0, **extra: Any) -> None:
        profile = demand.get("mig_profile")
        if profile is not None and not any(m.profile(profile) for m in self.catalog.values()):
            self.skip(ref, f"no GPU model in the catalog has MIG profile {profile!r}")
            return
        # One pod always lands on one node; only multi-pod gangs may span nodes.
        skip = (*_DEMAND_FIELDS, "single_node", "same_domain") if len(pods) == 1 else \
            _DEMAND_FIELDS
        opts = {k: v for k, v in options.items() if k not in skip}
        cpu = [p.cpu_millicores for p in pods if p.cpu_millicores is not None]
        mem = [p.host_memory_gib for p in pods if p.host_memory_gib is not None]
        created = [p.created for p in pods if p.created is not None]
        name = pods[0].ref if len(pods) == 1 else ref.removeprefix("group/")
        fields: dict[str, Any] = {
            "name": name, "tenant": pods[0].namespace,
            "cpu_millicores": sum(cpu) if cpu else None,
            "host_memory_gib": sum(mem) if mem else None,
            "submitted_at": min(created) if created else None,
            **opts, **self._v11_fields(pods, ref, options, demand, group_running),
            **demand, **extra,
        }
        self._restrict(pods[0], fields)
        job = self._job(ref, **fields)
        if job is not None:
            self.jobs.append(job)
            self.job_pods[job.name] = pods

    def add_pending(self, pods: list[PodInfo], running: list[PodInfo]) -> None:
        groups: dict[tuple[str, str], list[PodInfo]] = {}
        for pod in pods:
            group = group_of(pod)
            key = (pod.namespace, group[1]) if group else (pod.namespace, "\0" + pod.name)
            groups.setdefault(key, []).append(pod)
        running_groups: dict[tuple[str, str], int] = {}
        for pod in running:
            group = group_of(pod)
            if group:
                key = (pod.namespace, group[1])
                running_groups[key] = running_groups.get(key, 0) + 1
        for (ns, gname), members in groups.items():
            members.sort(key=lambda p: p.name)
            if len(members) == 1:
                self._pending_single(members[0])
            else:
                self._pending_gang(ns, gname, members, running_groups.get((ns, gname), 0))

    def _pending_single(self, pod: PodInfo) -> None:
        ref = f"pod/{pod.ref}"
        try:
            options = job_options(pod)
            demand = demand_of(pod, options, None)
        except PodProblem as e:
            self.skip(ref, str(e))
            return
        self._add_job([pod], ref, options, demand)

    def _pending_gang(self, ns: str, gname: str, members: list[PodInfo], running: int) -> None:
        ref = f"group/{gang_job_name(ns, gname)}"
        try:
            options = job_options(members[0])
            for pod in members:
                job_options(pod)
                if demand_of(pod, options, None).keys() != {"gpus"}:
                    raise PodProblem(f"member {pod.name} is not a whole-GPU pod; a gang job "
                                     "is whole GPUs only")
        except PodProblem as e:
            self.skip(ref, f"{len(members)} pods left out: {e}")
            return
        total = group_total(members)
        if total is not None and len(members) + running < total:
            self.issues.append(ImportIssue(object=ref, skipped=False, message=(
                f"only {len(members) + running} of {total} pods exist; planned as a gang of "
                f"the {len(members)} pending")))
        per_pod = {p.whole_gpus for p in members}
        options = {"single_node": per_pod != {1}, **options}
        demand = {"gpus": sum(p.whole_gpus for p in members)}
        self._add_job(members, ref, options, demand, group_running=running)

    def node_models(self) -> list[Node]:
        return [
            Node(name=s.name, labels=s.labels, schedulable=s.schedulable,
                 topology_domain=s.topology_domain, cpu_millicores=s.cpu_millicores,
                 memory_gib=s.memory_gib,
                 topology=node_topology(s.name, s.labels, self.levels, self.issues)
                 if self.levels else {},
                 gpus=[wire_gpu(g, s.model) for g in s.gpus])
            for s in self.nodes.values()
        ]


def build_snapshot(
    nodes: object,
    pods: object,
    *,
    policy: Policy | None = None,
    aliases: Mapping[str, str] | None = None,
    gpu_models: Mapping[str, GpuModel] | None = None,
    objects: K8sObjects | None = None,
) -> Snapshot:
    """Import a NodeList and a PodList (as `kubectl get -o json` prints them), with the
    queue, priority, topology and pod-group objects of `objects` (`read_objects`).

    Raises SnapshotError when either input is not a List object or the assembled request
    is invalid; object-level problems become `Snapshot.issues`.
    """
    node_items = list_items(nodes, "nodes", "Node")
    pod_items = list_items(pods, "pods", "Pod")
    catalog = {**BUILTIN_CATALOG, **(gpu_models or {})}
    objs = objects or K8sObjects()
    b = _Builder(catalog, dict(aliases or {}), objs)
    b.add_nodes(node_items)
    b.catalog = {**catalog, **{s.model: s.variant for s in b.nodes.values()
                               if s.variant is not None}}
    all_pods = b.read_pods(pod_items)
    running = [p for p in all_pods if p.running]
    pending = [p for p in all_pods if not p.running]
    b.add_running(running)
    b.add_pending(pending, running)
    cluster: dict[str, Any] = {"nodes": b.node_models(), "gpu_models": {
        **(gpu_models or {}),
        **{s.model: s.variant for s in b.nodes.values() if s.variant is not None}}}
    if b.levels:
        cluster["topology_levels"] = b.levels
    if objs.cluster_queues or objs.kai_queues:
        quotas = QuotaImport(objs, b.nodes, b.catalog, b.aliases)
        cluster["quotas"] = quotas.quotas()
        b.issues.extend(quotas.issues)
    request = assemble_request(cluster, b.jobs, policy or Policy())
    return Snapshot(request=request, issues=b.issues, nodes=b.nodes, job_pods=b.job_pods)
