"""`sinfo --json` + `squeue --json` -> a PlanRequest (docs/slurm.md has the mapping table).

Nodes with GPU GRES become gpuplan nodes; running GPU jobs become jobs with their `current`
devices (from `gres_detail`); pending GPU jobs become new jobs. Whatever cannot be mapped
is listed in `Snapshot.issues` (the Kubernetes import's `ImportIssue`, objects named
`node/<name>` and `job/<id>`) and left out, never guessed. GPUs that Slurm shows in use
(`gres_used`) but no imported job holds are marked unhealthy, so no plan puts work there.

Partitions: when the GPU nodes do not all sit in the same partitions, each node's GPUs get
a model of their own, `<model>@<partitions>` (added to `cluster.gpu_models` as a copy of
the catalog model), and each job's `allowed_models` lists the variants of its partitions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from api.importing import ImportIssue, SnapshotError, assemble_request, wire_gpu
from api.slurm.gres import GPU
from api.slurm.jobs import NOT_STARTABLE, SHARING, TRES_FIELDS, JobProblem, SlurmJob, parse_job
from api.slurm.nodes import NodeProblem, SlurmNode, parse_node, states
from api.slurm.types import resolve_type
from models import (
    BUILTIN_CATALOG,
    GpuModel,
    Job,
    MigInstance,
    Node,
    Placement,
    PlanRequest,
    Policy,
)
from models.instance import ClusterState, compile_jobs
from models.rules import fits

#: The policy a Slurm snapshot gets unless the caller sends one: running jobs are never
#: stopped (a Slurm requeue restarts a job from scratch; see `requeue_running`) and MIG
#: layouts are never changed (that needs a node drain and a new gres.conf; docs/slurm.md).
SLURM_POLICY = Policy(allow_preemption=False, allow_mig_reconfiguration=False)

#: At most this many tasks of one pending array are planned per snapshot.
ARRAY_TASKS = 32

#: Joins a running job's id and a device number when the job holds devices that no single
#: gpuplan job shape describes (several MIG instances, or MIG and whole GPUs together).
PART_SEP = "#"


@dataclass
class Snapshot:
    """The imported request, what could not be mapped, and the Slurm objects behind it."""

    request: PlanRequest
    issues: list[ImportIssue]
    nodes: dict[str, SlurmNode]
    #: gpuplan job name -> the Slurm job (array tasks: the array record, id = task id).
    jobs: dict[str, SlurmJob] = field(default_factory=dict)
    #: Pending GPU jobs left out of the request: Slurm job id -> (its comment now, why).
    left_out: dict[str, tuple[str, str]] = field(default_factory=dict)


def _list(obj: object, key: str) -> list[Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get(key), list):
        what = ("sinfo --json (or scontrol --json show nodes)" if key == "nodes"
                else "squeue --json")
        raise SnapshotError((key,), f"expected {what} output: an object with a `{key}` list")
    return list(obj[key])


def _room_for_running(request: PlanRequest) -> PlanRequest:
    """Raise a node's host capacity to what its running jobs take by the planner's rule.

    Capacities come from Slurm's counts, in which a multi-node job's CPUs and memory are
    split as Slurm split them; the planner splits them over the job's GPUs
    (docs/semantics.md). Where that leaves less than the kept jobs need, the node gets
    exactly what they need, so the request never starts out over capacity.
    """
    state = ClusterState(request)
    for info in compile_jobs(request):
        if info.current:
            state.place(info, list(info.current))
    used = {n.name: n for n in state.nodes}
    nodes = []
    for node in request.cluster.nodes:
        slot = used[node.name]
        update: dict[str, float] = {}
        if node.cpu_millicores is not None and not fits(slot.cpu_used, node.cpu_millicores):
            update["cpu_millicores"] = slot.cpu_used
        if node.memory_gib is not None and not fits(slot.mem_used, node.memory_gib):
            update["memory_gib"] = slot.mem_used
        nodes.append(node.model_copy(update=update) if update else node)
    cluster = request.cluster.model_copy(update={"nodes": nodes})
    return request.model_copy(update={"cluster": cluster})


def _mentions_gpu(item: Mapping[str, Any]) -> bool:
    """Whether a job record asks for GPUs in any form (to report only GPU jobs)."""
    return any(name in str(item.get(key) or "") for key in TRES_FIELDS.values()
               for name in ("gpu", *SHARING))


class _Builder:
    """Accumulates nodes, jobs and issues for one snapshot."""

    def __init__(self, catalog: Mapping[str, GpuModel], gres_types: Mapping[str, str],
                 qos_weights: Mapping[str, float], requeue_running: bool,
                 priority_weight: float) -> None:
        self.catalog = catalog
        self.requeue_running = requeue_running
        self.gres_types = gres_types
        self.qos_weights = qos_weights
        self.priority_weight = priority_weight
        self.priorities: tuple[float, float] = (0.0, 0.0)
        self.issues: list[ImportIssue] = []
        self.nodes: dict[str, SlurmNode] = {}
        self.jobs: list[Job] = []
        self.slurm_jobs: dict[str, SlurmJob] = {}
        self.claimed: dict[str, set[int]] = {}
        self.left_out: dict[str, tuple[str, str]] = {}

    def skip(self, obj: str, message: str) -> None:
        """Report `obj` as left out."""
        self.issues.append(ImportIssue(object=obj, skipped=True, message=message))

    def note(self, obj: str, message: str) -> None:
        """Report `obj` as kept, adjusted."""
        self.issues.append(ImportIssue(object=obj, skipped=False, message=message))

    # ------------------------------------------------------------------ nodes

    def add_nodes(self, items: list[Any]) -> None:
        """Map the GPU nodes; report those that cannot be mapped."""
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                self.skip(f"node/#{i}", "not an object")
                continue
            ref = f"node/{item.get('name') or '#' + str(i)}"
            try:
                node = parse_node(item, self.catalog, self.gres_types)
            except NodeProblem as e:
                self.skip(ref, str(e))
                continue
            if node is None or node.name in self.nodes:
                continue
            self.nodes[node.name] = node
            self.claimed[node.name] = set()
            for text in node.notes:
                self.note(ref, text)

    # ------------------------------------------------------------------ jobs

    def read_jobs(self, items: list[Any]) -> list[SlurmJob]:
        """The pending and running GPU jobs, in submission order; report unreadable ones."""
        out: list[SlurmJob] = []
        for i, item in enumerate(items):
            ref = f"job/{item.get('job_id', '#' + str(i))}" if isinstance(item, dict) \
                else f"job/#{i}"
            if not isinstance(item, dict):
                self.skip(ref, "not an object")
                continue
            if not states(item, "job_state") & {"RUNNING", "SUSPENDED", "PENDING"}:
                continue
            try:
                job = parse_job(item)
            except JobProblem as e:
                if not _mentions_gpu(item):
                    continue
                self.skip(ref, str(e))
                if "PENDING" in states(item, "job_state"):
                    comment = item.get("comment")
                    self.left_out[ref.removeprefix("job/")] = (
                        comment if isinstance(comment, str) else "", str(e))
                continue
            if job.request is not None and job.state in ("RUNNING", "SUSPENDED", "PENDING"):
                out.append(job)
        return sorted(out, key=lambda j: (j.submit_time or 0.0, j.id))

    def set_priorities(self, jobs: list[SlurmJob]) -> None:
        """The range of Slurm priorities (> 0: held jobs show 0) that weights scale over."""
        seen = [j.priority for j in jobs if j.priority > 0]
        self.priorities = (min(seen), max(seen)) if seen else (0.0, 0.0)

    def _priority_factor(self, job: SlurmJob) -> float:
        """1 + priority_weight x the job's place in the priority range (0 lowest, 1 top)."""
        lo, hi = self.priorities
        if not self.priority_weight or hi <= lo or job.priority <= 0:
            return 1.0
        return 1.0 + self.priority_weight * (job.priority - lo) / (hi - lo)

    def _common(self, job: SlurmJob) -> dict[str, Any]:
        return {
            "tenant": job.tenant,
            "weight": self.qos_weights.get(job.qos, 1.0) * self._priority_factor(job),
            "cpu_millicores": job.cpus * 1000 if job.cpus is not None else None,
            "host_memory_gib": job.memory_mib / 1024 if job.memory_mib is not None else None,
            "submitted_at": job.submit_time,
        }

    def skip_pending(self, job: SlurmJob, message: str) -> None:
        """Report a pending job as left out; apply writes the reason to its comment."""
        self.skip(f"job/{job.id}", message)
        self.left_out[job.id] = (job.comment, message)

    def _add(self, ref: str, job: SlurmJob, **fields: Any) -> bool:
        try:
            self.jobs.append(Job(**fields))
        except ValidationError as e:
            err = e.errors()[0]
            message = f"{'.'.join(str(x) for x in err['loc']) or 'job'}: {err['msg']}"
            if job.state == "PENDING":
                self.skip_pending(job, message)
            else:
                self.skip(ref, message)
            return False
        self.slurm_jobs[fields["name"]] = job
        return True

    def add_running(self, job: SlurmJob) -> None:
        """A running job with the devices `gres_detail` names as its `current`."""
        ref = f"job/{job.id}"
        if len(job.gres_detail) != len(job.nodes):
            self.skip(ref, f"gres_detail lists {len(job.gres_detail)} node(s) for "
                           f"{len(job.nodes)} allocated; its GPUs are marked unavailable")
            return
        held: list[Placement] = []
        devices: list[tuple[str, int]] = []
        for name, detail in zip(job.nodes, job.gres_detail, strict=True):
            node = self.nodes.get(name)
            devs = [i for it in detail if it.name == GPU for i in (it.indices or ())]
            if not devs:
                continue
            if node is None:
                self.skip(ref, f"runs on node {name}, which was not imported")
                return
            for idx in devs:
                dev = node.devices.get(idx)
                if dev is None or idx in self.claimed[name]:
                    self.skip(ref, f"GPU index {idx} of {name} is unknown or held twice")
                    return
                mig = MigInstance(profile=dev.instance.profile, start=dev.instance.start) \
                    if dev.instance is not None else None
                held.append(Placement(node=name, gpu=dev.gpu, mig=mig))
                devices.append((name, idx))
        if not held:
            self.skip(ref, "running, but gres_detail names no GPU index")
            return
        for name, idx in devices:
            self.claimed[name].add(idx)
        common = {**self._common(job), "preemptible": self.requeue_running and job.requeue
                  and job.state == "RUNNING"}
        whole = [p for p in held if p.mig is None]
        if len(whole) == len(held):
            self._add(ref, job, name=job.id, gpus=len(held), current=held,
                      single_node=len({p.node for p in held}) == 1, **common)
        elif len(held) == 1:
            assert held[0].mig is not None
            self._add(ref, job, name=job.id, mig_profile=held[0].mig.profile, current=held,
                      **common)
        else:
            self._add_parts(ref, job, held, common)

    def _add_parts(self, ref: str, job: SlurmJob, held: list[Placement],
                   common: dict[str, Any]) -> None:
        """A running job holding several MIG instances (or MIG and whole GPUs): one fixed
        gpuplan job per device, so that its devices stay accounted for."""
        n = len(held)
        self.note(ref, f"holds {n} devices that no gpuplan job shape describes; planned as "
                       f"{n} fixed parts {job.id}{PART_SEP}0..{n - 1}")
        for k, p in enumerate(held):
            shape: dict[str, Any] = {"mig_profile": p.mig.profile} if p.mig else {"gpus": 1}
            share = {key: (v / n if key in ("cpu_millicores", "host_memory_gib")
                           and v is not None else v) for key, v in common.items()}
            self._add(ref, job, name=f"{job.id}{PART_SEP}{k}", current=[p],
                      **{**share, "preemptible": False}, **shape)

    def mark_foreign(self) -> None:
        """GPUs Slurm shows in use that no imported job holds: unhealthy (reported)."""
        for node in self.nodes.values():
            foreign = sorted(node.used - self.claimed[node.name])
            gpus = sorted({node.devices[i].gpu for i in foreign if i in node.devices})
            for g in gpus:
                gpu = node.gpu(g)
                if gpu is not None:
                    gpu.healthy = False
            if gpus:
                self.note(f"node/{node.name}", f"GPU device(s) {foreign} in use by jobs "
                                               f"gpuplan did not import; GPU(s) {gpus} marked "
                                               "unhealthy")

    def _demand(self, job: SlurmJob) -> dict[str, Any]:
        """The Job demand shape of a pending job. Raises JobProblem."""
        assert job.request is not None
        types = job.request.types
        if len(types) != 1:
            raise JobProblem("asks for several GPU types at once; a gpuplan job has one model")
        (gtype,) = types
        count = job.request.count
        total = count * job.node_count if job.request.per_node else count
        if gtype is None:
            return {"gpus": total, "single_node": job.node_count == 1}
        resolved = resolve_type(gtype, self.catalog, self.gres_types)
        if isinstance(resolved, str):
            raise JobProblem(resolved)
        if resolved.profile is None:
            return {"gpus": total, "single_node": job.node_count == 1,
                    "allowed_models": [resolved.model]}
        if total != 1:
            raise JobProblem(f"asks for {total} MIG devices of type {gtype}; a gpuplan MIG job "
                             "is one instance")
        return {"mig_profile": resolved.profile, "allowed_models": [resolved.model]}

    def add_pending(self, job: SlurmJob, others: list[SlurmJob]) -> None:
        """A pending job (an array: its tasks) as new jobs, or reported."""
        ref = f"job/{job.id}"
        if job.reason in NOT_STARTABLE:
            self.skip(ref, f"pending for {job.reason}: it cannot start whatever the plan")
            return
        try:
            demand = self._demand(job)
        except JobProblem as e:
            self.skip_pending(job, str(e))
            return
        for what, value in (("features (--constraint)", job.features),
                            ("excluded nodes", ",".join(job.excluded_nodes))):
            if value:
                self.note(ref, f"{what} {value!r} not modeled; apply pins only where Slurm "
                               "accepts it")
        ids = [job.id]
        if job.array_tasks:
            ids = self._array_ids(ref, job, others)
        for task in ids:
            one = dataclasses.replace(job, id=task, array_tasks=[]) if task != job.id else job
            self._add(f"job/{task}", one, name=task, **self._common(job), **demand)

    def _array_ids(self, ref: str, job: SlurmJob, others: list[SlurmJob]) -> list[str]:
        """Task ids of a pending array record to plan: within the array's %limit, counting
        its running tasks and those already split off (own records, planned on their own)."""
        room = len(job.array_tasks)
        if job.array_limit:
            active = sum(1 for r in others if r.array_id == job.array_id and r is not job
                         and not r.array_tasks)
            room = max(job.array_limit - active, 0)
        room = min(room, ARRAY_TASKS)
        if room < len(job.array_tasks):
            self.note(ref, f"array: {len(job.array_tasks)} pending task(s), {room} planned "
                           "now (array %limit and gpuplan's per-array cap); the rest later")
        return job.array_tasks[:room]

    # ------------------------------------------------------------------ assembly

    def host_capacity(self, node: SlurmNode) -> tuple[float | None, float | None]:
        """Node CPUs (millicores) and memory (GiB) less what non-imported jobs hold."""
        mine_cpu = mine_mem = 0.0
        unique = {j.id: j for j in self.slurm_jobs.values()}
        for j in unique.values():
            if j.state != "PENDING" and node.name in j.nodes:
                parts = max(len(j.nodes), 1)
                mine_cpu += (j.cpus or 0.0) / parts
                mine_mem += (j.memory_mib or 0.0) / parts
        cpu = mem = None
        if node.cpus is not None:
            cpu = max(node.cpus - max(node.alloc_cpus - mine_cpu, 0.0), 0.0) * 1000
        if node.memory_mib:
            mem = max(node.memory_mib - max(node.alloc_memory_mib - mine_mem, 0.0), 0.0) / 1024
        return cpu, mem

    def partition_variants(self) -> dict[str, GpuModel]:
        """Give each partition set its own model names when the sets differ (see module)."""
        keys = {",".join(sorted(n.partitions)) for n in self.nodes.values()}
        if len(keys) <= 1:
            return {}
        extra: dict[str, GpuModel] = {}
        variants: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        for node in self.nodes.values():
            key = ",".join(sorted(node.partitions))
            for g in node.gpus:
                name = f"{g.model}@{key}"
                extra[name] = self.catalog[g.model]
                variants.setdefault(g.model, [])
                if (name, node.partitions) not in variants[g.model]:
                    variants[g.model].append((name, node.partitions))
                g.model = name
        for job in self.jobs:
            sj = self.slurm_jobs[job.name]
            if job.current is not None or not sj.partitions:
                continue
            base = job.allowed_models if job.allowed_models is not None else list(variants)
            job.allowed_models = sorted(
                name for m in base for name, parts in variants.get(m, [])
                if set(parts) & set(sj.partitions))
        return extra

    def node_models(self) -> list[Node]:
        """The wire Nodes of the mapped Slurm nodes."""
        out = []
        for s in self.nodes.values():
            cpu, mem = self.host_capacity(s)
            out.append(Node(
                name=s.name, schedulable=s.schedulable, cpu_millicores=cpu, memory_gib=mem,
                labels={"slurm.partitions": ",".join(s.partitions)},
                gpus=[wire_gpu(g, g.model) for g in s.gpus]))
        return out


def build_snapshot(
    sinfo: object,
    squeue: object,
    *,
    policy: Policy | None = None,
    gres_types: Mapping[str, str] | None = None,
    gpu_models: Mapping[str, GpuModel] | None = None,
    qos_weights: Mapping[str, float] | None = None,
    requeue_running: bool = False,
    priority_weight: float = 0.0,
) -> Snapshot:
    """Import `sinfo --json` (or `scontrol --json show nodes`) and `squeue --json`.

    Running jobs are kept where they are (`preemptible: false`) unless `requeue_running`:
    then those Slurm may requeue (`requeue: true`) may be moved or stopped by the plan,
    which in Slurm means a requeue and a restart from scratch. A job's weight is its QOS
    weight (`qos_weights`, default 1) times 1 + `priority_weight` x its place between the
    lowest and highest Slurm priority of the snapshot (held jobs, priority 0, count lowest).

    Raises SnapshotError when either input is not such an object or the assembled request
    is invalid; node- and job-level problems become `Snapshot.issues`.
    """
    node_items = _list(sinfo, "nodes")
    job_items = _list(squeue, "jobs")
    catalog = {**BUILTIN_CATALOG, **(gpu_models or {})}
    b = _Builder(catalog, dict(gres_types or {}), dict(qos_weights or {}), requeue_running,
                 priority_weight)
    b.add_nodes(node_items)
    jobs = b.read_jobs(job_items)
    b.set_priorities(jobs)
    running = [j for j in jobs if j.state != "PENDING"]
    for job in running:
        b.add_running(job)
    b.mark_foreign()
    for job in jobs:
        if job.state == "PENDING":
            b.add_pending(job, jobs)
    extra = b.partition_variants()
    request = assemble_request({"nodes": b.node_models(),
                                "gpu_models": {**(gpu_models or {}), **extra}},
                               b.jobs, policy or SLURM_POLICY.model_copy())
    request = _room_for_running(request)
    return Snapshot(request=request, issues=b.issues, nodes=b.nodes, jobs=b.slurm_jobs,
                    left_out=b.left_out)

