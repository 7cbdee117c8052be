"""The one home of the domain rules: capacity fit, the capacity summary, static reasons."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import solver.validate as validate
from models import PlanRequest
from models.capacity import CapacitySummary, domain_of
from models.reasons import StaticReasons, accepted_models, static_reasons
from models.rules import HORIZON_S, HOST_TOL, fits, host_fits, memory_fits, share_fits


def _request(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]],
             **policy: Any) -> PlanRequest:
    return PlanRequest.model_validate({"cluster": {"nodes": nodes}, "jobs": jobs,
                                       "policy": policy})


def _node(name: str, models: list[str], **kw: Any) -> dict[str, Any]:
    return {"name": name, "gpus": [{"index": i, "model": m} for i, m in enumerate(models)],
            **kw}


def test_validator_and_planners_agree_on_tolerance_and_horizon() -> None:
    """The validator re-derives its rules on purpose; its constants must still agree."""
    assert validate.CAPACITY_TOL == HOST_TOL
    assert validate.HORIZON_S == HORIZON_S


def test_fit_rules() -> None:
    assert fits(0.3, 1.0, 0.7)
    assert not fits(0.31, 1.0, 0.7)
    assert fits(1.0, 1.0 - HOST_TOL / 2)
    assert memory_fits(None, 10.0) and memory_fits(50.0, None)
    assert not memory_fits(40.5, 40.0)
    assert share_fits(0.5, 20.0, 0.5, 20.0, 40.0)
    assert not share_fits(0.5, 30.0, 0.5, 20.0, 40.0)
    assert share_fits(0.5, 30.0, 0.5, 20.0, None)
    assert host_fits(1000, 4, None, 4.0) and not host_fits(1000, 4.5, None, 4.0)
    # element-wise on arrays, exact on integers (the openb harness's milli units)
    free = np.array([[1000, 499, 500, -1]], dtype=np.int64)
    assert fits(500, free).tolist() == [[True, False, True, False]]


def test_capacity_summary_counts_usable_gpus_per_node_domain_and_model() -> None:
    nodes = [
        _node("a", ["V100-32GB"] * 3, topology_domain="r1"),
        _node("b", ["V100-32GB"] * 2, topology_domain="r1"),
        _node("c", ["V100-32GB"] * 4),  # no domain: a domain of its own
        _node("d", ["V100-32GB"] * 8, schedulable=False),
        {"name": "e", "gpus": [{"index": 0, "model": "V100-32GB", "healthy": False},
                               {"index": 1, "model": "A100-SXM4-40GB", "mig_enabled": True}]},
    ]
    cap = CapacitySummary(_request(nodes, []).cluster)
    v100 = ("V100-32GB", False)
    assert cap.total(v100) == 9
    assert cap.most_on_one_node(v100) == 4
    assert cap.most_in_one_domain(v100) == 5
    assert cap.domains[(domain_of("c", None), v100)] == 4
    assert cap.total(("A100-SXM4-40GB", True)) == 1
    assert cap.pools_present() == {v100, ("A100-SXM4-40GB", True)}
    # a caller may count other GPUs, e.g. every GPU
    every = CapacitySummary(_request(nodes, []).cluster, lambda _n, _g: True)
    assert every.total(v100) == 18 and every.most_on_one_node(v100) == 8


def test_static_reasons() -> None:
    nodes = [_node("a", ["A100-SXM4-80GB"] * 4, topology_domain="r1", cpu_millicores=8000),
             _node("b", ["A100-SXM4-80GB"] * 2, cpu_millicores=8000)]
    jobs = [
        {"name": "big", "gpus": 8, "single_node": False},
        {"name": "rack", "gpus": 5, "single_node": False, "same_domain": True},
        {"name": "node", "gpus": 5},
        {"name": "spread", "gpus": 6, "single_node": False},
        {"name": "typo", "gpus": 1, "allowed_models": ["H200-141GB"]},
        {"name": "cpu", "gpus": 1, "cpu_millicores": 16000},
        {"name": "gang_cpu", "gpus": 2, "single_node": False, "cpu_millicores": 18000},
        {"name": "running", "gpus": 1, "allowed_models": ["T4-16GB"],
         "current": [{"node": "a", "gpu": 0}]},
    ]
    got = static_reasons(_request(nodes, jobs))
    assert {k: v[0] for k, v in got.items()} == {
        "big": "gang_too_large", "rack": "gang_too_large", "node": "gang_too_large",
        "typo": "no_eligible_gpu", "cpu": "infeasible_constraints",
        "gang_cpu": "infeasible_constraints"}
    assert "at most 6" in got["big"][1] and "at most 4" in got["rack"][1]
    # the detail names what the job accepts and what the cluster has
    assert "accepts H200-141GB;" in got["typo"][1] and "A100-SXM4-80GB" in got["typo"][1]


def test_no_eligible_gpu_details() -> None:
    req = _request(
        [_node("a", ["V100-32GB"]),
         {"name": "m", "gpus": [{"index": 0, "model": "A100-SXM4-40GB", "mig_enabled": True,
                                 "healthy": False}]}],
        [{"name": "mem", "gpus": 1, "gpu_memory_gib": 40, "throughput": {"V100-32GB": 1.0,
                                                                         "T4-16GB": 1.0}},
         {"name": "mig", "mig": {"compute_slices": 3, "memory_gib": 20}}])
    reasons = StaticReasons(req)
    mem = reasons.reason(req.jobs[0])
    assert mem is not None and mem[0] == "no_eligible_gpu"
    assert "T4-16GB, V100-32GB with >= 40 GiB" in mem[1]
    assert "A100-SXM4-40GB (MIG), V100-32GB" in mem[1]
    mig = reasons.reason(req.jobs[1])
    assert mig == ("no_eligible_gpu",
                   "eligible GPUs exist only on unhealthy GPUs or unschedulable nodes")
    assert accepted_models(req.jobs[1]) == (
        "any model with a MIG profile of >= 3 compute slices and 20 GiB")


def test_fixed_mig_layouts_need_a_covering_instance() -> None:
    gpu = {"index": 0, "model": "A100-SXM4-40GB", "mig_enabled": True,
           "mig_instances": [{"profile": "1g.5gb", "start": 0}]}
    nodes = [{"name": "a", "gpus": [gpu]}]
    jobs = [{"name": "small", "mig_profile": "1g.5gb"}, {"name": "large", "mig_profile": "3g.20gb"}]
    fixed = static_reasons(_request(nodes, jobs, allow_mig_reconfiguration=False))
    assert list(fixed) == ["large"] and fixed["large"][0] == "no_eligible_gpu"
    assert "reconfiguration is not allowed" in fixed["large"][1]
    assert static_reasons(_request(nodes, jobs)) == {}


@pytest.mark.parametrize("solver", ["heuristic", "cp_sat"])
def test_planners_report_the_shared_static_reasons(solver: str) -> None:
    """The heuristics and the solver give an unplaceable job the same reason and detail."""
    from heuristics.greedy import plan_greedy
    from solver import plan

    req = _request([_node("a", ["V100-32GB"] * 2, cpu_millicores=4000)],
                   [{"name": "gang", "gpus": 4},
                    {"name": "typo", "gpus": 1, "allowed_models": ["L40S-48GB"]},
                    {"name": "cpu", "gpus": 1, "cpu_millicores": 8000},
                    {"name": "ok", "gpus": 2}],
                   solver=solver, time_limit_s=5)
    expected = static_reasons(req)
    assert set(expected) == {"gang", "typo", "cpu"}
    greedy = plan_greedy(req)
    assert {k: greedy.reasons[k] for k in expected} == expected
    out = plan(req)
    assert {u.job: (u.reason, u.detail) for u in out.unplaced} == expected
