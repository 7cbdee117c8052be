"""The built-in GPU catalog and exact NVIDIA MIG geometry.

Every MIG-capable model lists its GPU-instance profiles as `nvidia-smi mig -lgipp` reports
them: compute slices, memory slices, memory, the maximum count per GPU and the valid start
memory slices. A *layout* is a set of instances (profile, start) that can coexist on one
GPU; `valid_layouts(model)` enumerates all of them (cached).

Placement rule (NVIDIA MIG user guide, NVML `nvmlGpuInstancePlacement_t`): an instance of a
profile occupies memory slices [start, start + memory_slices); a layout is valid when every
instance sits at one of its profile's listed starts, no two memory ranges overlap, compute
slices sum to <= the GPU's total, each profile appears at most its max count, and at most
one `+me` (media extensions) instance exists on the GPU.

`relative_speed` is a prior for jobs that give no throughput map: the dense FP16/BF16
tensor-core peak from NVIDIA's datasheets, normalised to the A100 (312 TFLOPS) = 1.0:
V100 125, T4 65, A30 165, L40S 362, H100 SXM5 989, H100 NVL 835, H200 989 TFLOPS. Real
speed-ups are smaller than peak ratios for memory-bound jobs; callers with measurements
(a Gavel-style throughput row per job) should send them in `Job.throughput`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Compute slices of a whole MIG GPU in the geometry of the A100, H100 and H200 (the A30 has
#: 4): a model's default, and the GPU a MIG demand is measured against when no model is known.
MIG_COMPUTE_SLICES = 7
#: Memory slices of that geometry.
MIG_MEMORY_SLICES = 8


class MigProfileSpec(BaseModel):
    """One GPU-instance profile of a MIG-capable model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="NVIDIA profile name, e.g. '3g.40gb'.")
    compute_slices: int = Field(ge=1, le=8)
    memory_slices: int = Field(ge=1, le=8)
    memory_gib: float = Field(gt=0, le=1e4, allow_inf_nan=False)
    max_count: int = Field(ge=1, le=8)
    starts: tuple[int, ...] = Field(min_length=1, description="Valid start memory slices.")
    media_extensions: bool = Field(default=False, description="A '+me' profile.")


class GpuModel(BaseModel):
    """A GPU model: memory, relative speed and (for MIG-capable models) MIG geometry.

    Sent in `cluster.gpu_models` to override or extend the built-in catalog. `memory_gib`
    may be omitted for models whose memory is unknown; memory then never constrains.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Upper bounds as for the request's fields (models/request.py): far beyond any real GPU,
    # low enough that no value overflows the planner's scaled integer arithmetic.
    memory_gib: float | None = Field(default=None, gt=0, le=1e4, allow_inf_nan=False)
    relative_speed: float = Field(default=1.0, gt=0, le=1e3, allow_inf_nan=False)
    compute_slices: int = Field(default=MIG_COMPUTE_SLICES, ge=1, le=8,
                                description="MIG compute slices.")
    memory_slices: int = Field(default=MIG_MEMORY_SLICES, ge=1, le=8,
                               description="MIG memory slices.")
    mig_profiles: tuple[MigProfileSpec, ...] = Field(
        default=(), description="GPU-instance profiles; empty = not MIG-capable."
    )

    @model_validator(mode="after")
    def _check_profiles(self) -> GpuModel:
        names = [p.name for p in self.mig_profiles]
        if len(set(names)) != len(names):
            raise ValueError("duplicate MIG profile names")
        for p in self.mig_profiles:
            for s in p.starts:
                if s < 0 or s + p.memory_slices > self.memory_slices:
                    raise ValueError(
                        f"profile {p.name}: start {s} + {p.memory_slices} slices exceeds "
                        f"{self.memory_slices} memory slices"
                    )
            if p.compute_slices > self.compute_slices:
                raise ValueError(f"profile {p.name}: more compute slices than the GPU has")
        return self

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def profile(self, name: str) -> MigProfileSpec | None:
        for p in self.mig_profiles:
            if p.name == name:
                return p
        return None


def _a100_like(mem: tuple[int, int, int, int, int, int]) -> tuple[MigProfileSpec, ...]:
    """Profiles of the 7-compute / 8-memory-slice family (A100, H100, H200).

    `mem` gives the memory (GB as named) of 1g (1 slice), 1g (2 slices), 2g, 3g, 4g, 7g.
    """
    m1, m1x2, m2, m3, m4, m7 = mem
    return (
        MigProfileSpec(name=f"1g.{m1}gb", compute_slices=1, memory_slices=1, memory_gib=m1,
                       max_count=7, starts=(0, 1, 2, 3, 4, 5, 6)),
        MigProfileSpec(name=f"1g.{m1}gb+me", compute_slices=1, memory_slices=1, memory_gib=m1,
                       max_count=1, starts=(0, 1, 2, 3, 4, 5, 6), media_extensions=True),
        MigProfileSpec(name=f"1g.{m1x2}gb", compute_slices=1, memory_slices=2,
                       memory_gib=m1x2, max_count=4, starts=(0, 2, 4, 6)),
        MigProfileSpec(name=f"2g.{m2}gb", compute_slices=2, memory_slices=2, memory_gib=m2,
                       max_count=3, starts=(0, 2, 4)),
        MigProfileSpec(name=f"3g.{m3}gb", compute_slices=3, memory_slices=4, memory_gib=m3,
                       max_count=2, starts=(0, 4)),
        MigProfileSpec(name=f"4g.{m4}gb", compute_slices=4, memory_slices=4, memory_gib=m4,
                       max_count=1, starts=(0,)),
        MigProfileSpec(name=f"7g.{m7}gb", compute_slices=7, memory_slices=8, memory_gib=m7,
                       max_count=1, starts=(0,)),
    )


_A30_PROFILES = (
    MigProfileSpec(name="1g.6gb", compute_slices=1, memory_slices=1, memory_gib=6,
                   max_count=4, starts=(0, 1, 2, 3)),
    MigProfileSpec(name="1g.6gb+me", compute_slices=1, memory_slices=1, memory_gib=6,
                   max_count=1, starts=(0, 1, 2, 3), media_extensions=True),
    MigProfileSpec(name="2g.12gb", compute_slices=2, memory_slices=2, memory_gib=12,
                   max_count=2, starts=(0, 2)),
    MigProfileSpec(name="2g.12gb+me", compute_slices=2, memory_slices=2, memory_gib=12,
                   max_count=1, starts=(0, 2), media_extensions=True),
    MigProfileSpec(name="4g.24gb", compute_slices=4, memory_slices=4, memory_gib=24,
                   max_count=1, starts=(0,)),
)

#: The built-in catalog, keyed by the model name used in `Gpu.model`.
BUILTIN_CATALOG: Mapping[str, GpuModel] = {
    "A100-SXM4-40GB": GpuModel(memory_gib=40, relative_speed=1.0,
                               mig_profiles=_a100_like((5, 10, 10, 20, 20, 40))),
    "A100-SXM4-80GB": GpuModel(memory_gib=80, relative_speed=1.0,
                               mig_profiles=_a100_like((10, 20, 20, 40, 40, 80))),
    "A30-24GB": GpuModel(memory_gib=24, relative_speed=0.53, compute_slices=4,
                         memory_slices=4, mig_profiles=_A30_PROFILES),
    "H100-SXM5-80GB": GpuModel(memory_gib=80, relative_speed=3.17,
                               mig_profiles=_a100_like((10, 20, 20, 40, 40, 80))),
    "H100-NVL-94GB": GpuModel(memory_gib=94, relative_speed=2.68,
                              mig_profiles=_a100_like((12, 24, 24, 47, 47, 94))),
    "H200-141GB": GpuModel(memory_gib=141, relative_speed=3.17,
                           mig_profiles=_a100_like((18, 35, 35, 71, 71, 141))),
    "L40S-48GB": GpuModel(memory_gib=48, relative_speed=1.16),
    "V100-32GB": GpuModel(memory_gib=32, relative_speed=0.40),
    "T4-16GB": GpuModel(memory_gib=16, relative_speed=0.21),
}


@dataclass(frozen=True, slots=True, order=True)
class Instance:
    """A MIG GPU instance position: a profile at a start memory slice."""

    profile: str
    start: int


def layout_violations(model: GpuModel, instances: Iterable[Instance]) -> list[str]:
    """Reasons why `instances` is not a valid layout of `model` (empty list = valid)."""
    out: list[str] = []
    if not model.mig_capable:
        return ["model is not MIG-capable"]
    used: dict[int, Instance] = {}
    counts: dict[str, int] = {}
    compute = 0
    media = 0
    for inst in instances:
        spec = model.profile(inst.profile)
        if spec is None:
            out.append(f"unknown profile {inst.profile!r}")
            continue
        if inst.start not in spec.starts:
            out.append(f"{inst.profile} cannot start at memory slice {inst.start}")
            continue
        for s in range(inst.start, inst.start + spec.memory_slices):
            if s in used:
                other = used[s]
                out.append(
                    f"{inst.profile}@{inst.start} overlaps {other.profile}@{other.start} "
                    f"on memory slice {s}"
                )
                break
            used[s] = inst
        counts[spec.name] = counts.get(spec.name, 0) + 1
        compute += spec.compute_slices
        media += spec.media_extensions
    for name, n in counts.items():
        spec = model.profile(name)
        if spec is not None and n > spec.max_count:
            out.append(f"{n} x {name} exceeds its max count {spec.max_count}")
    if compute > model.compute_slices:
        out.append(f"{compute} compute slices exceed the GPU's {model.compute_slices}")
    if media > 1:
        out.append(f"{media} '+me' instances; at most one per GPU")
    return out


def is_valid_layout(model: GpuModel, instances: Iterable[Instance]) -> bool:
    """True when `instances` can coexist on one GPU of `model`: exactly when
    `layout_violations` finds nothing (the same rules, read from a per-model table of
    memory-slice bit masks; the planners ask this hundreds of thousands of times on a
    large request, and a test holds the two together)."""
    table = _layout_table(model)
    if table is None:
        return False
    used = 0
    compute = 0
    media = 0
    counts: dict[str, int] = {}
    for inst in instances:
        entry = table.get(inst.profile)
        if entry is None:
            return False
        mask = entry[0].get(inst.start)
        if mask is None or used & mask:
            return False
        n = counts.get(inst.profile, 0) + 1
        if n > entry[2]:
            return False
        counts[inst.profile] = n
        used |= mask
        compute += entry[1]
        media += entry[3]
    return compute <= model.compute_slices and media <= 1


#: Per profile name: (start -> memory-slice bit mask, compute slices, max count, 1 for a
#: '+me' profile else 0).
_LayoutTable = dict[str, tuple[dict[int, int], int, int, int]]
#: id(model) -> (the model, its table): the model is held, so its id is not reused while
#: cached; cleared when it grows past `_TABLES_MAX` (requests may carry their own models).
_TABLES: dict[int, tuple[GpuModel, _LayoutTable | None]] = {}
_TABLES_MAX = 512


def _layout_table(model: GpuModel) -> _LayoutTable | None:
    """The bit-mask table of `model`'s MIG profiles (None when it is not MIG-capable)."""
    hit = _TABLES.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    table: _LayoutTable | None = None
    if model.mig_capable:
        table = {}
        for p in model.mig_profiles:
            if p.name in table:
                continue   # `profile(name)` answers with the first of a name
            masks = {s: ((1 << p.memory_slices) - 1) << s for s in p.starts}
            table[p.name] = (masks, p.compute_slices, p.max_count,
                             1 if p.media_extensions else 0)
    if len(_TABLES) >= _TABLES_MAX:
        _TABLES.clear()
    _TABLES[id(model)] = (model, table)
    return table


def _positions(model: GpuModel) -> list[Instance]:
    return sorted(
        (Instance(p.name, s) for p in model.mig_profiles for s in p.starts),
        key=lambda i: (i.start, i.profile),
    )


@cache
def _enumerate(model: GpuModel) -> tuple[frozenset[Instance], ...]:
    positions = _positions(model)
    out: list[frozenset[Instance]] = []

    # Depth-first over positions in start order; each branch keeps the layout valid.
    def extend(i: int, chosen: list[Instance]) -> None:
        out.append(frozenset(chosen))
        for k in range(i, len(positions)):
            cand = positions[k]
            if is_valid_layout(model, [*chosen, cand]):
                chosen.append(cand)
                extend(k + 1, chosen)
                chosen.pop()

    extend(0, [])
    return tuple(out)


def valid_layouts(model: GpuModel) -> tuple[frozenset[Instance], ...]:
    """Every valid layout of `model` (the empty one included), cached per model."""
    if not model.mig_capable:
        return (frozenset(),)
    return _enumerate(model)


def is_maximal_layout(model: GpuModel, instances: frozenset[Instance]) -> bool:
    """True when no valid instance position can be added to `instances`."""
    return all(
        p in instances or not is_valid_layout(model, [*instances, p])
        for p in _positions(model)
    )


def instance_positions(model: GpuModel) -> list[Instance]:
    """All (profile, start) positions of a MIG-capable model, in start order."""
    return _positions(model)
