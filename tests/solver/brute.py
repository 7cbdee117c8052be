"""A brute-force reference planner for tiny requests (<= 4 GPUs, <= 5 jobs).

It enumerates every placement of every job (whole-GPU gangs as GPU subsets, of every
allowed size for an elastic gang (contract 5.1), shared jobs per GPU, MIG jobs per
instance position, running jobs also at their current placement) and every combination
of them, keeps the combinations that satisfy the contract, and returns
the best by the policy's objective, lexicographic where the objective is. It shares no code
with the solver's formulation: only the domain models and the objective definition.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from models import (
    Instance,
    Job,
    MigInstance,
    Placement,
    PlanRequest,
    is_valid_layout,
    mig_profiles_for,
    model_eligible,
)
from models.objective import evaluate, same_placement
from models.rules import priority_key


def _sizes(job: Job) -> list[int]:
    """The gang sizes contract 5.1 allows: `gpus`, or for an elastic gang the integers of
    [min_gpus, max_gpus] that are keys of `speedup` (all of them without a curve)."""
    el = job.elastic
    if el is None:
        return [job.gpus or 1]
    return [n for n in range(el.min_gpus, el.max_gpus + 1)
            if not el.speedup or str(n) in el.speedup]


def _options(req: PlanRequest, job: Job) -> list[list[Placement]]:
    cat = req.cluster.catalog()
    opts: list[list[Placement]] = []
    if job.current:
        opts.append(list(job.current))
        if not job.preemptible:
            return opts
    gpus = [(n, g) for n in req.cluster.nodes for g in n.gpus
            if n.schedulable and g.healthy and model_eligible(job, g.model, cat[g.model])]
    if job.shape == "whole":
        plain = [(n, g) for n, g in gpus if not g.mig_enabled]
        combos = itertools.chain.from_iterable(
            itertools.combinations(plain, n) for n in _sizes(job))
        for combo in combos:
            if len({g.model for _, g in combo}) != 1:
                continue
            nodes = {n.name for n, _ in combo}
            if job.single_node and len(nodes) > 1:
                continue
            if job.same_domain and len({n.topology_domain or f"\0{n.name}"
                                        for n, _ in combo}) > 1:
                continue
            opts.append([Placement(node=n.name, gpu=g.index) for n, g in combo])
    elif job.shape == "share":
        opts += [[Placement(node=n.name, gpu=g.index, fraction=job.gpu_share)]
                 for n, g in gpus if not g.mig_enabled]
    else:
        for n, g in gpus:
            if not g.mig_enabled:
                continue
            for prof in mig_profiles_for(job, cat[g.model]):
                starts = prof.starts
                if not req.policy.allow_mig_reconfiguration:
                    starts = tuple(i.start for i in g.mig_instances if i.profile == prof.name)
                opts += [[Placement(node=n.name, gpu=g.index,
                                    mig=MigInstance(profile=prof.name, start=s))]
                         for s in starts]
    if job.current:
        opts = [opts[0]] + [o for o in opts[1:] if not same_placement(o, job.current)]
    return opts


def _feasible(req: PlanRequest, chosen: dict[str, list[Placement]]) -> bool:
    cat = req.cluster.catalog()
    jobs = {j.name: j for j in req.jobs}
    gpus = {(n.name, g.index): g for n in req.cluster.nodes for g in n.gpus}
    nodes = {n.name: n for n in req.cluster.nodes}
    whole: dict[tuple[str, int], int] = {}
    share: dict[tuple[str, int], list[tuple[float, float]]] = {}
    mig: dict[tuple[str, int], list[Instance]] = {}
    cpu: dict[str, float] = {}
    mem: dict[str, float] = {}
    for name, pls in chosen.items():
        job = jobs[name]
        for p in pls:
            key = (p.node, p.gpu)
            if p.mig is not None:
                mig.setdefault(key, []).append(p.mig.key())
            elif p.fraction is not None:
                share.setdefault(key, []).append((p.fraction, job.gpu_memory_gib or 0.0))
            else:
                whole[key] = whole.get(key, 0) + 1
            # a gang's host request is per `gpus` GPUs, pro rata (an elastic gang on n
            # GPUs needs n / gpus of it)
            part = 1.0 / job.gpus if job.gpus else 1.0
            cpu[p.node] = cpu.get(p.node, 0.0) + (job.cpu_millicores or 0.0) * part
            mem[p.node] = mem.get(p.node, 0.0) + (job.host_memory_gib or 0.0) * part
    for key, n in whole.items():
        if n > 1 or key in share:
            return False
    for key, items in share.items():
        if sum(f for f, _ in items) > 1 + 1e-9:
            return False
        cap = cat[gpus[key].model].memory_gib
        if cap is not None and sum(m for _, m in items) > cap + 1e-9:
            return False
    for key, insts in mig.items():
        if len(set(insts)) != len(insts):
            return False
        g = gpus[key]
        if not req.policy.allow_mig_reconfiguration:
            if not set(insts) <= {i.key() for i in g.mig_instances}:
                return False
        elif not is_valid_layout(cat[g.model], insts):
            return False
    for name, used in cpu.items():
        cap = nodes[name].cpu_millicores
        if cap is not None and used > cap + 1e-9:
            return False
    for name, used in mem.items():
        cap = nodes[name].memory_gib
        if cap is not None and used > cap + 1e-9:
            return False
    return True


def _plans(req: PlanRequest) -> Iterator[dict[str, list[Placement]]]:
    names = [j.name for j in req.jobs]
    options = [[None, *_options(req, j)] if j.preemptible or not j.current
               else _options(req, j) for j in req.jobs]

    def rec(i: int, chosen: dict[str, list[Placement]]) -> Iterator[dict[str, list[Placement]]]:
        if i == len(names):
            if req.policy.allow_preemption or all(
                    j.name in chosen for j in req.jobs if j.current):
                yield dict(chosen)
            return
        for opt in options[i]:
            if opt is None:
                yield from rec(i + 1, chosen)
                continue
            chosen[names[i]] = opt
            if _feasible(req, chosen):
                yield from rec(i + 1, chosen)
            del chosen[names[i]]

    yield from rec(0, {})


def brute_force(req: PlanRequest) -> tuple[float, dict[str, list[Placement]]] | None:
    """(optimal objective_value, one optimal placement map), or None if infeasible."""
    objective = req.policy.objective
    order = sorted(req.jobs, key=priority_key)
    best_key: tuple[float, ...] | None = None
    best: tuple[float, dict[str, list[Placement]]] | None = None
    for chosen in _plans(req):
        ev = evaluate(req, chosen)
        if objective == "fairness":
            key: tuple[float, ...] = (round(ev.objective_value, 9), ev.throughput)
        elif objective == "priority_fifo":
            key = (*(1.0 if j.name in chosen else 0.0 for j in order), ev.throughput)
        else:
            key = (ev.objective_value,)
        if best_key is None or key > best_key:
            best_key, best = key, (ev.objective_value, chosen)
    return best
