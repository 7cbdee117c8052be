"""Concrete MIG layouts from what Kubernetes shows: per-profile device counts.

The device plugin advertises how many instances of each profile a node has
(`nvidia.com/mig-1g.10gb: 2`), not which GPU holds them nor at which memory slice they
start. The planner needs positions, so `layouts_for_counts` splits the counts over the
node's MIG GPUs into valid layouts of the catalog (deterministic: GPUs are filled in index
order, fullest layout first, each at the lowest valid starts). Any split with the same
per-GPU counts is equivalent for planning new work; where the exact position of a running
pod matters, the node or pod can say so (annotations in docs/kubernetes.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from functools import cache

from models import GpuModel, Instance, valid_layouts

#: `all-balanced` of NVIDIA's default mig-parted config, per catalog model.
BALANCED: Mapping[str, Mapping[str, int]] = {
    "A100-SXM4-40GB": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
    "A100-SXM4-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "H100-SXM5-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "A30-24GB": {"1g.6gb": 2, "2g.12gb": 1},
}


def named_config_counts(name: str, model_name: str, model: GpuModel) -> dict[str, int] | None:
    """Per-GPU instance counts of a default mig-parted config name, or None if unknown.

    `all-enabled` -> {} (MIG on, no instances), `all-<profile>` -> the profile's max count
    (`all-1g.5gb.me` is one `1g.5gb+me`), `all-balanced` -> `BALANCED`. `all-disabled` and
    custom names return None.
    """
    if name == "all-enabled":
        return {}
    if name == "all-balanced":
        counts = BALANCED.get(model_name)
        return dict(counts) if counts is not None else None
    if not name.startswith("all-"):
        return None
    profile = name[len("all-"):]
    if profile.endswith(".me"):
        profile = profile[: -len(".me")] + "+me"
    spec = model.profile(profile)
    return {spec.name: spec.max_count} if spec is not None else None


@cache
def _signatures(model: GpuModel) -> tuple[tuple[tuple[tuple[str, int], ...],
                                                frozenset[Instance]], ...]:
    """One representative layout per multiset of profiles, fullest first.

    The representative is the first layout in `valid_layouts` order (lowest starts).
    """
    seen: dict[tuple[tuple[str, int], ...], frozenset[Instance]] = {}
    for layout in valid_layouts(model):
        sig = tuple(sorted(Counter(i.profile for i in layout).items()))
        seen.setdefault(sig, layout)

    compute = {p.name: p.compute_slices for p in model.mig_profiles}

    def fullness(sig: tuple[tuple[str, int], ...]) -> tuple[int, int]:
        return (-sum(n * compute[p] for p, n in sig), -sum(n for _, n in sig))

    return tuple(sorted(seen.items(), key=lambda item: fullness(item[0])))


def layouts_for_counts(
    model: GpuModel, counts: Mapping[str, int], n_gpus: int
) -> list[frozenset[Instance]] | None:
    """Split `counts` (profile -> instances on the node) into `n_gpus` valid layouts.

    Returns None when no split exists (unknown profile, too many instances).
    """
    if any(model.profile(p) is None for p in counts) or n_gpus < 0:
        return None
    profiles = sorted(counts)
    target = tuple(counts[p] for p in profiles)
    if n_gpus == 0:
        return [] if not any(target) else None
    sigs = [(tuple(dict(sig).get(p, 0) for p in profiles), layout)
            for sig, layout in _signatures(model)
            if all(p in counts for p, _ in sig)]
    failed: set[tuple[tuple[int, ...], int]] = set()

    def search(remaining: tuple[int, ...], gpus_left: int) -> list[frozenset[Instance]] | None:
        if gpus_left == 0:
            return [] if not any(remaining) else None
        if (remaining, gpus_left) in failed:
            return None
        for vec, layout in sigs:
            if all(v <= r for v, r in zip(vec, remaining, strict=True)):
                rest = search(tuple(r - v for v, r in zip(vec, remaining, strict=True)),
                              gpus_left - 1)
                if rest is not None:
                    return [layout, *rest]
        failed.add((remaining, gpus_left))
        return None

    return search(target, n_gpus)
