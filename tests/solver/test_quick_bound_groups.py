"""The quick bound groups jobs by what decides their options: two gangs of one compiled
kind (same size, weight and speeds) that differ in the nodes or domains they need have
different options, and each is bounded by its own (solver/quick_bound.py: `_options`)."""

from __future__ import annotations

import pytest

from benchmarks.colocation import add_colocation_classes
from benchmarks.generator import generate
from models import PlanRequest
from models.instance import compile_jobs
from models.objective import gpu_models_of
from models.rules import class_census, colocation_factor_cap, interference_table
from solver import plan
from solver.quick_bound import _capacity, _job_options, _options, _pinned, quick_bound


def _gangs(first_same_domain: bool) -> PlanRequest:
    """Two nodes of four GPUs, each its own domain, and two 8-GPU gangs that may span
    nodes: one kept to a domain (it fits nowhere), one not (it fits on both nodes)."""
    nodes = [{"name": f"n{k}", "gpus": [{"index": i, "model": "A100-SXM4-80GB"}
                                         for i in range(4)]} for k in range(2)]
    gangs = [{"name": f"g{k}", "gpus": 8, "single_node": False, "same_domain": same}
             for k, same in enumerate((first_same_domain, not first_same_domain))]
    return PlanRequest.model_validate({
        "cluster": {"nodes": nodes}, "jobs": gangs,
        "policy": {"time_limit_s": 5.0, "solver": "cp_sat", "seed": 0}})


@pytest.mark.parametrize("first_same_domain", [True, False])
def test_gangs_of_one_kind_with_other_needs_are_bounded_by_their_own_options(
        first_same_domain: bool) -> None:
    req = _gangs(first_same_domain)
    infos = compile_jobs(req)
    assert infos[0].kind is infos[1].kind   # the case: one kind, two kinds of needs
    best = plan(req)
    assert best.status == "optimal" and len(best.assignments) == 1
    assert best.objective_value > 0
    assert quick_bound(req) >= best.objective_value - 1e-9


def _one_by_one(req: PlanRequest) -> tuple[list[tuple[object, int]], float, dict[int, float]]:
    """What `_options` gives, each job's options found on its own (no grouping key, no
    shared cache of kinds): the groups in order of first member, the constant, `held`."""
    policy = req.policy
    catalog = req.cluster.catalog()
    cap = _capacity(req)
    pools = {p: i for i, p in enumerate(sorted(cap))}
    models = gpu_models_of(req)
    table = interference_table(req.interference)
    census = class_census(req.jobs) if table else {}
    groups: dict[object, int] = {}
    held: dict[int, float] = {}
    const = 0.0
    for info in compile_jobs(req):
        factor = colocation_factor_cap(info.job, census, table) if table else 1.0
        cur = None
        if info.current:
            const -= policy.preemption_cost
            cur = models.get((info.current[0].node, info.current[0].gpu))
            if info.pinned and (kept := _pinned(info, cur, pools, cap, catalog, factor,
                                                policy)):
                held[kept[0]] = held.get(kept[0], 0.0) + kept[1]
                const += kept[2]
                continue
        opts = _job_options(info, cur, pools, cap, catalog, {}, factor, policy)
        if opts:
            groups[opts] = groups.get(opts, 0) + 1
    return list(groups.items()), const, held


@pytest.mark.parametrize("variant", ["plain", "topology", "elastic", "levels", "colocation"])
def test_the_groups_are_those_of_each_job_on_its_own(variant: str) -> None:
    """Grouping by kind, needs, factor and current placement gives every job the options
    it has on its own, the groups in the same order (the bound's sums keep their order)."""
    req = {"plain": lambda: generate("M", 1),
           "topology": lambda: generate("M", 1, topology=("pod", "rack")),
           "elastic": lambda: generate("M", 0, elastic=0.3),
           "levels": lambda: generate("M", 2, tenants_quota=4, priority_classes=3),
           "colocation": lambda: add_colocation_classes(generate("M", 0), 0.3, 0),
           }[variant]()
    held: dict[int, float] = {}
    groups, const = _options(req, _capacity(req), held)
    assert (list(groups.items()), const, held) == _one_by_one(req)
