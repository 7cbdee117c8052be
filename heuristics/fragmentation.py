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
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from models import GpuModel, Instance, Placement, PlanRequest
from models.cache import cached
from models.gpu_table import gpu_table
from models.instance import (
    ClusterState,
    JobInfo,
    MigGeometry,
    compile_jobs,
    mig_geometry,
    per_request,
)
from models.objective import gpu_models_of
from models.rules import HOST_TOL, fits

#: A GPU: (node, index).
Gpu = tuple[str, int]

#: An empty count (what a model without GPUs of a kind has).
_NONE: Counter[Any] = Counter()

_NO_INSTANCES: frozenset[Instance] = frozenset()

_PROFILE_START = attrgetter("profile", "start")


def _classes(infos: Sequence[JobInfo], memory: dict[str, float] | None = None
             ) -> list[tuple[JobInfo, int]]:
    """The typical job classes of `infos`: (first member, size) per class, in order of
    first member. A class is the shape with the eligible present models: a whole gang's
    size and whether it may span nodes, a share's fraction and memory (to 1e-6), a MIG
    demand's profiles per model. `memory`, when given, receives each shared job's GPU
    memory (the same pass: a large request's jobs cost more to reach than to read).

    Jobs of one `JobKind` (models/instance.py) have the same shape, sizes, eligible
    models and profiles, so the pass counts the jobs per kind (and, for a whole gang,
    whether it may span nodes) and works out a class key once per kind (once per
    request)."""
    # (kind, single_node for whole gangs) -> (first member, count), in order of first member
    tally: dict[object, list[Any]] = {}
    for info in infos:
        kind = info.kind
        shape = info.shape
        if shape == "whole":
            mark: object = (kind, info.job.single_node)
        else:
            mark = kind
            if shape == "share" and memory is not None and info.gpu_mem:
                memory[info.name] = info.gpu_mem
        seen = tally.get(mark)
        if seen is None:
            tally[mark] = [info, 1]
        else:
            seen[1] += 1
    first: dict[tuple[object, ...], list[Any]] = {}
    for info, n in tally.values():
        key = _class_key(info)
        if key is None:
            continue
        seen = first.get(key)
        if seen is None:
            first[key] = [info, n]
        else:
            seen[1] += n
    return [(info, n) for info, n in first.values()]


def _class_key(info: JobInfo) -> tuple[object, ...] | None:
    """The typical class of `info` (`_classes`); None for a job without eligible present
    models (in no class)."""
    values = info.values
    if not values:
        return None
    shape = info.shape
    if shape == "whole":
        return (shape, info.gpus, info.job.single_node, frozenset(values))
    if shape == "share":
        return (shape, round(info.share, 6), round(info.gpu_mem, 6), frozenset(values))
    profiles = info.profiles
    return (shape, frozenset(zip(profiles, map(tuple, profiles.values()), strict=True)))


class _Jobs(NamedTuple):
    """What the figure reads of a request's jobs (`_request_jobs`)."""

    #: `_classes` of the jobs
    classes: list[tuple[JobInfo, int]]
    #: shared job -> its GPU memory (GiB; absent: none given)
    memory: dict[str, float]


def _request_jobs(request: PlanRequest) -> _Jobs:
    """The `_Jobs` of `request`, read in one pass over its jobs (once per request)."""
    def build(r: PlanRequest) -> _Jobs:
        memory: dict[str, float] = {}
        return _Jobs(_classes(compile_jobs(r), memory), memory)
    return per_request(request, "fragmentation_jobs", build)


def request_job_classes(request: PlanRequest) -> object | None:
    """The job classes `_request_jobs` keeps for `request` when it made them (None
    else): what a planning session carries to its next plan (`carry_job_classes`)."""
    return cached(request, "fragmentation_jobs")


def carry_job_classes(request: PlanRequest, last: object, infos: Sequence[JobInfo],
                      left: Sequence[JobInfo], joined: Sequence[JobInfo]) -> bool:
    """Make `request`'s job classes (`_request_jobs`) from `last`, those of a request
    that `request` follows (a planning session's last plan's, from
    `request_job_classes`), when its compiled jobs `infos` are that request's less
    `left` plus `joined` (a JobInfo kept as it was, or copied with another `current`,
    keeps its class): each class's count moves by the jobs that left and joined, and the
    classes' order and first members (what `_classes` gives: classes in order of their
    first member) come from a pass over `infos` that stops once every class is met
    (16,384 GPUs / 20,000 jobs: 53 classes, all met in the first 4,800 jobs, against a
    pass over all of them: 0.03 s of CPU). Whether it made them (not when `last` is no
    such classes or the counts do not add up: `_request_jobs` then makes them whole)."""
    if not isinstance(last, _Jobs):
        return False
    counts: dict[tuple[object, ...], int] = {}
    for first, n in last.classes:
        key = _class_key(first)
        assert key is not None
        counts[key] = n
    memory = dict(last.memory)
    for info in left:
        memory.pop(info.name, None)
        key = _class_key(info)
        if key is not None:
            counts[key] = counts.get(key, 0) - 1
    for info in joined:
        if info.shape == "share" and info.gpu_mem:
            memory[info.name] = info.gpu_mem
        key = _class_key(info)
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    if any(n < 0 for n in counts.values()):
        return False
    wanted = sum(1 for n in counts.values() if n > 0)
    firsts: dict[tuple[object, ...], JobInfo] = {}
    class_key = _class_key
    for info in infos:
        key = class_key(info)
        if key is not None and key not in firsts:
            if counts.get(key, 0) <= 0:
                return False
            firsts[key] = info
            if len(firsts) == wanted:
                break
    if len(firsts) != wanted:
        return False
    made = _Jobs([(info, counts[key]) for key, info in firsts.items()], memory)
    per_request(request, "fragmentation_jobs", lambda _r: made)
    return True


class _Gpus:
    """A cluster's GPUs as arrays by position (cluster order): what every snapshot of the
    cluster shares (computed once per request: `_request_gpus`)."""

    def __init__(self, keys: Sequence[Gpu], nodes: Sequence[int], models: Sequence[str],
                 usable: Sequence[bool], mig: Sequence[bool], memory: Mapping[str, float],
                 current: Mapping[int, frozenset[Instance]],
                 layouts: Sequence[MigLayout] = ()) -> None:
        """Per GPU: its (node, index), its node's position, model, whether it is usable
        and MIG-enabled; per model its memory; `current`: position -> the current MIG
        instances of each usable MIG GPU; `layouts`: `mig_layouts`, kept as they are."""
        self.layouts = list(layouts)
        #: (node, index) -> position
        self.index = {k: i for i, k in enumerate(keys)}
        names = sorted(set(models))
        code_of = {m: c for c, m in enumerate(names)}
        code = np.array([code_of[m] for m in models], dtype=np.intp)
        self.mem = np.array([memory[m] for m in names], dtype=float)[code]
        ok = np.array(usable, dtype=bool)
        is_mig = np.array(mig, dtype=bool)
        #: positions of the usable non-MIG GPUs and their (node, model) group, groups
        #: numbered in order of first GPU
        self.pos = np.flatnonzero(ok & ~is_mig)
        pairs = np.array(nodes, dtype=np.intp)[self.pos] * len(names) + code[self.pos]
        _, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
        rank = np.empty(len(first), dtype=np.intp)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        self.group = rank[inverse.reshape(-1)]
        #: per group: its model and its usable non-MIG GPUs
        self.group_model = [names[c] for c in code[self.pos[np.sort(first)]].tolist()]
        self.group_size = np.bincount(self.group, minlength=len(first)).tolist()
        #: model -> positions of its usable non-MIG GPUs, in order
        self.shares = {m: at for c, m in enumerate(names)
                       if len(at := self.pos[code[self.pos] == c])}
        #: (position, model, current instances) of the usable MIG GPUs
        self.mig = [(i, models[i], current[i])
                    for i in np.flatnonzero(ok & is_mig).tolist()]

    def __len__(self) -> int:
        return len(self.mem)


class _Snapshot:
    """Aggregated free capacity of a state, per model: identical entries are counted
    once with their multiplicity (a large cluster has few distinct ones)."""

    def __init__(self, gpus: _Gpus, whole: np.ndarray, used: np.ndarray,
                 used_mem: np.ndarray, mig_used: Mapping[int, frozenset[Instance]],
                 geometry: MigGeometry, catalog: Mapping[str, GpuModel]) -> None:
        """Per usable GPU of `gpus`, by position: taken by a whole-GPU job (`whole`), the
        shared fraction and memory used (`used`, `used_mem`), the MIG instances hosting
        jobs (`mig_used`, absent: none)."""
        self.geometry = geometry
        # model -> Counter of (free whole GPUs on a node, the node's usable GPUs of it),
        # in order of node
        self.nodes: dict[str, Counter[tuple[int, int]]] = {}
        free = ~whole & (used == 0.0) & (used_mem == 0.0)
        counts = np.bincount(gpus.group[free[gpus.pos]], minlength=len(gpus.group_size))
        for m, n, size in zip(gpus.group_model, counts.tolist(), gpus.group_size,
                              strict=True):
            counts_m = self.nodes.get(m)
            if counts_m is None:
                counts_m = self.nodes[m] = Counter()
            counts_m[(n, size)] += 1
        # model -> (remaining fraction, remaining memory) rows of the usable non-MIG GPUs
        # that are free or shared, in GPU order
        self.shares: dict[str, np.ndarray] = {}
        for m, at in gpus.shares.items():
            sel = at[~whole[at]]
            if len(sel):
                self.shares[m] = np.column_stack((1.0 - used[sel],
                                                  gpus.mem[sel] - used_mem[sel]))
        # model -> Counter of (used, free current instances)
        self.migs: dict[str, Counter[tuple[frozenset[Instance], frozenset[Instance]]]] = {}
        for i, m, cur in gpus.mig:
            hosting = mig_used.get(i)
            key = (hosting, cur - hosting) if hosting else (_NO_INSTANCES, cur)
            seen = self.migs.get(m)
            if seen is None:
                seen = self.migs[m] = Counter()
            seen[key] += 1
        self.slices = {m: catalog[m].compute_slices for m in self.migs}
        self._mig_cache: dict[str, list[tuple[frozenset[Instance], frozenset[Instance],
                                              float]]] = {}

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
        can_host = self.geometry.can_host
        for m, profs in profiles:
            for used, free, frac in self._mig_rows(m):
                relevant += frac
                if not can_host(m, used, free, profs):
                    unusable += frac
        return relevant, unusable

    def _mig_rows(self, model: str) -> list[tuple[frozenset[Instance], frozenset[Instance],
                                                   float]]:
        """(used, free current instances, free capacity of the GPUs so) per entry of
        `migs[model]`, in its order: the same for every MIG class, worked out once."""
        rows = self._mig_cache.get(model)
        if rows is None:
            entries = self.migs.get(model)
            rows = self._mig_cache[model] = [] if entries is None else [
                (used, free, n * self.geometry.free_compute(model, used) / self.slices[model])
                for (used, free), n in entries.items()]
        return rows


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
    slots = state.gpus
    gpus = _Gpus([(state.nodes[g.node].name, g.index) for g in slots],
                 [g.node for g in slots], [g.model for g in slots],
                 [g.usable for g in slots], [g.mig for g in slots],
                 {g.model: g.mem for g in slots},
                 {i: g.mig_current for i, g in enumerate(slots) if g.mig})
    whole = np.array([g.whole_job is not None for g in slots], dtype=bool)
    used = np.array([g.share_used for g in slots], dtype=float)
    used_mem = np.array([g.share_mem for g in slots], dtype=float)
    mig_used = {i: frozenset(g.mig_used) for i, g in enumerate(slots) if g.mig_used}
    snap = _Snapshot(gpus, whole, used, used_mem, mig_used, mig_geometry(state.request),
                     state.catalog)
    return _figure(snap, _classes(infos))


class PlanUse(NamedTuple):
    """What a plan takes of each GPU it uses, GPUs keyed by (node, index), read in one
    pass over its placements (`plan_use`): the plan's statistics, its final MIG layouts
    and its fragmentation figure all read it."""

    #: the share of the GPU taken, capped at 1 (a whole-GPU job 1, a share its fraction,
    #: a MIG instance its compute slices over the GPU's), GPUs in order of first
    #: placement, each summed in placement order
    taken: dict[Gpu, float]
    #: GPUs hosting a whole-GPU job, in placement order
    whole: list[Gpu]
    #: shared placements in placement order: (GPU, fraction, the job's GPU memory)
    shared: list[tuple[Gpu, float, float]]
    #: MIG GPUs -> the instances hosting jobs
    mig: dict[Gpu, set[Instance]]


def plan_use(request: PlanRequest, placements: Mapping[str, Sequence[Placement]]) -> PlanUse:
    """The `PlanUse` of `placements` (job -> placements on `request`'s GPUs)."""
    models = per_request(request, "gpu_models", gpu_models_of)
    mem_of = _request_jobs(request).memory
    taken: dict[Gpu, float] = {}
    whole: list[Gpu] = []
    shared: list[tuple[Gpu, float, float]] = []
    mig: dict[Gpu, set[Instance]] = {}
    # (model, MIG profile, start) -> (the instance, its share of the GPU), asked once each
    mig_of: dict[tuple[str, str, int], tuple[Instance, float]] = {}
    add_whole, add_shared = whole.append, shared.append
    for name, pls in placements.items():
        for p in pls:
            key = (p.node, p.gpu)
            inst, fraction = p.mig, p.fraction
            if inst is not None:
                at = (models[key], inst.profile, inst.start)
                known = mig_of.get(at)
                if known is None:
                    known = mig_of[at] = (inst.key(), _instance_share(request, *at[:2]))
                used = mig.get(key)
                if used is None:
                    mig[key] = {known[0]}
                else:
                    used.add(known[0])
                share = known[1]
            elif fraction is not None:
                share = fraction
                add_shared((key, share, mem_of.get(name, 0.0)))
            else:
                add_whole(key)
                taken[key] = 1.0  # min(1, anything + 1)
                continue
            taken[key] = min(1.0, taken.get(key, 0.0) + share)
    return PlanUse(taken, whole, shared, mig)


def _instance_share(request: PlanRequest, model: str, profile: str) -> float:
    """The share of a `model` GPU's compute slices that a `profile` instance holds (0 for
    a profile the model does not have)."""
    spec = request.cluster.catalog()[model]
    prof = spec.profile(profile)
    return prof.compute_slices / spec.compute_slices if prof else 0.0


def fragmentation(request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
                  use: PlanUse | None = None) -> float:
    """The expected share of free GPU capacity that the request's typical jobs cannot use
    once `placements` (job -> placements, a valid plan's) are applied (module doc);
    `use`: their `plan_use` when the caller has it.

    Read straight from the placements (one pass over them, then arrays over the GPUs
    and the job classes, both built once per request), not through a `ClusterState`.
    A shared GPU's fraction and memory are summed in placement order (`np.add.at`), as
    a state placing them one by one would."""
    if use is None:
        use = plan_use(request, placements)
    gpus = per_request(request, "fragmentation_gpus", _request_gpus)
    index = gpus.index
    whole = np.zeros(len(gpus), dtype=bool)
    # a GPU that is not usable has no free capacity to count; a placement on a GPU the
    # cluster lacks (position -1; none in a valid plan) counts for nothing
    n = len(use.whole)
    spots = np.fromiter(map(index.get, use.whole, repeat(-1, n)), dtype=np.intp, count=n)
    whole[spots[spots >= 0]] = True
    shared = [(i, f, mem) for key, f, mem in use.shared
              if (i := index.get(key)) is not None]
    used = np.zeros(len(gpus))
    used_mem = np.zeros(len(gpus))
    if shared:
        at, fractions, mems = zip(*shared, strict=True)
        np.add.at(used, list(at), list(fractions))
        np.add.at(used_mem, list(at), list(mems))
    mig_used = {i: frozenset(s) for key, s in use.mig.items()
                if (i := index.get(key)) is not None}
    snap = _Snapshot(gpus, whole, used, used_mem, mig_used, mig_geometry(request),
                     request.cluster.catalog())
    return _figure(snap, _request_jobs(request).classes)


class MigLayout(NamedTuple):
    """A MIG-enabled GPU and its current layout (`mig_layouts`)."""

    gpu: Gpu
    model: str
    #: the current instances in layout order, and as a set (GPUs with the same layout
    #: share both objects; no reader changes them)
    instances: list[Instance]
    now: frozenset[Instance]


def mig_layouts(request: PlanRequest) -> list[MigLayout]:
    """Every MIG-enabled GPU of `request`'s cluster (usable or not) with its current
    layout, in cluster order: read in the pass over the GPUs that the figure's table
    takes (once per request)."""
    return per_request(request, "fragmentation_gpus", _request_gpus).layouts


def _request_gpus(request: PlanRequest) -> _Gpus:
    """The `_Gpus` of `request`'s cluster, from its `gpu_table` (one pass over the GPU
    objects, shared with the validator), with its `mig_layouts` (a pass over the MIG
    GPUs alone)."""
    table = gpu_table(request)
    gpus, keys, models, oks = table.gpus, table.keys, table.models, table.usable
    seen: dict[tuple[tuple[str, int], ...], tuple[list[Instance], frozenset[Instance]]] = {}
    layouts: list[MigLayout] = []
    current: dict[int, frozenset[Instance]] = {}
    add = layouts.append
    for i in compress(range(len(gpus)), table.mig):
        instances = gpus[i].mig_instances
        # (profile, start) of each instance, read in C (3,260 MIG GPUs on L: 1 ms of
        # the 8 this loop took with a generator)
        raw = tuple(map(_PROFILE_START, instances))
        known = seen.get(raw)
        if known is None:
            insts = [m.key() for m in instances]
            known = seen[raw] = (insts, frozenset(insts))
        add(MigLayout(keys[i], models[i], known[0], known[1]))
        if oks[i]:
            current[i] = known[1]
    return _Gpus(keys, table.nodes, models, oks, table.mig,
                 {m: spec.memory_gib if spec.memory_gib else 1e18
                  for m, spec in request.cluster.catalog().items()}, current, layouts)
