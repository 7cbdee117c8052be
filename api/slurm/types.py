"""Slurm GPU GRES types -> catalog models and MIG profiles (the documented table).

A GRES type is whatever the site wrote in gres.conf (`Type=a100`) or what `AutoDetect=nvml`
made of the NVML device name (lower case, spaces as `_`: `nvidia_a100-sxm4-80gb`,
`tesla_t4`; MIG devices add the profile: `nvidia_a100_3g.20gb`). GPU Feature Discovery
builds its product label from the same NVML name with spaces as `-`, so the Kubernetes
alias table (`api.k8s.names.PRODUCT_ALIASES`) is reused after normalising both (lower case,
`_` and spaces as `-`). Looked up in order: the caller's table (`--gres-type TYPE=MODEL`),
`TYPE_ALIASES` below (the short names sites write by hand), the catalog and the GFD alias
table by normalised name, with or without a leading `nvidia-` / `tesla-`. Nothing else is
guessed: an unknown type is reported and its GPUs left out.

A type ending in a MIG profile (`1g.5gb`, `3g.40gb`, `1g.10gb+me`) is a MIG device. Its
model is, first match wins: the caller's table for the whole type, the model of the part
before the profile (`nvidia_a100` -> the table; if that model lacks the profile, the one
model of the same family that has it: `nvidia_a100_3g.40gb` is an 80 GB A100), the one
whole-GPU model of the node that
has the profile, the one catalog model that has it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from api.k8s.names import PRODUCT_ALIASES
from models import GpuModel

#: Short GRES type names (normalised: `a100_80gb` is `a100-80gb`) -> catalog model.
#: `a100` means the 40 GB part (its MIG profiles are the `1g.5gb` family); sites with
#: 80 GB A100s map it with `--gres-type a100=A100-SXM4-80GB`.
TYPE_ALIASES: Mapping[str, str] = {
    "a100": "A100-SXM4-40GB",
    "a100-40gb": "A100-SXM4-40GB",
    "a100-80gb": "A100-SXM4-80GB",
    "a30": "A30-24GB",
    "h100": "H100-SXM5-80GB",
    "h100-nvl": "H100-NVL-94GB",
    "h200": "H200-141GB",
    "l40s": "L40S-48GB",
    "v100": "V100-32GB",
    "t4": "T4-16GB",
}

_MIG = re.compile(r"^(?:(?P<prefix>.*?)[_-])?(?P<profile>\d+g\.\d+gb(?:\+me)?)$")
_VENDORS = ("nvidia-", "tesla-")


def normalise(name: str) -> str:
    """Lower case with `_` and spaces as `-`: the form both Slurm and GFD names reduce to."""
    return re.sub(r"[_\s]+", "-", name.strip().lower())


@dataclass(frozen=True, slots=True)
class GresType:
    """What a GRES type is: a whole GPU of `model`, or a MIG device `profile` of `model`."""

    model: str
    profile: str | None = None


def _by_normalised(catalog: Mapping[str, GpuModel]) -> dict[str, str]:
    table = {normalise(k): v for k, v in PRODUCT_ALIASES.items()}
    table.update({normalise(k): k for k in catalog})
    return table


def resolve_whole(gres_type: str, catalog: Mapping[str, GpuModel],
                  extra: Mapping[str, str] | None = None) -> str | None:
    """The catalog model of a whole-GPU GRES type, or None when no table names it."""
    if extra and gres_type in extra:
        return extra[gres_type]
    table = {**_by_normalised(catalog), **TYPE_ALIASES}
    norm = normalise(gres_type)
    for cand in (norm, _strip_vendor(norm)):
        if cand in table:
            return table[cand]
    return None


def _strip_vendor(norm: str) -> str:
    for v in _VENDORS:
        if norm.startswith(v):
            return norm[len(v):]
    return norm


def mig_profile_of(gres_type: str) -> tuple[str | None, str] | None:
    """(prefix, profile) when the type names a MIG profile (`nvidia_a100_1g.5gb`)."""
    m = _MIG.match(gres_type.lower())
    if m is None:
        return None
    return m.group("prefix"), m.group("profile")


def resolve_type(
    gres_type: str,
    catalog: Mapping[str, GpuModel],
    extra: Mapping[str, str] | None = None,
    node_models: Iterable[str] = (),
) -> GresType | str:
    """A GRES type as a `GresType`, or the reason (a str) why it cannot be mapped.

    `node_models` are the catalog models of the node's whole GPUs (they decide the model of
    an unprefixed MIG type such as `1g.10gb` on an H100 node).
    """
    mig = mig_profile_of(gres_type)
    if mig is None:
        model = resolve_whole(gres_type, catalog, extra)
        if model is None:
            return (f"GRES type {gres_type!r} is not in the type table; map it with "
                    f"--gres-type {gres_type}=MODEL")
        if model not in catalog:
            return f"GRES type {gres_type!r} maps to {model!r}, which is not in the catalog"
        return GresType(model)
    prefix, profile = mig
    if extra and gres_type in extra:
        candidates = [extra[gres_type]]
    elif prefix:
        base = resolve_whole(prefix, catalog, extra)
        candidates = [base] if base is not None else []
        if base is not None and (base not in catalog or catalog[base].profile(profile) is None):
            # `nvidia_a100_3g.40gb`: the A100 family member that has the profile.
            family = _strip_vendor(normalise(prefix))
            candidates = [m for m in catalog if normalise(m).startswith(family)]
    else:
        candidates = []
    if not candidates:
        on_node = sorted({m for m in node_models
                          if m in catalog and catalog[m].profile(profile) is not None})
        candidates = on_node or sorted(m for m, spec in catalog.items()
                                       if spec.profile(profile) is not None)
    fits = [m for m in candidates if m in catalog and catalog[m].profile(profile) is not None]
    if len(fits) != 1:
        which = f"models {', '.join(fits)}" if fits else "no catalog model"
        return (f"MIG GRES type {gres_type!r}: {which} with profile {profile}; map it with "
                f"--gres-type {gres_type}=MODEL")
    return GresType(fits[0], profile)
