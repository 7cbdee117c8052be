"""Read the Alibaba PAI 2023 OpenB trace (nodes and pods) and map it to the wire contract.

Source: alibaba/clusterdata @ 7a6c496e, `cluster-trace-gpu-v2023/csv/` (Weng et al.,
"Beware of Fragmentation", ATC'23), copied to `../shared/data/alibaba-pai-2023/`.

Nodes: `sn,cpu_milli,memory_mib,gpu,model`. Pods: `name,cpu_milli,memory_mib,num_gpu,
gpu_milli,gpu_spec,...`. The harness works on the plain arrays (`OpenbNodes`, `OpenbPods`);
`to_request` maps them to a `PlanRequest`:

- each trace GPU type (G2, T4, P100, ...) becomes a `cluster.gpu_models` entry
  `GpuModel(memory_gib=None, relative_speed=1.0)`: no MIG, memory never constrains;
- `num_gpu = 1, gpu_milli < 1000` is a shared job, `gpu_share = gpu_milli / 1000`;
  `gpu_milli = 1000` asks for `num_gpu` whole GPUs (one node, one model);
- `gpu_spec` `A|B` -> `allowed_models` (sorted, duplicates dropped);
- CPU and memory -> `cpu_millicores` / `host_memory_gib` (MiB / 1024).

CPU-only pods (`num_gpu = 0`) have no demand shape in the contract (a job needs exactly one
of gpus / mig / mig_profile / gpu_share). Our call: they stay OUTSIDE the GPU plan. The
online harness places them like the paper's simulator does (they take CPU and memory of a
GPU node and nothing else; their GPU request is 0, so they never move the x axis);
`to_request` leaves them out and returns them beside the request, and the batch mode
places them after the GPU plan on the CPU/memory that is left (see `batch.py`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from benchmarks.paths import data_dir
from models import Cluster, Gpu, GpuModel, Job, Node, PlanRequest, Policy

MILLI = 1000
#: workload name (CLI `--workload`) -> pod CSV file name.
WORKLOADS = {
    "default": "openb_pod_list_default.csv",
    "gpuspec33": "openb_pod_list_gpuspec33.csv",
}
NODE_FILE = "openb_node_list_gpu_node.csv"

IntArray = npt.NDArray[np.int64]


def trace_dir() -> Path:
    """The folder holding the OpenB CSVs."""
    return data_dir() / "alibaba-pai-2023"


@dataclass(frozen=True)
class OpenbNodes:
    """The GPU nodes of the trace as parallel arrays (index = node id)."""

    names: list[str]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpus: IntArray
    model: list[str]

    @property
    def models(self) -> list[str]:
        """The distinct GPU types, sorted (index = model id)."""
        return sorted(set(self.model))

    @property
    def capacity_milli(self) -> int:
        """Total GPU milli of the cluster (1000 per GPU)."""
        return int(self.num_gpus.sum()) * MILLI

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class OpenbPods:
    """Pods of the trace as parallel arrays; `gpu_spec` is a tuple of allowed types, () = any."""

    names: list[str]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    gpu_spec: list[tuple[str, ...]]
    #: the trace's `gpu_spec` text as written (duplicates and order kept); None: from gpu_spec
    spec_text: list[str] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def spec_label(self, i: int) -> str:
        """Pod `i`'s GPU type spec as the trace writes it (the paper's simulator keys its
        typical pods on this text: `V100M16|V100M32|V100M32` is not `V100M16|V100M32`)."""
        return self.spec_text[i] if self.spec_text is not None else "|".join(self.gpu_spec[i])

    @property
    def total_gpu_milli(self) -> IntArray:
        """Per pod, the GPU milli asked in total (num_gpu x gpu_milli)."""
        return self.num_gpu * self.gpu_milli

    def take(self, index: npt.ArrayLike) -> OpenbPods:
        """The pods at `index`, in that order (names kept)."""
        idx = np.asarray(index, dtype=np.int64)
        return OpenbPods(
            names=[self.names[i] for i in idx],
            cpu_milli=self.cpu_milli[idx],
            memory_mib=self.memory_mib[idx],
            num_gpu=self.num_gpu[idx],
            gpu_milli=self.gpu_milli[idx],
            gpu_spec=[self.gpu_spec[i] for i in idx],
            spec_text=None if self.spec_text is None else [self.spec_text[i] for i in idx],
        )

    def renamed(self, names: list[str]) -> OpenbPods:
        """The same pods under new names."""
        return OpenbPods(names, self.cpu_milli, self.memory_mib, self.num_gpu,
                         self.gpu_milli, self.gpu_spec, self.spec_text)


def parse_spec(text: str) -> tuple[str, ...]:
    """`'V100M16|V100M32|V100M32'` -> `('V100M16', 'V100M32')`; empty -> `()` (any type)."""
    return tuple(sorted({s.strip() for s in text.split("|") if s.strip()}))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def load_nodes(path: Path | None = None) -> OpenbNodes:
    """Read the GPU node list (`sn,cpu_milli,memory_mib,gpu,model`)."""
    rows = _rows(path or trace_dir() / NODE_FILE)
    return OpenbNodes(
        names=[r["sn"] for r in rows],
        cpu_milli=np.array([int(r["cpu_milli"]) for r in rows], dtype=np.int64),
        memory_mib=np.array([int(r["memory_mib"]) for r in rows], dtype=np.int64),
        num_gpus=np.array([int(r["gpu"]) for r in rows], dtype=np.int64),
        model=[r["model"] for r in rows],
    )


def load_pods(path: Path | None = None, workload: str = "default") -> OpenbPods:
    """Read a pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...`).

    Raises ValueError on a pod that is neither CPU-only, shared (one GPU, milli < 1000)
    nor whole-GPU (milli = 1000).
    """
    rows = _rows(path or trace_dir() / WORKLOADS[workload])
    pods = OpenbPods(
        names=[r["name"] for r in rows],
        cpu_milli=np.array([int(r["cpu_milli"]) for r in rows], dtype=np.int64),
        memory_mib=np.array([int(r["memory_mib"]) for r in rows], dtype=np.int64),
        num_gpu=np.array([int(r["num_gpu"]) for r in rows], dtype=np.int64),
        gpu_milli=np.array([int(r["gpu_milli"] or 0) for r in rows], dtype=np.int64),
        gpu_spec=[parse_spec(r.get("gpu_spec") or "") for r in rows],
        spec_text=[(r.get("gpu_spec") or "").strip() for r in rows],
    )
    for i, (n, m) in enumerate(zip(pods.num_gpu, pods.gpu_milli, strict=True)):
        ok = (n == 0 and m == 0) or (n == 1 and 0 < m < MILLI) or (n >= 1 and m == MILLI)
        if not ok:
            raise ValueError(f"pod {pods.names[i]}: unsupported shape num_gpu={n} gpu_milli={m}")
    return pods


def node_request(nodes: OpenbNodes) -> Cluster:
    """The cluster of the contract: one Node per trace node, GPUs indexed 0..gpu-1."""
    return Cluster(
        nodes=[
            Node(
                name=nodes.names[i],
                cpu_millicores=float(nodes.cpu_milli[i]),
                memory_gib=float(nodes.memory_mib[i]) / 1024.0,
                gpus=[Gpu(index=g, model=nodes.model[i]) for g in range(int(nodes.num_gpus[i]))],
            )
            for i in range(len(nodes))
        ],
        gpu_models={m: GpuModel(memory_gib=None, relative_speed=1.0) for m in nodes.models},
    )


def pod_job(pods: OpenbPods, i: int) -> Job | None:
    """The contract Job of pod `i`, or None for a CPU-only pod (kept outside the GPU plan)."""
    n, m = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
    if n == 0:
        return None
    shape: dict[str, float | int] = (
        {"gpu_share": m / MILLI} if m < MILLI else {"gpus": n}
    )
    return Job(
        name=pods.names[i],
        cpu_millicores=float(pods.cpu_milli[i]),
        host_memory_gib=float(pods.memory_mib[i]) / 1024.0,
        allowed_models=list(pods.gpu_spec[i]) or None,
        **shape,
    )


def to_request(
    nodes: OpenbNodes, pods: OpenbPods, policy: Policy | None = None
) -> tuple[PlanRequest, list[int]]:
    """The PlanRequest of the GPU pods, and the indices of the CPU-only pods left out."""
    jobs: list[Job] = []
    cpu_only: list[int] = []
    for i in range(len(pods)):
        job = pod_job(pods, i)
        if job is None:
            cpu_only.append(i)
        else:
            jobs.append(job)
    request = PlanRequest(cluster=node_request(nodes), jobs=jobs, policy=policy or Policy())
    return request, cpu_only
