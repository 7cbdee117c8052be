"""One Slurm node (`sinfo --json` / `scontrol --json show nodes`) -> gpuplan GPUs.

Slurm numbers a node's GPU devices 0..n-1 in gres.conf order (the `IDX` of `gres_used`
and of a job's `gres_detail`). gpuplan reads them in the order of the node's `gres`
string, which is that order when slurm.conf and gres.conf list the types alike (and always
with `AutoDetect`); `gres_used` indices that contradict it make the node unmappable.

- A whole-GPU type: one gpuplan GPU per device, gpuplan index = Slurm index.
- MIG types: Slurm shows every MIG instance as a device of its own and does not say which
  physical GPU holds it. Per model, the instances are packed into the fewest physical GPUs
  that hold them in valid layouts (`api.k8s.mig.layouts_for_counts`: GPUs filled in
  order, fullest layout first, lowest starts); devices of one profile take that profile's
  instances in index order. A physical GPU's gpuplan index is the lowest Slurm index of its
  instances. The split is reported, since the real one may differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.k8s.mig import layouts_for_counts
from api.slurm.gres import GPU, GresError, GresItem, gpu_items, parse_gres
from api.slurm.types import GresType, resolve_type
from models import GpuModel, Instance

#: Node state flags (and base states) under which Slurm starts no new job on the node.
UNSCHEDULABLE = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "UNKNOWN",
    "ERROR", "MAINTENANCE", "RESERVED", "NOT_RESPONDING", "REBOOT_REQUESTED",
    "REBOOT_ISSUED", "POWERING_DOWN", "INVALID", "INVALID_REG",
})


class NodeProblem(ValueError):
    """The node cannot be mapped as it stands (message says why)."""


def number(value: object) -> float | None:
    """A Slurm JSON number: plain, or `{"set": true, "infinite": false, "number": n}`."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def states(obj: Mapping[str, Any], key: str, flags_key: str | None = None) -> set[str]:
    """A state as a set of upper-case words: `"idle"` + `["DRAIN"]` (22.05) or
    `["IDLE", "DRAIN"]` (23.02+)."""
    raw = obj.get(key)
    words = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
    if flags_key is not None and isinstance(obj.get(flags_key), list):
        words += obj[flags_key]
    return {str(w).upper() for w in words if w}


@dataclass(frozen=True, slots=True)
class Device:
    """Where a Slurm GPU device index lives in gpuplan: a GPU and, for MIG, an instance.
    `type` is the GRES type ('' for untyped GPUs)."""

    gpu: int
    type: str
    instance: Instance | None = None


@dataclass
class NodeGpu:
    """A physical GPU as gpuplan sees it."""

    index: int
    model: str
    mig_enabled: bool = False
    instances: list[Instance] = field(default_factory=list)
    healthy: bool = True


@dataclass
class SlurmNode:
    """A Slurm node mapped to gpuplan: GPUs, device map, capacity, state, partitions."""

    name: str
    schedulable: bool
    partitions: tuple[str, ...]
    cpus: float | None
    memory_mib: float | None
    alloc_cpus: float
    alloc_memory_mib: float
    gpus: list[NodeGpu]
    devices: dict[int, Device]
    used: set[int]
    #: MIG profile -> the Slurm GRES type that names it on this node.
    mig_types: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def gpu(self, index: int) -> NodeGpu | None:
        """The gpuplan GPU with this index."""
        return next((g for g in self.gpus if g.index == index), None)


def _types(items: list[GresItem], catalog: Mapping[str, GpuModel], extra: Mapping[str, str],
           ) -> list[tuple[str, GresType, int]]:
    """(GRES type or '', what it maps to, device count) per item. Raises NodeProblem."""
    whole = []
    for it in items:
        got = resolve_type(it.type or GPU, catalog, extra)
        if isinstance(got, GresType) and got.profile is None:
            whole.append(got.model)
    out: list[tuple[str, GresType, int]] = []
    for it in items:
        got = resolve_type(it.type or GPU, catalog, extra, node_models=whole)
        if isinstance(got, str):
            raise NodeProblem(got)
        out.append((it.type or "", got, it.count))
    return out


def _pack_mig(model_name: str, model: GpuModel, devs: list[tuple[int, str, str]]
              ) -> tuple[list[NodeGpu], dict[int, Device]]:
    """Put MIG devices (index, profile, type) of one model on the fewest physical GPUs."""
    counts: dict[str, int] = {}
    for _, profile, _ in devs:
        counts[profile] = counts.get(profile, 0) + 1
    layouts = None
    for n in range(1, len(devs) + 1):
        layouts = layouts_for_counts(model, counts, n)
        if layouts is not None:
            break
    if layouts is None:
        raise NodeProblem(f"MIG devices {counts} of {model_name} fit no valid layout")
    slots: dict[str, list[tuple[int, Instance]]] = {}
    for pos, layout in enumerate(layouts):
        for inst in sorted(layout, key=lambda i: i.start):
            slots.setdefault(inst.profile, []).append((pos, inst))
    members: dict[int, list[tuple[int, Instance, str]]] = {}
    for profile in sorted(slots):
        mine = sorted(d for d in devs if d[1] == profile)
        for (idx, _, gtype), (pos, inst) in zip(mine, slots[profile], strict=True):
            members.setdefault(pos, []).append((idx, inst, gtype))
    gpus: list[NodeGpu] = []
    devices: dict[int, Device] = {}
    for pos in sorted(members):
        index = min(idx for idx, _, _ in members[pos])
        gpus.append(NodeGpu(index=index, model=model_name, mig_enabled=True,
                            instances=sorted(i for _, i, _ in members[pos])))
        for idx, inst, gtype in members[pos]:
            devices[idx] = Device(gpu=index, type=gtype, instance=inst)
    return gpus, devices


def parse_node(obj: Mapping[str, Any], catalog: Mapping[str, GpuModel],
               extra: Mapping[str, str]) -> SlurmNode | None:
    """Map one node object; None for a node without GPUs. Raises NodeProblem."""
    name = obj.get("name") or obj.get("hostname")
    if not isinstance(name, str) or not name:
        raise NodeProblem("no name")
    try:
        all_items = parse_gres(obj.get("gres"))
        used_items = gpu_items(parse_gres(obj.get("gres_used")))
    except GresError as e:
        raise NodeProblem(str(e)) from e
    items = gpu_items(all_items)
    if not any(it.count for it in items):
        return None
    sharing = sorted({it.name for it in all_items if it.name in ("mps", "shard")})
    typed = _types(items, catalog, extra)
    gpus: list[NodeGpu] = []
    devices: dict[int, Device] = {}
    mig: dict[str, list[tuple[int, str, str]]] = {}
    mig_types: dict[str, str] = {}
    next_idx = 0
    ranges: dict[str, set[int]] = {}
    for gtype, resolved, count in typed:
        idxs = list(range(next_idx, next_idx + count))
        next_idx += count
        ranges.setdefault(gtype or GPU, set()).update(idxs)
        if resolved.profile is None:
            for i in idxs:
                gpus.append(NodeGpu(index=i, model=resolved.model))
                devices[i] = Device(gpu=i, type=gtype)
        else:
            mig_types[resolved.profile] = gtype
            mig.setdefault(resolved.model, []).extend((i, resolved.profile, gtype) for i in idxs)
    notes: list[str] = []
    if sharing:
        notes.append(f"{', '.join(sharing)} GRES not modeled: GPUs that jobs share through "
                     "them look free to gpuplan unless gres_used shows them")
    for model_name, devs in mig.items():
        packed, devmap = _pack_mig(model_name, catalog[model_name], devs)
        gpus.extend(packed)
        devices.update(devmap)
        notes.append(f"{len(devs)} MIG device(s) of {model_name} placed on {len(packed)} "
                     f"physical GPU(s) {[g.index for g in packed]} (Slurm does not say which "
                     "GPU holds an instance)")
    used: set[int] = set()
    for it in used_items:
        got = set(it.indices or ())
        if got - ranges.get(it.type or GPU, set()):
            raise NodeProblem(f"gres_used {it.type or GPU} indices {sorted(got)} do not match "
                              "the order of the node's gres string")
        used |= got
    base = states(obj, "state", "state_flags")
    part = obj.get("partitions")
    return SlurmNode(
        name=name, schedulable=not (base & UNSCHEDULABLE),
        partitions=tuple(part) if isinstance(part, list) else (),
        cpus=number(obj.get("cpus")), memory_mib=number(obj.get("real_memory")),
        alloc_cpus=number(obj.get("alloc_cpus")) or 0.0,
        alloc_memory_mib=number(obj.get("alloc_memory")) or 0.0,
        gpus=sorted(gpus, key=lambda g: g.index), devices=devices, used=used,
        mig_types=mig_types, notes=notes)
