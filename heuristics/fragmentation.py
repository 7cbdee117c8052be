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

from collections.abc import Mapping, Sequence

from models import Instance, Placement, PlanRequest
from models.instance import ClusterState, JobInfo, MigGeometry, compile_jobs
from models.rules import HOST_TOL, fits


def _class_key(info: JobInfo) -> tuple[object, ...]:
    models = tuple(sorted(info.values))
    if info.shape == "whole":
        return ("whole", info.gpus, info.job.single_node, models)
    if info.shape == "share":
        return ("share", round(info.share, 6), round(info.gpu_mem, 6), models)
    profiles = tuple(sorted((m, tuple(p)) for m, p in info.profiles.items()))
    return ("mig", profiles)


class _Snapshot:
    """Aggregated free capacity of a state, per model."""

    def __init__(self, state: ClusterState, geometry: MigGeometry) -> None:
        self.geometry = geometry
        # model -> list of (free whole GPUs on a node, the node's usable GPUs of the model)
        self.nodes: dict[str, list[tuple[int, int]]] = {}
        # model -> list of (remaining fraction, remaining memory) of usable non-MIG GPUs
        # that are free or shared
        self.shares: dict[str, list[tuple[float, float]]] = {}
        # model -> list of (used, free current instances, free compute fraction)
        self.migs: dict[str, list[tuple[frozenset[Instance], frozenset[Instance], float]]] = {}
        per_node: dict[tuple[int, str], list[int]] = {}
        for g in state.gpus:
            if not g.usable:
                continue
            if g.mig:
                used, spare = g.mig_signature()
                frac = geometry.free_compute(g.model, used) / state.catalog[g.model].compute_slices
                self.migs.setdefault(g.model, []).append((used, spare, frac))
                continue
            slot = per_node.setdefault((g.node, g.model), [0, 0])
            slot[1] += 1
            if g.whole_job is not None:
                continue
            if g.is_free:
                slot[0] += 1
            self.shares.setdefault(g.model, []).append(
                (1.0 - g.share_used, g.mem - g.share_mem))
        for (_, m), (free, size) in per_node.items():
            self.nodes.setdefault(m, []).append((free, size))

    def whole(self, models: Sequence[str], k: int, single: bool) -> tuple[float, float]:
        """(relevant, unusable) capacity for a gang of k."""
        relevant = unusable = 0.0
        usable_total = 0
        for m in models:
            for free, size in self.nodes.get(m, []):
                relevant += free
                need = k if single else min(k, size)
                if free >= need:
                    usable_total += free
                else:
                    unusable += free
            partial = sum(r for r, _ in self.shares.get(m, []) if r < 1 - HOST_TOL)
            relevant += partial
            unusable += partial
        if not single and usable_total < k:
            unusable += usable_total
        return relevant, unusable

    def share(self, models: Sequence[str], f: float, mem: float) -> tuple[float, float]:
        """(relevant, unusable) capacity for a share f with `mem` GiB."""
        relevant = unusable = 0.0
        for m in models:
            for r, room in self.shares.get(m, []):
                relevant += r
                if not (fits(f, r) and fits(mem, room)):
                    unusable += r
        return relevant, unusable

    def mig(self, profiles: Sequence[tuple[str, tuple[str, ...]]]) -> tuple[float, float]:
        """(relevant, unusable) capacity for a MIG demand with these profiles per model."""
        relevant = unusable = 0.0
        for m, profs in profiles:
            for used, free, frac in self.migs.get(m, []):
                relevant += frac
                if not self.geometry.options(m, used, free, profs):
                    unusable += frac
        return relevant, unusable


def fragmentation_of_state(state: ClusterState, infos: Sequence[JobInfo]) -> float:
    """The fragmentation figure of `state` for the typical jobs `infos` (module doc)."""
    geometry = MigGeometry(state.catalog, state.request.policy.allow_mig_reconfiguration)
    snap = _Snapshot(state, geometry)
    classes: dict[tuple[object, ...], tuple[JobInfo, int]] = {}
    for info in infos:
        if not info.values:
            continue
        key = _class_key(info)
        first, n = classes.get(key, (info, 0))
        classes[key] = (first, n + 1)
    num = den = 0.0
    for info, n in classes.values():
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


def fragmentation(request: PlanRequest, placements: Mapping[str, Sequence[Placement]]) -> float:
    """The expected share of free GPU capacity that the request's typical jobs cannot use
    once `placements` (job -> placements, a valid plan's) are applied (module doc)."""
    infos = compile_jobs(request)
    state = ClusterState(request)
    by_name = {i.name: i for i in infos}
    for name, pl in placements.items():
        info = by_name.get(name)
        if info is not None and pl:
            state.place(info, list(pl))
    return fragmentation_of_state(state, infos)
