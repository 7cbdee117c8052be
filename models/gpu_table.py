"""Every GPU of a request's cluster as flat columns, read in one pass (once per request).

On a cluster of 16,384 GPUs, each pass over the node and GPU objects costs more than the
work done with what it reads: the objects are many and scattered. `gpu_table(request)`
reads them once, in cluster order, into parallel lists that later passes walk (or hand to
`zip`, `map` and numpy) instead of the objects: the plan's statistics and fragmentation
figure (heuristics/fragmentation.py). The validator keeps its own read of the GPUs, so that
a stale cached table can never hide a violation. It is a pure read of the request: it
holds what the request says (every GPU, repeated keys included) and answers no planning
question beyond the one home of `usable` (models/capacity.py).
"""

from __future__ import annotations

from typing import NamedTuple

from models.cache import per_request
from models.capacity import usable
from models.request import Gpu, PlanRequest


class GpuTable(NamedTuple):
    """Per GPU of the cluster, in cluster order (node by node, each node's GPUs in order):
    position i of every column is the same GPU. A (node, index) pair the request repeats
    is listed each time."""

    #: (node name, GPU index)
    keys: list[tuple[str, int]]
    #: the GPU objects
    gpus: list[Gpu]
    #: the position of the GPU's node in `cluster.nodes`
    nodes: list[int]
    #: the GPU's model name
    models: list[str]
    #: `models.capacity.usable`: healthy, on a schedulable node
    usable: list[bool]
    #: MIG mode on
    mig: list[bool]


def gpu_table(request: PlanRequest) -> GpuTable:
    """The `GpuTable` of `request`'s cluster (computed once per request object; shared,
    never mutated by its readers)."""
    return per_request(request, "gpu_table", _read)


def _read(request: PlanRequest) -> GpuTable:
    """One pass over the nodes and their GPUs (`gpu_table`)."""
    keys: list[tuple[str, int]] = []
    gpus: list[Gpu] = []
    nodes: list[int] = []
    models: list[str] = []
    ok: list[bool] = []
    mig: list[bool] = []
    for ni, node in enumerate(request.cluster.nodes):
        name = node.name
        for gpu in node.gpus:
            keys.append((name, gpu.index))
            gpus.append(gpu)
            nodes.append(ni)
            models.append(gpu.model)
            ok.append(usable(node, gpu))
            mig.append(gpu.mig_enabled)
    return GpuTable(keys, gpus, nodes, models, ok, mig)
