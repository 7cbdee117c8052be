"""One hand-made instance per constraint family and objective, on every exact backend."""

from __future__ import annotations

from typing import Any

import pytest

from models import PlanRequest, is_valid_layout
from models.catalog import BUILTIN_CATALOG, Instance
from solver import plan
from solver.validate import validate_plan

BACKENDS = [("cp_sat", "cbc"), ("milp", "cbc"), ("milp", "highs")]


def node(name: str, models: list[str], *, domain: str | None = None, mig: int = 0,
         **extra: Any) -> dict[str, Any]:
    """A node with GPUs of `models`; the last `mig` of them in MIG mode."""
    gpus = []
    for i, m in enumerate(models):
        g: dict[str, Any] = {"index": i, "model": m}
        if i >= len(models) - mig:
            g["mig_enabled"] = True
        gpus.append(g)
    out = {"name": name, "gpus": gpus, **extra}
    if domain is not None:
        out["topology_domain"] = domain
    return out


def request(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]], backend: tuple[str, str],
            **policy: Any) -> PlanRequest:
    pol = {"solver": backend[0], "milp_backend": backend[1], "time_limit_s": 20,
           "threads": 1, "seed": 1, "mip_gap": 0.0, **policy}
    return PlanRequest.model_validate({"cluster": {"nodes": nodes}, "jobs": jobs,
                                       "policy": pol})


def solve(req: PlanRequest):  # type: ignore[no-untyped-def]
    result = plan(req)
    assert validate_plan(req, result) == []
    return result


def placed(result) -> dict[str, list[tuple[str, int]]]:  # type: ignore[no-untyped-def]
    return {a.job: [(p.node, p.gpu) for p in a.placements] for a in result.assignments}


def reasons(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {u.job: u.reason for u in result.unplaced}


@pytest.fixture(params=BACKENDS, ids=["cp_sat", "cbc", "highs"])
def backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


# ------------------------------------------------------------------ whole-GPU gangs
def test_gang_needs_one_model(backend: tuple[str, str]) -> None:
    nodes = [node("n0", ["A100-SXM4-40GB"] * 2 + ["V100-32GB"] * 2)]
    res = solve(request(nodes, [{"name": "g", "gpus": 4}], backend))
    assert res.status == "optimal"
    assert reasons(res) == {"g": "gang_too_large"}


def test_single_node_and_multi_node_gangs(backend: tuple[str, str]) -> None:
    nodes = [node("n0", ["V100-32GB"] * 2), node("n1", ["V100-32GB"] * 2)]
    res = solve(request(nodes, [{"name": "g", "gpus": 4}], backend))
    assert reasons(res) == {"g": "gang_too_large"}
    res = solve(request(nodes, [{"name": "g", "gpus": 4, "single_node": False}], backend))
    assert res.status == "optimal"
    assert sorted(placed(res)["g"]) == [("n0", 0), ("n0", 1), ("n1", 0), ("n1", 1)]


def test_same_domain(backend: tuple[str, str]) -> None:
    nodes = [node("n0", ["V100-32GB"] * 2, domain="r1"),
             node("n1", ["V100-32GB"] * 2, domain="r2"),
             node("n2", ["V100-32GB"] * 1, domain="r2")]
    job = {"name": "g", "gpus": 3, "single_node": False, "same_domain": True}
    res = solve(request(nodes, [job], backend))
    assert {n for n, _ in placed(res)["g"]} == {"n1", "n2"}
    job["gpus"] = 4
    res = solve(request(nodes, [job], backend))
    assert reasons(res) == {"g": "gang_too_large"}


# ------------------------------------------------------------------ heterogeneity
def test_heterogeneity_prefers_fast_model_and_respects_eligibility(
        backend: tuple[str, str]) -> None:
    nodes = [node("v", ["V100-32GB"]), node("h", ["H100-SXM5-80GB"]),
             node("t", ["T4-16GB"])]
    jobs = [
        {"name": "fast", "gpus": 1, "throughput": {"V100-32GB": 1.0, "H100-SXM5-80GB": 3.0}},
        {"name": "mem", "gpus": 1, "gpu_memory_gib": 20,           # not on the T4
         "throughput": {"V100-32GB": 1.0, "H100-SXM5-80GB": 1.2, "T4-16GB": 5.0}},
        {"name": "pinned", "gpus": 1, "allowed_models": ["T4-16GB"]},
    ]
    res = solve(request(nodes, jobs, backend))
    assert res.status == "optimal"
    assert placed(res) == {"fast": [("h", 0)], "mem": [("v", 0)], "pinned": [("t", 0)]}
    # the job with the larger speed-up gets the H100: 3.0 + 1.0 + T4 relative speed
    expect = 3.0 + 1.0 + BUILTIN_CATALOG["T4-16GB"].relative_speed
    assert res.objective_value == pytest.approx(expect)


def test_no_eligible_gpu(backend: tuple[str, str]) -> None:
    nodes = [node("t", ["T4-16GB"])]
    res = solve(request(nodes, [{"name": "big", "gpus": 1, "gpu_memory_gib": 40}], backend))
    assert reasons(res) == {"big": "no_eligible_gpu"}


# ------------------------------------------------------------------ MIG
def _first_fit(model: str, profiles: list[str]) -> int:
    """Naive MIG first fit: each job at the first valid start, in the given order."""
    spec = BUILTIN_CATALOG[model]
    layout: list[Instance] = []
    for prof in profiles:
        p = spec.profile(prof)
        assert p is not None
        for s in p.starts:
            if is_valid_layout(spec, [*layout, Instance(prof, s)]):
                layout.append(Instance(prof, s))
                break
    return len(layout)


def test_mig_trap_exact_places_all(backend: tuple[str, str]) -> None:
    profiles = ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]
    assert _first_fit("A100-SXM4-40GB", profiles) < 4  # the trap is real
    nodes = [node("n", ["A100-SXM4-40GB"], mig=1)]
    jobs = [{"name": f"j{i}", "kind": "inference", "mig_profile": p}
            for i, p in enumerate(profiles)]
    res = solve(request(nodes, jobs, backend))
    assert res.status == "optimal"
    assert len(res.assignments) == 4
    assert res.objective_value == pytest.approx(7 / 7)
    (change,) = res.mig_changes
    assert change.destroy == []
    created = [Instance(c.profile, c.start) for c in change.create]
    assert sorted(i.profile for i in created) == sorted(profiles)
    assert is_valid_layout(BUILTIN_CATALOG["A100-SXM4-40GB"], created)
    # the 3g instance can only sit at start 4 beside a 2g and two 1g instances
    assert Instance("3g.20gb", 4) in created


def test_mig_demand_by_size_picks_covering_profile(backend: tuple[str, str]) -> None:
    nodes = [node("n", ["A100-SXM4-80GB"], mig=1)]
    jobs = [{"name": "a", "mig": {"compute_slices": 2, "memory_gib": 30}}]
    res = solve(request(nodes, jobs, backend))
    (a,) = res.assignments
    assert a.placements[0].mig is not None
    assert a.placements[0].mig.profile == "3g.40gb"  # 2g.20gb lacks the memory
    assert res.objective_value == pytest.approx(2 / 7)


def test_mig_without_reconfiguration_keeps_layout(backend: tuple[str, str]) -> None:
    n = node("n", ["A100-SXM4-40GB"], mig=1)
    n["gpus"][0]["mig_instances"] = [{"profile": "1g.5gb", "start": s} for s in range(7)]
    jobs = [{"name": "big", "mig_profile": "3g.20gb"}, {"name": "small", "mig_profile": "1g.5gb"}]
    res = solve(request([n], jobs, backend, allow_mig_reconfiguration=False))
    assert res.mig_changes == []
    assert set(placed(res)) == {"small"}
    res = solve(request([n], jobs, backend))
    assert set(placed(res)) == {"big", "small"}
    assert res.mig_changes  # instances were destroyed to make room


def test_kept_mig_instance_is_not_destroyed(backend: tuple[str, str]) -> None:
    n = node("n", ["A100-SXM4-40GB"], mig=1)
    n["gpus"][0]["mig_instances"] = [{"profile": "3g.20gb", "start": 0}]
    jobs = [{"name": "run", "mig_profile": "3g.20gb", "preemptible": False,
             "current": [{"node": "n", "gpu": 0, "mig": {"profile": "3g.20gb", "start": 0}}]},
            {"name": "new", "mig_profile": "4g.20gb", "weight": 10}]
    res = solve(request([n], jobs, backend))
    assert set(placed(res)) == {"run"}  # 4g needs start 0, held by the running job
    for ch in res.mig_changes:
        assert all((d.profile, d.start) != ("3g.20gb", 0) for d in ch.destroy)


# ------------------------------------------------------------------ shared GPUs
def test_shared_fractions_and_memory(backend: tuple[str, str]) -> None:
    nodes = [node("n", ["T4-16GB"] * 2)]
    jobs = [{"name": f"s{i}", "gpu_share": 0.5, "gpu_memory_gib": 6} for i in range(4)]
    jobs.append({"name": "s4", "gpu_share": 0.25, "gpu_memory_gib": 6})
    res = solve(request(nodes, jobs, backend))
    # 2 GPUs x (fraction 1, 16 GiB): at most two 6 GiB jobs per GPU by memory.
    assert len(res.assignments) == 4
    assert res.objective_value == pytest.approx(
        2.0 * BUILTIN_CATALOG["T4-16GB"].relative_speed)


def test_shared_never_beside_whole(backend: tuple[str, str]) -> None:
    nodes = [node("n", ["V100-32GB"])]
    jobs = [{"name": "whole", "gpus": 1}, {"name": "share", "gpu_share": 0.5}]
    res = solve(request(nodes, jobs, backend))
    assert set(placed(res)) == {"whole"}
    assert reasons(res) == {"share": "insufficient_capacity"}


# ------------------------------------------------------------------ host resources
def test_host_cpu_and_memory(backend: tuple[str, str]) -> None:
    nodes = [node("n", ["V100-32GB"] * 4, cpu_millicores=8000, memory_gib=100)]
    jobs = [{"name": f"j{i}", "gpus": 1, "cpu_millicores": 3000, "host_memory_gib": 10}
            for i in range(4)]
    res = solve(request(nodes, jobs, backend))
    assert len(res.assignments) == 2  # 3 x 3000 > 8000
    jobs = [{"name": "huge", "gpus": 1, "cpu_millicores": 9000}]
    res = solve(request(nodes, jobs, backend))
    assert reasons(res) == {"huge": "infeasible_constraints"}


# ------------------------------------------------------------------ running jobs
def _running_on_v100(**extra: Any) -> dict[str, Any]:
    return {"name": "run", "gpus": 1, "current": [{"node": "v", "gpu": 0}],
            "throughput": {"V100-32GB": 0.4, "H100-SXM5-80GB": 3.0}, **extra}


def test_migration_when_it_pays(backend: tuple[str, str]) -> None:
    nodes = [node("v", ["V100-32GB"]), node("h", ["H100-SXM5-80GB"])]
    res = solve(request(nodes, [_running_on_v100()], backend, migration_cost=0.5))
    assert res.migrated == ["run"] and placed(res)["run"] == [("h", 0)]
    assert res.objective_value == pytest.approx(3.0 - 0.5)
    res = solve(request(nodes, [_running_on_v100()], backend, migration_cost=5.0))
    assert res.migrated == [] and placed(res)["run"] == [("v", 0)]


def test_preemption_rules(backend: tuple[str, str]) -> None:
    nodes = [node("v", ["V100-32GB"])]
    big = {"name": "big", "gpus": 1, "weight": 10}
    res = solve(request(nodes, [_running_on_v100(), big], backend, preemption_cost=1.0))
    assert res.preempted == ["run"] and set(placed(res)) == {"big"}
    assert reasons(res)["run"] == "preempted"
    res = solve(request(nodes, [_running_on_v100(preemptible=False), big], backend))
    assert res.preempted == [] and set(placed(res)) == {"run"}
    res = solve(request(nodes, [_running_on_v100(), big], backend, allow_preemption=False))
    assert res.preempted == [] and set(placed(res)) == {"run"}


def test_conflicting_non_preemptible_jobs_are_infeasible(backend: tuple[str, str]) -> None:
    nodes = [node("v", ["V100-32GB"])]
    jobs = [_running_on_v100(preemptible=False),
            {**_running_on_v100(preemptible=False), "name": "run2"}]
    res = solve(request(nodes, jobs, backend))
    assert res.status == "infeasible"
    assert res.assignments == []
    assert set(reasons(res).values()) == {"infeasible_constraints"}


def test_allow_preemption_false_without_room_is_infeasible(backend: tuple[str, str]) -> None:
    nodes = [node("v", ["V100-32GB"]), node("w", ["V100-32GB"], schedulable=False)]
    # Two running jobs on a cordoned node's single GPU cannot both be kept or moved.
    jobs = [{"name": "a", "gpu_share": 0.6, "current": [{"node": "w", "gpu": 0,
                                                           "fraction": 0.6}]},
            {"name": "b", "gpus": 1, "current": [{"node": "v", "gpu": 0}],
             "preemptible": False},
            {"name": "c", "gpu_share": 0.6, "current": [{"node": "w", "gpu": 0,
                                                           "fraction": 0.6}]}]
    res = solve(request(nodes, jobs, backend, allow_preemption=False))
    assert res.status == "infeasible"


# ------------------------------------------------------------------ objectives
def test_fairness_balances_tenants(backend: tuple[str, str]) -> None:
    nodes = [node("n", ["V100-32GB"] * 2)]
    jobs = [{"name": f"a{i}", "gpus": 1, "tenant": "a", "weight": 2} for i in range(2)]
    jobs += [{"name": f"b{i}", "gpus": 1, "tenant": "b"} for i in range(2)]
    res = solve(request(nodes, jobs, backend))
    assert {j[0] for j in placed(res)} == {"a"}       # throughput: the heavier tenant
    res = solve(request(nodes, jobs, backend, objective="fairness"))
    assert {j[0] for j in placed(res)} == {"a", "b"}  # fairness: one each
    assert res.objective_value == pytest.approx(0.5)
    assert res.stats.throughput == pytest.approx(3 * 0.4)  # type: ignore[attr-defined]


def test_priority_fifo_has_no_inversion(backend: tuple[str, str]) -> None:
    nodes = [node("n", ["V100-32GB"])]
    jobs = [{"name": "urgent", "gpus": 1, "weight": 2, "throughput": {"V100-32GB": 0.1}},
            {"name": "bulk", "gpus": 1, "weight": 1, "throughput": {"V100-32GB": 1.0}},
            {"name": "late", "gpus": 1, "weight": 2, "submitted_at": 50,
             "throughput": {"V100-32GB": 5.0}},
            {"name": "early", "gpus": 1, "weight": 2, "submitted_at": 10,
             "throughput": {"V100-32GB": 0.2}}]
    res = solve(request(nodes, jobs, backend))
    assert set(placed(res)) == {"late"}
    res = solve(request(nodes, jobs, backend, objective="priority_fifo"))
    # weight 2 first, then submitted_at: "early" (10), "late" (50), then "urgent" (none).
    assert set(placed(res)) == {"early"}
    assert res.objective_value == pytest.approx(2 * 0.2)


def test_jct_and_makespan_objectives(backend: tuple[str, str]) -> None:
    nodes = [node("n", ["V100-32GB"])]
    jobs = [{"name": "short", "gpus": 1, "remaining_work": 600},
            {"name": "long", "gpus": 1, "remaining_work": 36000}]
    res = solve(request(nodes, jobs, backend, objective="jct"))
    assert set(placed(res)) == {"short"}
    assert res.objective_value == pytest.approx(0.4 * 3600 / 600)
    res = solve(request(nodes, jobs, backend, objective="makespan"))
    assert set(placed(res)) == {"long"}
    assert res.objective_value == pytest.approx(0.4 * 36000 / 3600)
