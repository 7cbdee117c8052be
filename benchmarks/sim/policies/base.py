"""What every policy shares: the admit-then-place step and GPU-equivalent accounting.

`admit_and_place(view, order, admitted, models_for)` turns a priority order into a
Decision in three passes over one fresh `Occupancy` (current MIG layouts, no jobs):

1. admitted running jobs keep their placements (no needless migration);
2. admitted waiting jobs are placed first-fit, in order, on `models_for(job)` (any model
   in node order when None), skipped when nothing fits;
3. every other job, in order: a running one keeps its placement if it is still free
   (so it is preempted only when an admitted job took its GPUs), a waiting one is
   backfilled when it fits.

`packed_fit(occ, job, n)` places a gang of n GPUs on as few nodes as possible (the elastic
policies' placement: a gang's speedup curve is its packed placement's).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from benchmarks.sim.engine import Decision, JobRun, RoundView
from benchmarks.sim.occupancy import CapacityError, Occupancy
from models import Job, Placement
from models.rules import fits, model_eligible

ModelsFor = Callable[[JobRun], Sequence[str] | None]


def fresh_occupancy(view: RoundView) -> Occupancy:
    """An Occupancy of the view's cluster with the current MIG layouts and no job."""
    return Occupancy(view.cluster, layouts={k: list(v)
                                            for k, v in view.occupancy.layouts().items()})


def keep_running(view: RoundView) -> tuple[Occupancy, Decision, dict[str, float]]:
    """A fresh occupancy with every running job kept where it runs: (the occupancy, the
    decision so far, GPU equivalents used per tenant), the start of the quota policies."""
    occ = fresh_occupancy(view)
    decision: Decision = {}
    usage: dict[str, float] = {}
    for r in view.running:
        occ.add(r.job, r.placements or [])
        decision[r.name] = list(r.placements or [])
        usage[r.job.tenant] = usage.get(r.job.tenant, 0.0) + r.size
    return occ, decision, usage


def _any_model(_: JobRun) -> Sequence[str] | None:
    return None


def admit_and_place(view: RoundView, order: Sequence[JobRun],
                    admitted: Collection[str] | None = None,
                    models_for: ModelsFor = _any_model) -> Decision:
    """The decision for jobs in priority `order` (see the module doc)."""
    occ = fresh_occupancy(view)
    adm = {r.name for r in order} if admitted is None else set(admitted)
    decision: Decision = {}
    for r in order:
        if r.name in adm and r.placements is not None:
            occ.add(r.job, r.placements)
            decision[r.name] = list(r.placements)
    for r in order:
        if r.name in adm and r.placements is None:
            pl = occ.find(r.job, models_for(r))
            if pl is not None:
                occ.add(r.job, pl)
                decision[r.name] = pl
    for r in order:
        if r.name in decision:
            continue
        if r.placements is not None:
            try:
                occ.add(r.job, r.placements)
            except CapacityError:
                continue
            decision[r.name] = list(r.placements)
        else:
            pl = occ.find(r.job, models_for(r))
            if pl is not None:
                occ.add(r.job, pl)
                decision[r.name] = pl
    return decision


def capacity_units(view: RoundView) -> dict[bool, float]:
    """GPU equivalents of the cluster: non-MIG (False) and MIG (True) GPUs."""
    out = {False: 0.0, True: 0.0}
    for g in view.occupancy.gpus.values():
        out[g.mig] += 1.0
    return out


def admit_by_count(view: RoundView, order: Sequence[JobRun]) -> set[str]:
    """Jobs admitted in `order` while their GPU equivalents fit the cluster's totals
    (MIG jobs against MIG GPUs, the others against the rest), model-agnostic."""
    free = capacity_units(view)
    out: set[str] = set()
    for r in order:
        pool = r.job.shape == "mig"
        if fits(r.size, free[pool]):
            free[pool] -= r.size
            out.add(r.name)
    return out


def packed_fit(occ: Occupancy, job: Job, n: int,
               models: Sequence[str] | None = None) -> list[Placement] | None:
    """n idle whole GPUs of one eligible model on as few nodes as possible: the nodes with
    the most idle GPUs first (node order on ties); a `single_node` gang takes the node with
    the fewest idle GPUs that holds it. None when no model has n idle GPUs."""
    for m in models if models is not None else sorted({g.model for g in occ.gpus.values()}):
        if not model_eligible(job, m, occ.catalog[m]):
            continue
        rows = [[g for g in row if g.model == m and not g.mig and g.is_empty()]
                for row in occ.node_gpus.values()]
        rows = [r for r in rows if r]
        if job.single_node:
            fit = [r for r in rows if len(r) >= n]
            if fit:
                best = min(fit, key=len)
                return [Placement(node=g.node, gpu=g.index) for g in best[:n]]
            continue
        if sum(map(len, rows)) < n:
            continue
        out: list[Placement] = []
        for r in sorted(rows, key=len, reverse=True):
            out.extend(Placement(node=g.node, gpu=g.index) for g in r[: n - len(out)])
            if len(out) == n:
                return out
    return None
