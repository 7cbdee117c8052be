"""Identical nodes and identical jobs do not blow up the model (issue [2/7] item 3)."""

from __future__ import annotations

import random

from models import PlanRequest
from solver import plan
from solver.formulation import compile_request
from solver.validate import validate_plan

MODELS = ["A100-SXM4-80GB", "H100-SXM5-80GB", "V100-32GB"]


def three_class_cluster(n_nodes: int = 128, n_jobs: int = 1000) -> PlanRequest:
    rng = random.Random(0)
    nodes = [{"name": f"n{i:03d}",
              "gpus": [{"index": g, "model": MODELS[i % 3]} for g in range(8)],
              "cpu_millicores": [128000, 192000, 64000][i % 3]} for i in range(n_nodes)]
    shapes = []
    for k in range(12):
        g = rng.choice([1, 1, 1, 2, 4, 8])
        shapes.append({"gpus": g, "cpu_millicores": 4000 * g, "tenant": f"t{k % 4}",
                       "throughput": {"A100-SXM4-80GB": 1.0,
                                      "H100-SXM5-80GB": round(rng.uniform(1.5, 3), 2),
                                      "V100-32GB": round(rng.uniform(0.3, 0.6), 2)}})
    jobs = [{"name": f"j{i:04d}", **rng.choice(shapes)} for i in range(n_jobs)]
    return PlanRequest.model_validate({"cluster": {"nodes": nodes}, "jobs": jobs,
                                       "policy": {"solver": "cp_sat", "time_limit_s": 60,
                                                  "threads": 2, "seed": 1}})


def test_identical_jobs_are_aggregated() -> None:
    req = three_class_cluster()
    compiled = compile_request(req)
    assert len(compiled.groups) == 12
    # one count variable per (job shape, node) at most, not per (job, GPU)
    assert compiled.model.num_vars <= 12 * 128
    assert not compiled.pruned


def test_three_node_classes_solve_to_optimality() -> None:
    req = three_class_cluster()
    result = plan(req)
    assert result.status == "optimal"
    assert validate_plan(req, result) == []
    # every GPU is busy: the queue (1000 jobs) is far larger than 1,024 GPUs
    assert result.stats.gpus_allocated == 1024
