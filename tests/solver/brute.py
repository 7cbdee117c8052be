"""A brute-force reference planner for tiny requests (<= 4 GPUs, <= 5 jobs).

It enumerates every placement of every job (whole-GPU gangs as GPU subsets, of every
allowed size for an elastic gang (contract 5.1), shared jobs per GPU, MIG jobs per
instance position, running jobs also at their current placement) and every combination
of them, keeps the combinations that satisfy the contract, and returns
the best by the policy's objective, lexicographic where the objective is. It shares no code
with the solver's formulation: only the domain models and the objective definition.

Topology levels (contract 5.5) are read from the contract here: a gang's GPUs lie in one
domain of its required level ("host": one node; "domain": v1's `topology_domain`, a node
without one a domain of its own; a listed level: the node's domains from the widest level
down to it), and `evaluate` charges the preferred level's costs.
Co-location interference (contract 5.2) is derived here from the contract's words
(`_contract_factors`) and checked against the shared evaluator on every candidate plan.
Quotas and priority classes (contract 5.3 / 5.4) are read from the contract here: usage of
a tenant on a key is the size of its and its descendants' placed jobs on that model (or
on any, for "*"); a plan breaking a limit (beyond what non-preemptible running jobs kept
in place use) is infeasible; plans rank by the guaranteed usage served, then by each class
from the highest down (the policy objective over the class's jobs, as `evaluate` defines
it on a request holding only them; priority_fifo and fairness by their own order within
the class), then as without levels.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from models import (
    Instance,
    Job,
    MigInstance,
    Node,
    Placement,
    PlanRequest,
    is_valid_layout,
    mig_profiles_for,
    model_eligible,
)
from models.objective import evaluate, same_placement, topology_costs
from models.rules import job_size, job_value, priority_key


def _sizes(job: Job) -> list[int]:
    """The gang sizes contract 5.1 allows: `gpus`, or for an elastic gang the integers of
    [min_gpus, max_gpus] that are keys of `speedup` (all of them without a curve)."""
    el = job.elastic
    if el is None:
        return [job.gpus or 1]
    return [n for n in range(el.min_gpus, el.max_gpus + 1)
            if not el.speedup or str(n) in el.speedup]


def _domain(req: PlanRequest, node: Node, level: str) -> object:
    """The domain of `node` at topology level `level` (module doc)."""
    if level == "host":
        return node.name
    if level == "domain":
        return node.topology_domain if node.topology_domain is not None else ("", node.name)
    levels = req.cluster.topology_levels
    return tuple(node.topology[lv] for lv in levels[:levels.index(level) + 1])


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
            required = job.topology.required if job.topology is not None else None
            if required is not None and len({_domain(req, n, required)
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


def _contract_factors(req: PlanRequest, chosen: dict[str, list[Placement]]
                      ) -> dict[str, float]:
    """Contract 5.2, read literally: a job of class a runs at speed(a, b) times its own
    speed while it shares a GPU with a job of class b; absent pairs and classless jobs mean
    1.0; with more than two jobs on one GPU the factors of all co-residents multiply."""
    speed = {(p.a, p.b): p.speed for p in req.interference}
    jobs = {j.name: j for j in req.jobs}
    out: dict[str, float] = {}
    for name, pls in chosen.items():
        me = jobs[name]
        if me.gpu_share is None:
            continue
        f = 1.0
        for other, opls in chosen.items():
            them = jobs[other]
            if other == name or them.gpu_share is None:
                continue
            if (opls[0].node, opls[0].gpu) == (pls[0].node, pls[0].gpu) \
                    and me.colocation_class is not None and them.colocation_class is not None:
                f *= speed.get((me.colocation_class, them.colocation_class), 1.0)
        out[name] = f
    return out


def _check_throughput(req: PlanRequest, chosen: dict[str, list[Placement]],
                      throughput: float) -> None:
    """The evaluator's throughput (before costs) must be the contract's."""
    cat = req.cluster.catalog()
    models = {(n.name, g.index): g.model for n in req.cluster.nodes for g in n.gpus}
    factors = _contract_factors(req, chosen)
    want = sum(job_value(j, models[(chosen[j.name][0].node, chosen[j.name][0].gpu)], cat,
                         len(chosen[j.name]) if j.elastic is not None else None)
               * factors.get(j.name, 1.0) for j in req.jobs if j.name in chosen)
    want -= topology_costs(req, chosen)  # contract 5.5's costs, charged as evaluate does
    pol = req.policy
    moved = sum(1 for j in req.jobs if j.current and j.name in chosen
                and not same_placement(chosen[j.name], j.current))
    stopped = sum(1 for j in req.jobs if j.current and j.name not in chosen)
    want -= pol.migration_cost * moved + pol.preemption_cost * stopped
    assert abs(want - throughput) <= 1e-9 * max(1.0, abs(want)), (want, throughput)


def _usage(req: PlanRequest, chosen: dict[str, list[Placement]],
           only: set[str] | None = None) -> dict[tuple[str, str], float]:
    """Usage per (tenant, key) of the chosen jobs (of `only`, when given)."""
    quotas = req.cluster.quotas
    cat = req.cluster.catalog()
    models = {(n.name, g.index): g.model for n in req.cluster.nodes for g in n.gpus}
    out: dict[tuple[str, str], float] = {}
    for job in req.jobs:
        pls = chosen.get(job.name)
        if not pls or (only is not None and job.name not in only):
            continue
        model = models[(pls[0].node, pls[0].gpu)]
        # contract 5.3: an elastic gang uses the n GPUs it got
        size = float(len(pls)) if job.elastic is not None else job_size(job, cat[model])
        tenant: str | None = job.tenant
        while tenant is not None and tenant in quotas:
            for key in (model, "*"):
                out[(tenant, key)] = out.get((tenant, key), 0.0) + size
            tenant = quotas[tenant].parent
    return out


def _within_limits(req: PlanRequest, chosen: dict[str, list[Placement]]) -> bool:
    """Q1: no usage over its limit, beyond what kept non-preemptible running jobs use."""
    quotas = req.cluster.quotas
    if not quotas:
        return True
    usage = _usage(req, chosen)
    fixed = _usage(req, chosen, {j.name for j in req.jobs if j.current and not j.preemptible})
    return all(usage.get((t, k), 0.0) <= max(lim, fixed.get((t, k), 0.0)) + 1e-9
               for t, q in quotas.items() for k, lim in q.limit.items())


def levels_key(req: PlanRequest, chosen: dict[str, list[Placement]]) -> tuple[float, ...]:
    """The lexicographic levels of contract 5.3 / 5.4 (empty without them)."""
    classes = sorted({j.priority for j in req.jobs}, reverse=True)
    if not req.cluster.quotas and len(classes) < 2:
        return ()
    key: list[float] = []
    if req.cluster.quotas:
        usage = _usage(req, chosen)
        key.append(round(sum(min(usage.get((t, k), 0.0), g) for t, q in
                             req.cluster.quotas.items() for k, g in q.guaranteed.items()), 9))
    # a job's co-location factor counts its co-residents of every class (contract 5.2)
    factors = _contract_factors(req, chosen) if req.interference else None
    for p in classes:
        jobs = [j for j in req.jobs if j.priority == p]
        sub = req.model_copy(update={"jobs": jobs})
        ev = evaluate(sub, {j.name: chosen[j.name] for j in jobs if j.name in chosen},
                      factors=factors)
        if req.policy.objective == "priority_fifo":
            key += [1.0 if j.name in chosen else 0.0 for j in sorted(jobs, key=priority_key)]
            key.append(round(ev.throughput, 9))
        elif req.policy.objective == "fairness":
            key += [round(ev.objective_value, 9), round(ev.throughput, 9)]
        else:
            key.append(round(ev.objective_value, 9))
    return tuple(key)


def brute_force(req: PlanRequest) -> tuple[float, dict[str, list[Placement]]] | None:
    """(optimal objective_value, one optimal placement map), or None if infeasible."""
    objective = req.policy.objective
    order = sorted(req.jobs, key=priority_key)
    best_key: tuple[float, ...] | None = None
    best: tuple[float, dict[str, list[Placement]]] | None = None
    for chosen in _plans(req):
        if not _within_limits(req, chosen):
            continue
        levels = levels_key(req, chosen)
        ev = evaluate(req, chosen)
        if req.interference:
            _check_throughput(req, chosen, ev.throughput)
        if objective == "fairness":
            key: tuple[float, ...] = (round(ev.objective_value, 9), ev.throughput)
        elif objective == "priority_fifo":
            key = (*(1.0 if j.name in chosen else 0.0 for j in order), ev.throughput)
        else:
            key = (ev.objective_value,)
        key = (*levels, *key)
        if best_key is None or key > best_key:
            best_key, best = key, (ev.objective_value, chosen)
    return best
