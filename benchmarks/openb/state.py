"""Incremental cluster state for online placement, in numpy arrays.

Per node: free CPU milli, free memory MiB, free milli of each GPU (`-1` pads nodes with fewer
than the widest node's GPUs, so a padded slot never fits and never counts as free) and the
model id. One pod at a time is placed with `place`, which checks every capacity (a bug
raises, it never oversubscribes) and updates the arrays in O(#GPUs of the node). Every
capacity comparison (`gpu_fits`, `host_fits`) is the planners' one (`models.rules.fits`),
applied to whole arrays at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from benchmarks.openb.loader import MILLI, OpenbNodes, OpenbPods
from models.rules import fits

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PodReq:
    """One pod as the placement path sees it; `allowed[m]` = model id m is eligible."""

    name: str
    cpu: int
    mem: int
    num_gpu: int
    milli: int
    allowed: BoolArray

    @property
    def shared(self) -> bool:
        """A fraction of one GPU."""
        return self.num_gpu == 1 and self.milli < MILLI

    @property
    def gpu_request(self) -> int:
        """Total GPU milli asked."""
        return self.num_gpu * self.milli


def pod_reqs(pods: OpenbPods, models: list[str]) -> list[PodReq]:
    """The PodReq of every pod against the model ids of `models`."""
    out: list[PodReq] = []
    every = np.ones(len(models), dtype=bool)
    for i in range(len(pods)):
        spec = pods.gpu_spec[i]
        allowed = every if not spec else np.array([m in spec for m in models], dtype=bool)
        out.append(PodReq(pods.names[i], int(pods.cpu_milli[i]), int(pods.memory_mib[i]),
                          int(pods.num_gpu[i]), int(pods.gpu_milli[i]), allowed))
    return out


class ClusterState:
    """The free resources of every node, updated one placement at a time."""

    def __init__(self, nodes: OpenbNodes, tie_rank: IntArray | None = None) -> None:
        self.names = list(nodes.names)
        self.models = nodes.models
        mid = {m: i for i, m in enumerate(self.models)}
        self.model_id: IntArray = np.array([mid[m] for m in nodes.model], dtype=np.int64)
        self.cpu_cap: IntArray = nodes.cpu_milli.copy()
        self.mem_cap: IntArray = nodes.memory_mib.copy()
        self.num_gpus: IntArray = nodes.num_gpus.copy()
        width = int(self.num_gpus.max()) if len(self.num_gpus) else 1
        self.cpu_free: IntArray = self.cpu_cap.copy()
        self.mem_free: IntArray = self.mem_cap.copy()
        slots = np.arange(width)[None, :] < self.num_gpus[:, None]
        self.gpu_free: IntArray = np.where(slots, MILLI, -1).astype(np.int64)
        self.capacity_milli = int(self.num_gpus.sum()) * MILLI
        self.used_milli = 0
        #: node preference among equal scores (lower first); default: node order
        self.tie_rank: IntArray = (np.arange(len(self.names), dtype=np.int64)
                                   if tie_rank is None else np.asarray(tie_rank, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.names)

    def gpu_fits(self, milli: int, gpu_free: IntArray | None = None) -> BoolArray:
        """Per GPU (of `gpu_free`, default every node's), whether `milli` more fit on it;
        a padded slot never fits."""
        return fits(milli, self.gpu_free if gpu_free is None else gpu_free)

    def host_fits(self, cpu: int, mem: int) -> BoolArray:
        """Per node, whether `cpu` milli and `mem` MiB more fit on its host."""
        return fits(cpu, self.cpu_free) & fits(mem, self.mem_free)

    def feasible(self, pod: PodReq) -> IntArray:
        """Ids of the nodes that can host `pod` now (type, CPU, memory, GPUs)."""
        ok = pod.allowed[self.model_id] & self.host_fits(pod.cpu, pod.mem)
        if pod.num_gpu > 0:
            ok &= self.gpu_fits(pod.milli).sum(axis=1) >= pod.num_gpu
        return np.flatnonzero(ok)

    def fits(self, node: int, gpus: list[int], pod: PodReq) -> bool:
        """Whether `pod` fits on `node`, GPU indices `gpus`, now."""
        try:
            self._check(node, gpus, pod)
        except ValueError:
            return False
        return True

    def _check(self, node: int, gpus: list[int], pod: PodReq) -> None:
        if len(gpus) != pod.num_gpu or len(set(gpus)) != len(gpus):
            raise ValueError(f"{pod.name}: needs {pod.num_gpu} distinct GPUs, got {gpus}")
        if not pod.allowed[self.model_id[node]]:
            raise ValueError(f"{pod.name}: model of node {self.names[node]} not allowed")
        if not self.host_fits(pod.cpu, pod.mem)[node]:
            raise ValueError(f"{pod.name}: host CPU/memory of {self.names[node]} exceeded")
        room = self.gpu_fits(pod.milli, self.gpu_free[node])
        for g in gpus:
            if not 0 <= g < self.num_gpus[node] or not room[g]:
                raise ValueError(f"{pod.name}: GPU {g} of {self.names[node]} lacks capacity")

    def place(self, node: int, gpus: list[int], pod: PodReq) -> None:
        """Commit `pod` on `node`, on GPU indices `gpus`; raise ValueError if it does not fit."""
        self._check(node, gpus, pod)
        self.cpu_free[node] -= pod.cpu
        self.mem_free[node] -= pod.mem
        for g in gpus:
            self.gpu_free[node, g] -= pod.milli
        self.used_milli += pod.gpu_request

    def allocation(self) -> float:
        """Used GPU milli / capacity."""
        return self.used_milli / self.capacity_milli
