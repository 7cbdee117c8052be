"""One Slurm job (`squeue --json`) as gpuplan needs it: state, GPU request, host request.

A job's GPU request is `tres_per_node` (`--gres`, `--gpus-per-node`) or `tres_per_job`
(`--gpus`); `--gpus-per-task`/`--gpus-per-socket` are read as per-task / per-socket counts
times the job's tasks / sockets. CPUs are the job's `cpus` (at least `cpus_per_tres` x
GPUs); memory is `memory_per_node` x nodes, `memory_per_cpu` x CPUs or `memory_per_tres` x
GPUs (MiB). A pending array job with tasks not yet started is one record: its task ids
come from `array_task_string` (`0-15%4`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.slurm.gres import GresError, GresItem, expand_hostlist, gpu_items, parse_gres, parse_tres
from api.slurm.nodes import number, states

#: Pending reasons under which a job cannot start whatever the plan: planning it would
#: hold capacity for nothing, so it is reported and left out.
NOT_STARTABLE = ("Dependency", "DependencyNeverSatisfied", "BeginTime", "JobHeldAdmin",
                 "PartitionDown", "PartitionInactive", "InvalidAccount", "InvalidQOS",
                 "BadConstraints", "FrontEndDown", "NodeDown")

#: `scontrol update` field -> `squeue --json` key of the four forms of a GPU request.
TRES_FIELDS = {"TresPerNode": "tres_per_node", "TresPerJob": "tres_per_job",
               "TresPerTask": "tres_per_task", "TresPerSocket": "tres_per_socket"}

#: GRES through which Slurm shares a GPU between jobs; gpuplan does not model them.
SHARING = frozenset({"mps", "shard"})


class JobProblem(ValueError):
    """The job cannot be mapped as it stands (message says why)."""


@dataclass
class GpuRequest:
    """GPUs per node (`per_node` true) or for the whole job, by GRES type (None = any)."""

    per_node: bool
    items: list[GresItem]

    @property
    def count(self) -> int:
        """GPUs asked for (per node or per job)."""
        return sum(i.count for i in self.items)

    @property
    def types(self) -> set[str | None]:
        """The GRES types asked for (None = untyped)."""
        return {i.type for i in self.items}


@dataclass
class SlurmJob:
    """What gpuplan reads of one Slurm job."""

    id: str
    state: str
    reason: str
    partitions: tuple[str, ...]
    account: str
    user: str
    qos: str
    priority: float
    submit_time: float | None
    requeue: bool
    node_count: int
    nodes: list[str]
    gres_detail: list[list[GresItem]]
    request: GpuRequest | None
    cpus: float | None
    memory_mib: float | None
    comment: str
    features: str
    required_nodes: list[str]
    excluded_nodes: list[str]
    #: The GPU request as Slurm printed it (`TresPerNode` ... -> string), to restore it.
    tres: dict[str, str] = field(default_factory=dict)
    array_id: str = ""
    array_tasks: list[str] = field(default_factory=list)
    array_limit: int = 0

    @property
    def held(self) -> bool:
        """Held by its user (`sbatch --hold`, `scontrol hold`): gpuplan may release it."""
        return self.state == "PENDING" and self.reason == "JobHeldUser"

    @property
    def tenant(self) -> str:
        """The account, else the user (Slurm without accounting has no accounts)."""
        return self.account or self.user or "default"


def _text(obj: Mapping[str, Any], key: str) -> str:
    v = obj.get(key)
    return v if isinstance(v, str) else ""


def _int(obj: Mapping[str, Any], key: str, default: int = 0) -> int:
    v = number(obj.get(key))
    return int(v) if v is not None else default


def _request(obj: Mapping[str, Any]) -> GpuRequest | None:
    per_node = gpu_items(parse_tres(_text(obj, "tres_per_node")))
    per_job = gpu_items(parse_tres(_text(obj, "tres_per_job")))
    per_task = gpu_items(parse_tres(_text(obj, "tres_per_task")))
    per_socket = gpu_items(parse_tres(_text(obj, "tres_per_socket")))
    given = [x for x in (per_node, per_job, per_task, per_socket) if x]
    if not given:
        shared = [i.name for key in ("tres_per_node", "tres_per_job", "tres_per_task")
                  for i in parse_tres(_text(obj, key)) if i.name in SHARING]
        if shared:
            raise JobProblem(f"asks for GPU sharing GRES ({', '.join(sorted(set(shared)))}), "
                             "which gpuplan does not plan")
        return None
    if len(given) > 1:
        raise JobProblem("asks for GPUs in more than one way (per node, per job, per task, "
                         "per socket); gpuplan reads one")
    if per_node:
        return GpuRequest(True, per_node)
    if per_job:
        return GpuRequest(False, per_job)
    if per_task:
        tasks = _int(obj, "tasks", 1) or 1
        return GpuRequest(False, [GresItem(i.name, i.type, i.count * tasks) for i in per_task])
    sockets = number(obj.get("sockets_per_node"))
    if sockets is None:
        raise JobProblem("--gpus-per-socket without --sockets-per-node: the GPU count is "
                         "not known before Slurm picks nodes")
    return GpuRequest(True, [GresItem(i.name, i.type, i.count * int(sockets))
                             for i in per_socket])


def _per_gpu(obj: Mapping[str, Any], key: str) -> float | None:
    items = gpu_items(parse_tres(_text(obj, key)))
    return float(items[0].count) if items else None


def _host(obj: Mapping[str, Any], gpus: int, node_count: int) -> tuple[float | None,
                                                                       float | None]:
    cpus = number(obj.get("cpus"))
    per_gpu_cpus = _per_gpu(obj, "cpus_per_tres")
    if per_gpu_cpus is not None:
        cpus = max(cpus or 0.0, per_gpu_cpus * gpus)
    mem = None
    per_node = number(obj.get("memory_per_node"))
    per_cpu = number(obj.get("memory_per_cpu"))
    per_gpu_mem = _per_gpu(obj, "memory_per_tres")
    if per_gpu_mem is not None:
        mem = per_gpu_mem * gpus
    elif per_node is not None:
        mem = per_node * node_count
    elif per_cpu is not None and cpus is not None:
        mem = per_cpu * cpus
    return cpus, mem


def _tasks(spec: str) -> list[int]:
    """`0-3,8`, `0-15:4` (every 4th) -> task ids."""
    out: list[int] = []
    for part in spec.split(","):
        span, _, step = part.partition(":")
        lo, sep, hi = span.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (step and not step.isdigit()):
            raise JobProblem(f"array task string {spec!r} does not parse")
        out.extend(range(int(lo), int(hi if sep else lo) + 1, int(step or 1)))
    return out


def _array(obj: Mapping[str, Any], base: str) -> tuple[str, list[str], int]:
    """(job id, pending task ids, %limit) of an array record."""
    array_id = _int(obj, "array_job_id")
    task = number(obj.get("array_task_id"))
    if not array_id:
        return base, [], 0
    if task is not None:
        return f"{array_id}_{int(task)}", [], 0
    ranges, _, limit = _text(obj, "array_task_string").partition("%")
    tasks = _tasks(ranges) if ranges else []
    return str(array_id), [f"{array_id}_{t}" for t in tasks], int(limit) if limit.isdigit() else 0


def parse_job(obj: Mapping[str, Any]) -> SlurmJob:
    """Read one `squeue --json` job. Raises JobProblem."""
    raw_id = _int(obj, "job_id")
    if not raw_id:
        raise JobProblem("no job_id")
    state_words = states(obj, "job_state")
    state = next((w for w in ("RUNNING", "PENDING", "SUSPENDED", "COMPLETING")
                  if w in state_words), ",".join(sorted(state_words)) or "UNKNOWN")
    node_count = max(_int(obj, "node_count", 1), 1)
    try:
        job_id, tasks, limit = _array(obj, str(raw_id))
        request = _request(obj)
        details = [parse_gres(d) for d in obj.get("gres_detail") or [] if isinstance(d, str)]
        nodes = expand_hostlist(_text(obj, "nodes"))
        required = expand_hostlist(_text(obj, "required_nodes"))
        excluded = expand_hostlist(_text(obj, "excluded_nodes"))
    except GresError as e:
        raise JobProblem(str(e)) from e
    gpus = 0
    if request is not None:
        gpus = request.count * (node_count if request.per_node else 1)
    cpus, mem = _host(obj, gpus, node_count)
    parts = _text(obj, "partition")
    return SlurmJob(
        id=job_id, state=state, reason=_text(obj, "state_reason"),
        partitions=tuple(p for p in parts.split(",") if p),
        account=_text(obj, "account"), user=_text(obj, "user_name"), qos=_text(obj, "qos"),
        priority=number(obj.get("priority")) or 0.0,
        submit_time=number(obj.get("submit_time")),
        requeue=bool(obj.get("requeue", True)), node_count=node_count, nodes=nodes,
        gres_detail=details, request=request, cpus=cpus, memory_mib=mem,
        comment=_text(obj, "comment"), features=_text(obj, "features"),
        required_nodes=required, excluded_nodes=excluded,
        tres={field_name: _text(obj, key) for field_name, key in TRES_FIELDS.items()},
        array_id=str(_int(obj, "array_job_id") or ""), array_tasks=tasks, array_limit=limit)
