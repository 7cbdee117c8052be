"""Quotas and priority classes (contract 5.3 / 5.4) on hand-made requests, on every planner:
reclaim (a tenant below its guarantee takes back a borrowed GPU, shown in `preempted` with
the reclaiming tenant), limits (borrowing stops at the limit, a parent's limit binds its
children), priority (a low class never displaces a high one; a high class preempts a low
one), and requests without the v1.1 fields planned as before."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import PlanRequest
from solver import plan
from solver.bound import upper_bound
from solver.formulation import compile_request
from solver.validate import validate_plan
from tests.solver.brute import brute_force
from tests.solver.strategies import random_levels_request, random_request

PLANNERS = [("cp_sat", "cbc"), ("milp", "cbc"), ("milp", "highs"), ("heuristic", "cbc"),
            ("auto", "cbc")]
A100 = "A100-SXM4-80GB"


def nodes(n: int = 4, model: str = A100) -> list[dict[str, Any]]:
    return [{"name": "n0", "gpus": [{"index": i, "model": model} for i in range(n)]}]


def request(jobs: list[dict[str, Any]], planner: tuple[str, str],
            quotas: dict[str, Any] | None = None, n: int = 4, **policy: Any) -> PlanRequest:
    cluster: dict[str, Any] = {"nodes": nodes(n)}
    if quotas is not None:
        cluster["quotas"] = quotas
    pol = {"solver": planner[0], "milp_backend": planner[1], "time_limit_s": 10,
           "threads": 1, "seed": 1, "mip_gap": 0.0, **policy}
    return PlanRequest.model_validate({"cluster": cluster, "jobs": jobs, "policy": pol})


def running(name: str, tenant: str, gpu: int, **kw: Any) -> dict[str, Any]:
    return {"name": name, "tenant": tenant, "gpus": 1,
            "current": [{"node": "n0", "gpu": gpu}], **kw}


def solve(req: PlanRequest):  # type: ignore[no-untyped-def]
    result = plan(req)
    assert validate_plan(req, result) == []
    return result


def placed(result) -> set[str]:  # type: ignore[no-untyped-def]
    return {a.job for a in result.assignments}


@pytest.fixture(params=PLANNERS, ids=[p[0] if p[0] != "milp" else p[1] for p in PLANNERS])
def planner(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


def test_reclaim_takes_back_a_borrowed_gpu(planner: tuple[str, str]) -> None:
    # b borrows all 4 GPUs (weight 3 each: worth more than a's jobs); a is guaranteed 2
    quotas = {"a": {"guaranteed": {"*": 2}}, "b": {"guaranteed": {"*": 2}}}
    jobs = [running(f"b{i}", "b", i, weight=3.0) for i in range(4)]
    jobs += [{"name": f"a{i}", "tenant": "a", "gpus": 1} for i in range(3)]
    result = solve(request(jobs, planner, quotas))
    assert sum(1 for j in placed(result) if j.startswith("a")) == 2
    assert len(result.preempted) == 2
    details = {u.job: u.detail for u in result.unplaced if u.reason == "preempted"}
    assert all("reclaimed by tenant a" in details[j] for j in result.preempted)
    top = result.stats.levels[0]  # type: ignore[attr-defined]
    assert (top["level"], top["value"]) == ("quota", 4.0)
    assert top.get("bound", 4.0) == pytest.approx(4.0, abs=1e-5)  # served in full


def test_no_reclaim_without_preemption(planner: tuple[str, str]) -> None:
    quotas = {"a": {"guaranteed": {"*": 2}}}
    jobs = [running(f"b{i}", "b", i) for i in range(4)]
    jobs += [{"name": "a0", "tenant": "a", "gpus": 1}]
    result = solve(request(jobs, planner, quotas, allow_preemption=False))
    assert placed(result) == {"b0", "b1", "b2", "b3"}


def test_idle_capacity_is_lent_up_to_the_limit(planner: tuple[str, str]) -> None:
    quotas = {"a": {"guaranteed": {"*": 1}, "limit": {"*": 3}}}
    jobs = [{"name": f"a{i}", "tenant": "a", "gpus": 1} for i in range(4)]
    result = solve(request(jobs, planner, quotas))
    assert len(placed(result)) == 3
    assert {u.reason for u in result.unplaced} == {"quota_limit"}
    assert result.stats.quota["a"]["*"] == {  # type: ignore[attr-defined]
        "usage": 3.0, "guaranteed": 1.0, "limit": 3.0}


def test_parent_limit_binds_its_children(planner: tuple[str, str]) -> None:
    quotas = {"org": {"guaranteed": {"*": 2}, "limit": {"*": 3}},
              "a": {"parent": "org", "guaranteed": {"*": 1}},
              "b": {"parent": "org", "guaranteed": {A100: 1}}}
    jobs = [{"name": f"{t}{i}", "tenant": t, "gpus": 1} for t in "ab" for i in range(2)]
    result = solve(request(jobs, planner, quotas))
    got = placed(result)
    assert len(got) == 3 and {"a0", "b0"} <= got | {"a1", "b1"}
    # both children keep their guarantee: one of each at least
    assert any(j.startswith("a") for j in got) and any(j.startswith("b") for j in got)


def test_low_class_never_displaces_a_high_one(planner: tuple[str, str]) -> None:
    # the low-class job is worth far more, yet the high-class running job keeps its GPU
    jobs = [running("high", "t", 0, priority=10, weight=0.1),
            {"name": "low", "tenant": "t", "gpus": 1, "priority": 0, "weight": 100.0}]
    result = solve(request(jobs, planner, n=1))
    assert placed(result) == {"high"}
    assert {u.job: u.reason for u in result.unplaced} == {"low": "lower_priority"}


def test_high_class_preempts_a_low_one(planner: tuple[str, str]) -> None:
    jobs = [running("low", "t", 0, priority=0, weight=100.0),
            {"name": "high", "tenant": "t", "gpus": 1, "priority": 10, "weight": 0.1}]
    result = solve(request(jobs, planner, n=1))
    assert placed(result) == {"high"} and result.preempted == ["low"]
    levels = result.stats.levels  # type: ignore[attr-defined]
    assert [x["level"] for x in levels] == ["priority 10", "priority 0"]
    assert levels[1]["value"] == pytest.approx(-1.0)  # the low class pays its preemption


def test_non_preemptible_over_limit_is_kept_and_reported(planner: tuple[str, str]) -> None:
    quotas = {"a": {"limit": {"*": 1}}}
    jobs = [running("a0", "a", 0, preemptible=False), running("a1", "a", 1, preemptible=False),
            {"name": "a2", "tenant": "a", "gpus": 1}]
    result = solve(request(jobs, planner, quotas))
    assert placed(result) == {"a0", "a1"}
    assert result.stats.quota["a"]["*"]["usage"] == 2.0  # type: ignore[attr-defined]


# ------------------------------------------------------------------ v1 means v1


def _fingerprint(req: PlanRequest) -> tuple[object, ...]:
    c = compile_request(req)
    m = c.model
    return (tuple(m.names), tuple(m.lbs), tuple(m.ubs),
            tuple((tuple(sorted(r.terms.items())), r.lo, r.hi, r.name) for r in m.constraints),
            tuple(sorted(m.objective.items())), m.objective_const)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_explicit_defaults_compile_to_the_v1_model(seed: int) -> None:
    # priority 0 on every job and an empty quota map are the v1 request
    req = random_request(random.Random(seed), max_gpus=8, max_jobs=10, max_nodes=3)
    data = req.model_dump(mode="json", exclude_unset=True)
    for job in data["jobs"]:
        job["priority"] = 0
    data["cluster"]["quotas"] = {}
    same = PlanRequest.model_validate(data)
    assert _fingerprint(same) == _fingerprint(req)
    assert plan(same).model_dump(exclude={"solve_time_s"}) == plan(req).model_dump(
        exclude={"solve_time_s"})


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(
    ["heuristic", "auto", "cp_sat"]), st.sampled_from(["fairness", "throughput"]))
def test_every_planner_gives_valid_level_plans(seed: int, solver: str, objective: str) -> None:
    req = random_levels_request(random.Random(seed), solver=solver, objective=objective,
                                max_gpus=8, max_jobs=10, max_nodes=3)
    assert validate_plan(req, plan(req)) == []


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_lp_bound_with_quota_rows_bounds_the_lexicographic_optimum(seed: int) -> None:
    req = random_levels_request(random.Random(seed))
    ref = brute_force(req)
    bound = upper_bound(req)
    if ref is None:
        return
    assert bound is not None and bound >= ref[0] - 1e-6, (seed, bound, ref[0])


def test_quota_rows_tighten_the_lp_bound() -> None:
    jobs = [{"name": f"a{i}", "tenant": "a", "gpus": 1} for i in range(4)]
    free = request(jobs, ("heuristic", "cbc"))
    capped = request(jobs, ("heuristic", "cbc"), {"a": {"limit": {"*": 2}}})
    assert upper_bound(free) == pytest.approx(4.0, rel=1e-3)
    assert upper_bound(capped) == pytest.approx(2.0, rel=1e-3)
