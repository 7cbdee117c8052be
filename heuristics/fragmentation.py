"""The fragmentation figure of a plan: the share of free GPU capacity typical jobs cannot use.

Definition (in the spirit of FGD, Weng et al., "Beware of Fragmentation", ATC'23). After
the plan, every healthy GPU on a schedulable node has a free capacity: 1 for an unused
non-MIG GPU, `1 - sum of fractions` for a shared GPU, the compute slices outside the
instances hosting jobs over the total for a MIG GPU (a GPU hosting a whole-GPU job has
none). The *typical jobs* are the request's own jobs grouped into classes of identical
shape (whole gang of k GPUs and whether it may span nodes, GPU share f, or MIG demand)
and eligible models present, each class t weighted by its frequency p_t. For a class, the
*relevant* free capacity R_t is the free capacity on GPUs it could ever use (eligible
model, right MIG mode), and the *unusable* part U_t is the part of R_t on which one more
job of the class would not fit:

- a whole gang of k (single node): free GPUs on nodes with fewer than k free GPUs of that
  model; a gang that may span nodes: free GPUs on nodes with fewer than min(k, the node's
  GPUs of that model) free, and all of them when fewer than k such GPUs are free in total;
  shared and MIG capacity is unusable for whole gangs;
- a share f: GPUs whose remaining fraction is below f (memory included);
- a MIG demand: MIG GPUs on which none of its profiles can be added (with the current
  layout's free instances only, when reconfiguration is not allowed).

    fragmentation = sum_t p_t * U_t / sum_t p_t * R_t        (0 when nothing is free)

It lies in [0, 1]: 0 means every free unit can host a typical job, 1 that none can. The
figure counts capacity, not GPUs, so a shared GPU at 0.9 counts 0.1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from models import GpuModel, Instance, Placement, PlanRequest
from models.capacity import usable
from models.instance import (
    ClusterState,
    JobInfo,
    MigGeometry,
    compile_jobs,
    mig_geometry,
    per_request,
)
from models.rules import HOST_TOL, fits

#: One usable GPU as the snapshot sees it: (node index, model, MIG enabled, taken by a
#: whole-GPU job, shared fraction used, shared memory used, its memory, MIG instances
#: hosting jobs, current MIG instances).
GpuUse = tuple[int, str, bool, bool, float, float, float, frozenset[Instance],
               frozenset[Instance]]


#: An empty count (what a model without GPUs of a kind has).
_NONE: Counter[Any] = Counter()


def _class_key(info: JobInfo) -> tuple[object, ...]:
    models = tuple(sorted(info.values))
    if info.shape == "whole":
        return ("whole", info.gpus, info.job.single_node, models)
    if info.shape == "share":
        return ("share", round(info.share, 6), round(info.gpu_mem, 6), models)
    profiles = tuple(sorted((m, tuple(p)) for m, p in info.profiles.items()))
    return ("mig", profiles)


def _classes(infos: Sequence[JobInfo]) -> list[tuple[JobInfo, int]]:
    """The typical job classes of `infos`: (first member, size) per class."""
    classes: dict[tuple[object, ...], tuple[JobInfo, int]] = {}
    for info in infos:
        if not info.values:
            continue
        key = _class_key(info)
        first, n = classes.get(key, (info, 0))
        classes[key] = (first, n + 1)
    return list(classes.values())


def _request_classes(request: PlanRequest) -> list[tuple[JobInfo, int]]:
    """`_classes` of the request's jobs."""
    return _classes(compile_jobs(request))


class _Snapshot:
    """Aggregated free capacity of a state, per model: identical entries are counted
    once with their multiplicity (a large cluster has few distinct ones)."""

    def __init__(self, gpus: Iterable[GpuUse], geometry: MigGeometry,
                 catalog: Mapping[str, GpuModel]) -> None:
        self.geometry = geometry
        # model -> Counter of (free whole GPUs on a node, the node's usable GPUs of it)
        self.nodes: dict[str, Counter[tuple[int, int]]] = {}
        # model -> (remaining fraction, remaining memory) arrays of the usable non-MIG
        # GPUs that are free or shared
        shares: dict[str, list[tuple[float, float]]] = {}
        # model -> Counter of (used, free current instances)
        self.migs: dict[str, Counter[tuple[frozenset[Instance], frozenset[Instance]]]] = {}
        per_node: dict[tuple[int, str], list[int]] = {}
        for node, model, mig, whole, used, used_mem, mem, mig_used, mig_cur in gpus:
            if mig:
                self.migs.setdefault(model, Counter())[(mig_used, mig_cur - mig_used)] += 1
                continue
            slot = per_node.setdefault((node, model), [0, 0])
            slot[1] += 1
            if whole:
                continue
            if used == 0.0 and used_mem == 0.0:
                slot[0] += 1
            shares.setdefault(model, []).append((1.0 - used, mem - used_mem))
        for (_, m), (free, size) in per_node.items():
            self.nodes.setdefault(m, Counter())[(free, size)] += 1
        self.shares = {m: np.array(v, dtype=float).reshape(-1, 2) for m, v in shares.items()}
        self.slices = {m: catalog[m].compute_slices for m in self.migs}

    def whole(self, models: Sequence[str], k: int, single: bool) -> tuple[float, float]:
        """(relevant, unusable) capacity for a gang of k."""
        relevant = unusable = 0.0
        usable_total = 0
        for m in models:
            for (free, size), n in self.nodes.get(m, _NONE).items():
                relevant += n * free
                need = k if single else min(k, size)
                if free >= need:
                    usable_total += n * free
                else:
                    unusable += n * free
            arr = self.shares.get(m)
            if arr is not None:
                r = arr[:, 0]
                partial = float(r[r < 1 - HOST_TOL].sum())
                relevant += partial
                unusable += partial
        if not single and usable_total < k:
            unusable += usable_total
        return relevant, unusable

    def share(self, models: Sequence[str], f: float, mem: float) -> tuple[float, float]:
        """(relevant, unusable) capacity for a share f with `mem` GiB."""
        relevant = unusable = 0.0
        for m in models:
            arr = self.shares.get(m)
            if arr is None:
                continue
            r, room = arr[:, 0], arr[:, 1]
            relevant += float(r.sum())
            unusable += float(r[~(fits(f, r) & fits(mem, room))].sum())
        return relevant, unusable

    def mig(self, profiles: Sequence[tuple[str, tuple[str, ...]]]) -> tuple[float, float]:
        """(relevant, unusable) capacity for a MIG demand with these profiles per model."""
        relevant = unusable = 0.0
        for m, profs in profiles:
            for (used, free), n in self.migs.get(m, _NONE).items():
                frac = n * self.geometry.free_compute(m, used) / self.slices[m]
                relevant += frac
                if not self.geometry.can_host(m, used, free, profs):
                    unusable += frac
        return relevant, unusable


def _figure(snap: _Snapshot, classes: Sequence[tuple[JobInfo, int]]) -> float:
    """The fragmentation figure of `snap` for the job classes `classes` (module doc)."""
    num = den = 0.0
    for info, n in classes:
        models = sorted(info.values)
        if info.shape == "whole":
            rel, unus = snap.whole(models, info.gpus, info.job.single_node)
        elif info.shape == "share":
            rel, unus = snap.share(models, info.share, info.gpu_mem)
        else:
            rel, unus = snap.mig(sorted((m, tuple(p)) for m, p in info.profiles.items()))
        num += n * unus
        den += n * rel
    if den <= HOST_TOL:
        return 0.0
    return min(1.0, max(0.0, num / den))


def fragmentation_of_state(state: ClusterState, infos: Sequence[JobInfo]) -> float:
    """The fragmentation figure of `state` for the typical jobs `infos` (module doc)."""
    geometry = mig_geometry(state.request)
    gpus = ((g.node, g.model, g.mig, g.whole_job is not None, g.share_used, g.share_mem,
             g.mem, frozenset(g.mig_used), g.mig_current)
            for g in state.gpus if g.usable)
    return _figure(_Snapshot(gpus, geometry, state.catalog), _classes(infos))


def fragmentation(request: PlanRequest, placements: Mapping[str, Sequence[Placement]]) -> float:
    """The expected share of free GPU capacity that the request's typical jobs cannot use
    once `placements` (job -> placements, a valid plan's) are applied (module doc).

    Read straight from the placements (one pass over them and one over the GPUs), not
    through a `ClusterState`: a plan of 20,000 jobs is finished in a few hundredths of a
    second."""
    catalog = request.cluster.catalog()
    mem_of = per_request(request, "gpu_memory_of",
                         lambda r: {j.name: j.gpu_memory_gib or 0.0 for j in r.jobs})
    whole: set[tuple[str, int]] = set()
    shared: dict[tuple[str, int], list[float]] = {}
    mig_used: dict[tuple[str, int], set[Instance]] = {}
    for name, pls in placements.items():
        for p in pls:
            key = (p.node, p.gpu)
            if p.mig is not None:
                mig_used.setdefault(key, set()).add(p.mig.key())
            elif p.fraction is not None:
                slot = shared.setdefault(key, [0.0, 0.0])
                slot[0] += p.fraction
                slot[1] += mem_of.get(name, 0.0)
            else:
                whole.add(key)
    none: frozenset[Instance] = frozenset()
    gpus: list[GpuUse] = []
    for key, ni, model, mig, mem, cur in per_request(request, "fragmentation_gpus",
                                                     _usable_gpus):
        used, used_mem = shared.get(key, (0.0, 0.0))
        gpus.append((ni, model, mig, key in whole, used, used_mem, mem,
                     frozenset(mig_used[key]) if key in mig_used else none, cur))
    geometry = mig_geometry(request)
    classes = per_request(request, "fragmentation_classes", _request_classes)
    return _figure(_Snapshot(gpus, geometry, catalog), classes)


def _usable_gpus(request: PlanRequest) -> list[tuple[tuple[str, int], int, str, bool, float,
                                                      frozenset[Instance]]]:
    """Per usable GPU, what `fragmentation` reads of it that no plan changes: (node, index),
    the node's position, model, MIG mode, memory (GiB; unbounded when the catalog has
    none) and current MIG instances."""
    catalog = request.cluster.catalog()
    none: frozenset[Instance] = frozenset()
    out = []
    for ni, node in enumerate(request.cluster.nodes):
        for gpu in node.gpus:
            if not usable(node, gpu):
                continue
            spec = catalog[gpu.model]
            cur = frozenset(m.key() for m in gpu.mig_instances) if gpu.mig_instances else none
            out.append(((node.name, gpu.index), ni, gpu.model, gpu.mig_enabled,
                        spec.memory_gib if spec.memory_gib else 1e18, cur))
    return out
