"""benchmarks/colocation.py: the co-location workload and the generator option."""

from __future__ import annotations

import itertools

import pytest

from benchmarks.colocation import MODEL, add_colocation_classes, compare, least_loss, workload
from benchmarks.data.gavel import gavel_path
from benchmarks.generator import generate


@pytest.fixture(autouse=True)
def _gavel() -> None:
    if not gavel_path().exists():
        pytest.skip(f"the shared Gavel data is not at {gavel_path()}")


def test_workload_shape() -> None:
    req = workload(20, 0.0, 0)
    shared = [j for j in req.jobs if j.gpu_share is not None]
    assert len(shared) == 10 and all(j.colocation_class for j in shared)
    assert sum(len(n.gpus) for n in req.cluster.nodes) == 10 + 5
    used = {j.colocation_class for j in shared}
    assert {p.a for p in req.interference} <= used and req.interference


def test_aware_loses_no_more_than_blind() -> None:
    for seed in range(2):
        req = workload(12, 0.0, seed, time_limit_s=10)
        pair = compare(req, "tight", seed)
        # blind places everything; both are measured from every job at factor 1
        assert pair.placed_blind == 12
        assert pair.loss_blind > 0
        assert pair.loss_aware <= pair.loss_blind + 1e-9
        # the aware plan reaches the least loss of any plan (an exact matching MIP)
        assert pair.least is not None and pair.least_all is not None
        assert pair.loss_aware == pytest.approx(pair.least, abs=1e-6)
        assert pair.least <= pair.least_all + 1e-9 <= pair.loss_blind + 2e-9


@pytest.mark.parametrize("slack", [0.0, 0.5])
def test_least_loss_is_the_brute_force_optimum(slack: float) -> None:
    from models.rules import colocation_factor, interference_table, job_value

    req = workload(10, slack, 4)
    table = interference_table(req.interference)
    catalog = req.cluster.catalog()
    shared = [j for j in req.jobs if j.gpu_share is not None]
    whole = [j for j in req.jobs if j.gpu_share is None]
    free = sum(len(n.gpus) for n in req.cluster.nodes) - len(whole)
    reference = sum(job_value(j, MODEL, catalog) for j in req.jobs)
    best = best_all = float("-inf")
    # every job out (-1) or on one of the free GPUs, at most two a GPU
    for where in itertools.product(range(-1, free), repeat=len(shared)):
        if any(where.count(g) > 2 for g in range(free)):
            continue
        total = 0.0
        for k, job in enumerate(shared):
            if where[k] >= 0:
                others = [o.colocation_class for i, o in enumerate(shared)
                          if i != k and where[i] == where[k]]
                total += job_value(job, MODEL, catalog) * colocation_factor(
                    job.colocation_class, others, table)
        best = max(best, total)
        if -1 not in where:
            best_all = max(best_all, total)
    base = reference - sum(job_value(j, MODEL, catalog) for j in whole)
    assert least_loss(req) == pytest.approx(base - best)
    assert least_loss(req, place_all=True) == pytest.approx(base - best_all)


def test_generator_option_classes_thirty_percent_of_shared_jobs() -> None:
    base = generate("S", 3)
    req = add_colocation_classes(base, 0.3, 3)
    assert [j.name for j in req.jobs] == [j.name for j in base.jobs]
    shared = [j for j in req.jobs if j.gpu_share is not None]
    classed = [j for j in req.jobs if j.colocation_class is not None]
    assert all(j.gpu_share is not None for j in classed)
    assert 0 < len(classed) < len(shared) or not shared
    used = {j.colocation_class for j in classed}
    assert {(p.a, p.b) for p in req.interference} == {(a, b) for a in used for b in used}
    # everything else is the generator's request
    strip = [j.model_copy(update={"colocation_class": None}) for j in req.jobs]
    assert strip == list(base.jobs) and req.cluster == base.cluster
