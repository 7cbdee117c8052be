"""plan_greedy and improve: validator-clean on random instances, and per-rule behaviour."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.generator import generate_custom
from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from models import PlanRequest
from models.objective import evaluate
from tests.heuristics.helpers import node, request, violations

OBJECTIVES = ("throughput", "fairness", "priority_fifo", "jct", "makespan")


@st.composite
def instances(draw: st.DrawFn) -> PlanRequest:
    gpus = draw(st.integers(8, 48))
    jobs = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 10_000))
    req = generate_custom(gpus, jobs, seed)
    policy = req.policy.model_copy(update={
        "objective": draw(st.sampled_from(OBJECTIVES)),
        "allow_preemption": draw(st.booleans()),
        "allow_mig_reconfiguration": draw(st.booleans()),
        "migration_cost": draw(st.sampled_from((0.0, 0.5, 3.0))),
    })
    return req.model_copy(update={"policy": policy})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.sampled_from((None, True, False)))
def test_greedy_plans_are_valid(req: PlanRequest, keep: bool | None) -> None:
    result = plan_greedy(req, keep_running=keep)
    assert violations(req, result) == []
    for job in req.jobs:
        assert job.name in result.placements or job.name in result.reasons


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.integers(0, 3))
def test_improve_is_valid_and_never_worse(req: PlanRequest, seed: int) -> None:
    base = plan_greedy(req, keep_running=True)
    better = improve(req, base, deadline=time.monotonic() + 5, seed=seed, max_moves=25)
    assert violations(req, better) == []
    a, b = evaluate(req, base.placements), evaluate(req, better.placements)
    assert b.objective_value >= a.objective_value - 1e-9


def test_reason_codes() -> None:
    req = request(
        [node("a", "A100-SXM4-80GB", 4, topology_domain="r1", cpu_millicores=8000)],
        [
            {"name": "big", "gpus": 8},
            {"name": "t4only", "gpus": 1, "allowed_models": ["T4-16GB"]},
            {"name": "cpu", "gpus": 1, "cpu_millicores": 16000},
            {"name": "fill", "gpus": 4, "weight": 5},
            {"name": "late", "gpus": 1},
        ])
    res = plan_greedy(req)
    assert set(res.placements) == {"fill"}
    assert res.reasons["big"][0] == "gang_too_large"
    assert res.reasons["t4only"][0] == "no_eligible_gpu"
    assert res.reasons["cpu"][0] == "infeasible_constraints"
    assert res.reasons["late"][0] == "insufficient_capacity"


def test_best_fit_and_fastest_model() -> None:
    req = request(
        [node("v", "V100-32GB", 8), node("h", "H100-SXM5-80GB", 8),
         node("h2", "H100-SXM5-80GB", 2)],
        [{"name": "one", "gpus": 1, "throughput": {"V100-32GB": 1.0, "H100-SXM5-80GB": 3.0}},
         {"name": "gang", "gpus": 8, "throughput": {"V100-32GB": 1.0,
                                                    "H100-SXM5-80GB": 1.1}}])
    res = plan_greedy(req)
    assert violations(req, res) == []
    # the 1-GPU job takes the fastest model on the tightest node, leaving a whole H100
    # node for the gang
    assert {p.node for p in res.placements["one"]} == {"h2"}
    assert {p.node for p in res.placements["gang"]} == {"h"}


def test_mig_keeps_large_instances_free_and_respects_no_reconfiguration() -> None:
    mig_node = {"name": "m", "gpus": [
        {"index": 0, "model": "A100-SXM4-40GB", "mig_enabled": True,
         "mig_instances": [{"profile": "3g.20gb", "start": 4}]}]}
    jobs = [{"name": "small", "mig": {"compute_slices": 1, "memory_gib": 5}}]
    res = plan_greedy(request([mig_node], jobs))
    (p,) = res.placements["small"]
    assert p.mig is not None and p.mig.profile == "1g.5gb"
    # the 1g goes beside the 3g, leaving room for the 3g/4g... at start 0 it would block
    # the 4g; at 4..6 it would break the existing 3g
    assert p.mig.start in (0, 1, 2, 3)
    frozen = request([mig_node], jobs, allow_mig_reconfiguration=False)
    res2 = plan_greedy(frozen)
    assert res2.placements["small"][0].mig.profile == "3g.20gb"  # type: ignore[union-attr]
    assert violations(frozen, res2) == []


def test_shared_jobs_pack_and_avoid_whole_and_mig() -> None:
    req = request([node("a", "A100-SXM4-80GB", 2)],
                  [{"name": f"s{i}", "gpu_share": 0.5, "gpu_memory_gib": 30}
                   for i in range(3)] + [{"name": "w", "gpus": 1}])
    res = plan_greedy(req)
    assert violations(req, res) == []
    share_gpus = {p.gpu for i in range(3) for p in res.placements.get(f"s{i}", [])}
    assert len(share_gpus) <= 2
    assert "w" not in res.placements or res.placements["w"][0].gpu not in share_gpus


def test_unhealthy_and_cordoned_take_no_new_jobs_but_keep_running_ones() -> None:
    nodes = [
        {"name": "a", "gpus": [{"index": 0, "model": "A100-SXM4-80GB", "healthy": False},
                               {"index": 1, "model": "A100-SXM4-80GB"}]},
        node("b", "A100-SXM4-80GB", 1, schedulable=False),
    ]
    jobs = [{"name": "run", "gpus": 1, "preemptible": False,
             "current": [{"node": "a", "gpu": 0}]},
            {"name": "new1", "gpus": 1}, {"name": "new2", "gpus": 1}]
    res = plan_greedy(request(nodes, jobs))
    assert res.placements["run"][0].gpu == 0
    placed_new = [n for n in ("new1", "new2") if n in res.placements]
    assert len(placed_new) == 1
    assert res.placements[placed_new[0]][0].node == "a"


def test_priority_fifo_places_in_strict_order() -> None:
    req = request([node("a", "A100-SXM4-80GB", 4)],
                  [{"name": "low", "gpus": 1, "weight": 1, "submitted_at": 0},
                   {"name": "high", "gpus": 4, "weight": 2, "submitted_at": 5}],
                  objective="priority_fifo")
    res = plan_greedy(req)
    assert set(res.placements) == {"high"}


def test_no_preemption_when_forbidden() -> None:
    nodes = [node("a", "V100-32GB", 1), node("b", "H100-SXM5-80GB", 1)]
    jobs = [{"name": "run", "gpus": 1, "current": [{"node": "b", "gpu": 0}]},
            {"name": "rich", "gpus": 1, "weight": 10, "allowed_models": ["H100-SXM5-80GB"]}]
    res = plan_greedy(request(nodes, jobs, allow_preemption=False))
    assert "run" in res.placements
    res2 = plan_greedy(request(nodes, jobs))
    assert "rich" in res2.placements  # preempting pays when allowed
    assert violations(request(nodes, jobs), res2) == []
