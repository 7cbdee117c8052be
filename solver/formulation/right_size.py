"""MIG right-sizing of a decoded plan: each new MIG job on the smallest instance that does.

The model gives a MIG job some instance of a profile that covers it; decoding may hand it a
larger one than it needs. Right-sizing shrinks it, inside the memory slices of the instance
it got, to the smallest covering profile that keeps the GPU's layout valid. The objective
is unchanged; the smaller instance leaves compute and slices free for later jobs.
"""

from __future__ import annotations

from collections import defaultdict

from models import (
    Instance,
    MigInstance,
    Placement,
    PlanRequest,
    is_valid_layout,
    mig_profiles_for,
)
from solver.formulation.builder import profile_of


def right_size_mig(request: PlanRequest, placements: dict[str, list[Placement]],
                   kept: set[str]) -> None:
    """Shrink each new MIG placement (not in `kept`) to the smallest covering profile that
    fits inside the memory slices of the instance it got, in place (module doc). Nothing
    changes when the policy fixes the MIG layouts."""
    catalog = request.cluster.catalog()
    models = {(n.name, g.index): g.model for n in request.cluster.nodes for g in n.gpus}
    jobs = {j.name: j for j in request.jobs}
    layout: dict[tuple[str, int], list[Instance]] = defaultdict(list)
    for pls in placements.values():
        for p in pls:
            if p.mig is not None:
                layout[(p.node, p.gpu)].append(p.mig.key())
    fixed = not request.policy.allow_mig_reconfiguration
    for name, pls in placements.items():
        p = pls[0]
        if name in kept or p.mig is None or fixed:
            continue
        key = (p.node, p.gpu)
        spec = catalog[models[key]]
        got = profile_of(spec, p.mig.profile)
        lo, hi = p.mig.start, p.mig.start + got.memory_slices
        others = [i for i in layout[key] if i != p.mig.key()]
        for cand in mig_profiles_for(jobs[name], spec):
            if cand.name == got.name or cand.memory_slices > got.memory_slices:
                continue
            if (cand.compute_slices, cand.memory_slices) >= (got.compute_slices,
                                                             got.memory_slices):
                continue
            start = next((s for s in cand.starts if lo <= s and s + cand.memory_slices <= hi
                          and is_valid_layout(spec, [*others, Instance(cand.name, s)])),
                         None)
            if start is not None:
                new = Instance(cand.name, start)
                layout[key] = [*others, new]
                pls[0] = Placement(node=p.node, gpu=p.gpu,
                                   mig=MigInstance(profile=new.profile, start=new.start))
                break
