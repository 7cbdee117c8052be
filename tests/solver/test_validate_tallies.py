"""The validator reads a plan once into rows and per-GPU tallies, and clears kept jobs by
fast paths. On random small requests (every feature) and randomly corrupted plans of
them, it must give the verdicts of its general checks (fast paths off), and flag exactly
the GPUs and nodes whose capacity a plain re-statement of the contract's capacity rules,
written here over the raw assignments, finds broken."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heuristics.greedy import plan_greedy
from models import Assignment, MigInstance, Placement, Plan, PlanRequest
from solver import validate
from solver.build import build_plan
from solver.validate import validate_plan
from tests.solver.strategies import random_levels_request, random_request

TOL = 1e-9
OPS = ["move", "move_kept", "drop", "dup", "fraction", "no_fraction", "mig", "add", "steal",
       "current", "same_gpu", "pile", "pile"]


def _request(rng: random.Random) -> PlanRequest:
    kw: dict[str, Any] = {"max_gpus": 6, "max_jobs": 7, "max_nodes": 3,
                          "elastic": rng.choice([0.0, 0.4]), "topology": rng.random() < 0.4,
                          "interference": rng.random() < 0.4}
    if rng.random() < 0.3:
        return random_levels_request(rng, **kw)
    return random_request(rng, **kw)


def _plan(request: PlanRequest, rng: random.Random) -> Plan:
    result = plan_greedy(request, seed=rng.randrange(3), deadline=time.monotonic() + 30)
    return build_plan(request, result, status="heuristic", solver="greedy")


def _corrupt(request: PlanRequest, plan: Plan, rng: random.Random, n: int) -> Plan:
    """`plan` with `n` random corruptions (untouched placements stay `plan`'s objects)."""
    gpus = [(node.name, g) for node in request.cluster.nodes for g in node.gpus]
    used = {(p.node, p.gpu) for a in plan.assignments for p in a.placements}
    busy = [(node, g) for node, g in gpus if (node, g.index) in used] or gpus
    names = [j.name for j in request.jobs]
    rows = [(a.job, list(a.placements)) for a in plan.assignments]
    unplaced = list(plan.unplaced)
    for _ in range(n):
        # (mostly onto GPUs the plan uses: capacity is at stake there)
        op, (node, gpu) = rng.choice(OPS), rng.choice(busy if rng.random() < 0.7 else gpus)
        i = rng.randrange(len(rows)) if rows else -1
        pls = rows[i][1] if rows else []
        k = rng.randrange(len(pls)) if pls else -1
        inst = rng.choice(gpu.mig_instances) if gpu.mig_instances else MigInstance(
            profile=rng.choice(["1g.10gb", "1g.6gb", "3g.40gb"]), start=rng.randrange(7))
        if op in ("move", "move_kept") and pls:
            pls[k] = pls[k].model_copy(update={"node": node, "gpu": gpu.index})
        elif op == "drop" and rows:
            rows.pop(i)
        elif op == "dup" and rows:
            rows.append((rows[i][0], list(pls)))
        elif op in ("fraction", "no_fraction") and pls:
            frac = rng.choice([0.2, 0.5, 0.9, 1.0]) if op == "fraction" else None
            pls[k] = pls[k].model_copy(update={"fraction": frac})
        elif op == "mig" and pls:
            pls[k] = pls[k].model_copy(update={"node": node, "gpu": gpu.index, "mig": inst,
                                               "fraction": None})
        elif op == "add":
            kind = rng.randrange(3)
            p = Placement(node=node, gpu=gpu.index, fraction=0.5) if kind == 1 else \
                Placement(node=node, gpu=gpu.index, mig=inst) if kind == 2 else \
                Placement(node=node, gpu=gpu.index)
            rows.insert(0, (rng.choice(names), [p]))   # (the first assignment counts)
        elif op == "steal" and unplaced and rows:
            rows.append((unplaced.pop(rng.randrange(len(unplaced))).job, list(pls)))
        elif op == "current":   # a running job put back where it runs
            job = rng.choice(request.jobs)
            if job.current:
                rows = [r for r in rows if r[0] != job.name] + [(job.name, list(job.current))]
        elif op == "same_gpu" and len(pls) > 1:
            pls[1] = pls[0]
        elif op == "pile" and pls:   # onto the GPU of some placed job's placement
            q = rng.choice([q for _, qs in rows for q in qs])
            pls[k] = pls[k].model_copy(update={"node": q.node, "gpu": q.gpu})
    return plan.model_copy(update={
        "assignments": [Assignment.model_construct(job=j, placements=p) for j, p in rows],
        "unplaced": unplaced})


def _verdict(request: PlanRequest, plan: Plan) -> list[tuple[Any, ...]]:
    return [(v.rule, v.message, v.job, v.node, v.gpu) for v in validate_plan(request, plan)]


def _capacity(request: PlanRequest, plan: Plan) -> set[tuple[str, str, int]]:
    """(rule, node, gpu) of every GPU (gpu -1: node) whose capacity `plan` breaks, by the
    contract's rules stated plainly over the first assignment of each known job: a whole
    GPU holds one whole-GPU job; a shared GPU's fractions sum to <= 1, its jobs' memory to
    <= the model's, and no whole-GPU job sits beside them; a MIG instance hosts one job; a
    node holds its jobs' host requests (a gang's split over its GPUs)."""
    jobs = {j.name: j for j in request.jobs}
    gpus = {(node.name, g.index): g for node in request.cluster.nodes for g in node.gpus}
    nodes = {node.name: node for node in request.cluster.nodes}
    catalog = request.cluster.catalog()
    whole: dict[tuple[str, int], set[str]] = defaultdict(set)
    frac: dict[tuple[str, int], float] = defaultdict(float)
    mem: dict[tuple[str, int], float] = defaultdict(float)
    inst: dict[tuple[str, int, str, int], set[str]] = defaultdict(set)
    host: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    seen: set[str] = set()
    for a in plan.assignments:
        job = jobs.get(a.job)
        if job is None or a.job in seen or not a.placements:
            continue
        seen.add(a.job)
        for p in a.placements:
            key = (p.node, p.gpu)
            if key not in gpus:
                continue
            if p.fraction is not None:
                frac[key] += p.fraction
                mem[key] += job.gpu_memory_gib or 0.0
            elif p.mig is None and job.gpus is not None:
                whole[key].add(a.job)
            if p.mig is not None and gpus[key].mig_enabled:
                inst[(*key, p.mig.profile, p.mig.start)].add(a.job)
            share = 1.0 / job.gpus if job.gpus else 1.0
            host[p.node][0] += (job.cpu_millicores or 0.0) * share
            host[p.node][1] += (job.host_memory_gib or 0.0) * share
    out = {("whole_gpu", *key) for key, names in whole.items() if len(names) > 1}
    out |= {("mig", n, g) for (n, g, _, _), names in inst.items() if len(names) > 1}
    for key in frac:
        cap = catalog[gpus[key].model].memory_gib if gpus[key].model in catalog else None
        if frac[key] > 1 + TOL or whole.get(key) or (cap is not None
                                                     and mem[key] > cap + TOL):
            out.add(("shared", *key))
    for name, (cpu, hmem) in host.items():
        for used, cap in ((cpu, nodes[name].cpu_millicores), (hmem, nodes[name].memory_gib)):
            if cap is not None and used > cap * (1 + TOL) + TOL:
                out.add(("host_resources", name, -1))
    return out


def _flagged(verdict: list[tuple[Any, ...]]) -> set[tuple[str, str, int]]:
    """The GPUs and nodes the validator flags for capacity (its per-GPU / per-node
    violations, which name no job)."""
    rules = ("whole_gpu", "shared", "mig", "host_resources")
    return {(rule, node, -1 if gpu is None else gpu)
            for rule, _, job, node, gpu in verdict if rule in rules and job is None}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 4))
def test_tallies_and_fast_paths_agree_with_plain_statements(seed: int, n: int) -> None:
    rng = random.Random(seed)
    request = _request(rng)
    base = _plan(request, rng)
    plan = _corrupt(request, base, rng, n)
    assert plan.mig_changes == base.mig_changes   # (the per-GPU MIG verdicts are hosting)
    fast = _verdict(request, plan)
    assert _flagged(fast) == _capacity(request, plan)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validate, "_fast_reads", lambda *_: False)
        mp.setattr(validate, "_plain_gang", lambda *_: False)
        assert _verdict(request, plan) == fast
