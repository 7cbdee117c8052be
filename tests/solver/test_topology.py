"""Topology levels (contract 5.5) in every planner: hand-made cases where a required level
binds and a preferred level costs, brute-forced optima on random tiny requests mixing
topology with every v1 feature, valid heuristic plans and a valid bound, and v1 requests
compiling and planning exactly as before topology levels existed."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from heuristics.lp_round import plan_lp_round
from models import PlanRequest
from models.objective import evaluate
from solver import plan
from solver.bound import relax, upper_bound
from solver.formulation import compile_request
from solver.validate import validate_plan
from tests.solver.brute import brute_force
from tests.solver.checks import assert_brute_force_optimum
from tests.solver.strategies import random_request
from tests.solver.test_formulation import (
    _families,
    assert_encoded_plan_feasible,
)
from tests.solver.v1_fingerprint import REFERENCE, fingerprint

EXACT = ["cp_sat", "milp"]
ALL = ["cp_sat", "milp", "heuristic", "auto"]


def _cluster(racks: dict[str, tuple[str, str, int]], model: str = "A100-SXM4-80GB",
             ) -> dict[str, Any]:
    """Nodes named by `racks`: node -> (block, rack, GPUs)."""
    return {"topology_levels": ["block", "rack"], "nodes": [
        {"name": n, "topology": {"block": b, "rack": r},
         "gpus": [{"index": i, "model": model} for i in range(g)]}
        for n, (b, r, g) in racks.items()]}


def _plan(data: dict[str, Any], solver: str) -> tuple[PlanRequest, Any]:
    data = json.loads(json.dumps(data))
    data.setdefault("policy", {}).update(solver=solver, time_limit_s=20, threads=1, seed=1)
    req = PlanRequest.model_validate(data)
    result = plan(req)
    assert validate_plan(req, result) == []
    return req, result


def _nodes_of(result: Any, job: str) -> set[str]:
    return {p.node for a in result.assignments if a.job == job for p in a.placements}


# ------------------------------------------------------------------ hand-made cases


@pytest.mark.parametrize("solver", ALL)
def test_required_rack_keeps_the_gang_in_one_rack(solver: str) -> None:
    # 4 free GPUs in rack r1 only as 2 + 2 over two nodes; rack r2 has 3 on two nodes and
    # one more in another block's rack r2 (a different rack: domains are paths).
    data = {"cluster": _cluster({"a": ("b1", "r1", 2), "b": ("b1", "r1", 2),
                                 "c": ("b1", "r2", 2), "d": ("b1", "r2", 1),
                                 "e": ("b2", "r2", 2)}),
            "jobs": [{"name": "g", "gpus": 4, "single_node": False,
                      "topology": {"required": "rack"}},
                     {"name": "h", "gpus": 4, "single_node": False,
                      "topology": {"required": "rack"}}]}
    _req, result = _plan(data, solver)
    placed = {a.job for a in result.assignments}
    assert len(placed) == 1  # one rack holds 4: only one of the two gangs
    (job,) = placed
    assert _nodes_of(result, job) == {"a", "b"}
    reasons = {u.job: u.reason for u in result.unplaced}
    assert reasons == {({"g", "h"} - placed).pop(): "insufficient_capacity"}


@pytest.mark.parametrize("solver", ALL)
def test_required_block_allows_racks_of_one_block(solver: str) -> None:
    data = {"cluster": _cluster({"a": ("b1", "r1", 2), "b": ("b1", "r2", 2),
                                 "c": ("b2", "r1", 3)}),
            "jobs": [{"name": "g", "gpus": 4, "single_node": False,
                      "topology": {"required": "block"}}]}
    _req, result = _plan(data, solver)
    assert _nodes_of(result, "g") == {"a", "b"}


@pytest.mark.parametrize("solver", ALL)
def test_preferred_rack_pays_the_cost(solver: str) -> None:
    # One rack cannot hold the gang: it spans two racks and pays topology_cost once.
    data = {"cluster": _cluster({"a": ("b1", "r1", 2), "b": ("b1", "r2", 2)}),
            "jobs": [{"name": "g", "gpus": 4, "single_node": False,
                      "topology": {"preferred": "rack"}}],
            "policy": {"topology_cost": 0.75}}
    req, result = _plan(data, solver)
    assert _nodes_of(result, "g") == {"a", "b"}
    thr = evaluate(req, {a.job: a.placements for a in result.assignments}).throughput
    assert result.objective_value == pytest.approx(4 * 1.0 * _speed(req) - 0.75)
    assert thr == pytest.approx(result.objective_value)


def _speed(req: PlanRequest) -> float:
    return req.cluster.catalog()["A100-SXM4-80GB"].relative_speed


@pytest.mark.parametrize("solver", EXACT)
def test_preferred_rack_picks_one_rack_when_it_can(solver: str) -> None:
    # Rack r1 holds the gang on slower GPUs; spreading over r2 and r3 is faster but pays
    # 2 * cost. With a small cost the gang spreads; with a large one it stays in r1.
    cluster = {"topology_levels": ["rack"], "nodes": [
        {"name": "slow", "topology": {"rack": "r1"},
         "gpus": [{"index": i, "model": "A100-SXM4-80GB"} for i in range(4)]},
        *({"name": f"fast{k}", "topology": {"rack": f"r{k}"},
           "gpus": [{"index": i, "model": "H100-SXM5-80GB"} for i in range(2)]}
          for k in (2, 3))]}
    job = {"name": "g", "gpus": 4, "single_node": False, "topology": {"preferred": "rack"},
           "throughput": {"A100-SXM4-80GB": 1.0, "H100-SXM5-80GB": 1.25}}
    _req, cheap = _plan({"cluster": cluster, "jobs": [job],
                         "policy": {"topology_cost": 0.5}}, solver)
    assert _nodes_of(cheap, "g") == {"fast2", "fast3"}
    assert cheap.objective_value == pytest.approx(5.0 - 0.5)
    _req, dear = _plan({"cluster": cluster, "jobs": [job],
                        "policy": {"topology_cost": 1.5}}, solver)
    assert _nodes_of(dear, "g") == {"slow"}
    assert dear.objective_value == pytest.approx(4.0)


@pytest.mark.parametrize("solver", EXACT)
def test_cost_larger_than_the_value_leaves_the_gang_out(solver: str) -> None:
    data = {"cluster": _cluster({"a": ("b1", "r1", 1), "b": ("b1", "r2", 1)}),
            "jobs": [{"name": "g", "gpus": 2, "single_node": False, "weight": 0.1,
                      "topology": {"preferred": "rack"}}],
            "policy": {"topology_cost": 5.0}}
    _req, result = _plan(data, solver)
    assert not result.assignments and result.objective_value == 0.0


@pytest.mark.parametrize("solver", ALL)
def test_gang_fitting_no_domain_of_its_level_has_a_static_reason(solver: str) -> None:
    data = {"cluster": _cluster({"a": ("b1", "r1", 2), "b": ("b1", "r2", 2)}),
            "jobs": [{"name": "g", "gpus": 3, "single_node": False,
                      "topology": {"required": "rack"}}]}
    _req, result = _plan(data, solver)
    (u,) = result.unplaced
    assert u.reason == "gang_too_large" and "one rack" in u.detail


@pytest.mark.parametrize("solver", EXACT)
def test_kept_running_gang_pays_its_current_spans(solver: str) -> None:
    # Running over two racks, moving is not allowed to be cheaper than staying here.
    data = {"cluster": _cluster({"a": ("b1", "r1", 2), "b": ("b1", "r2", 2)}),
            "jobs": [{"name": "g", "gpus": 2, "single_node": False, "preemptible": False,
                      "topology": {"preferred": "rack"},
                      "current": [{"node": "a", "gpu": 0}, {"node": "b", "gpu": 0}]}],
            "policy": {"topology_cost": 0.3}}
    req, result = _plan(data, solver)
    assert result.objective_value == pytest.approx(2 * _speed(req) - 0.3)


# ------------------------------------------------------------------ brute force


def _check(seed: int, solver: str) -> None:
    req = random_request(random.Random(seed), solver=solver, max_gpus=6, max_nodes=4,
                         topology=True)
    assert_brute_force_optimum(req, seed)


@settings(max_examples=110, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_cp_sat_matches_brute_force_with_topology(seed: int) -> None:
    _check(seed, "cp_sat")


# MILP: fewer draws than CP-SAT's on the same strategy (each solve starts a CBC process,
# 3-6 times a CP-SAT draw in the loaded suite); both backends solve one compiled model, and
# test_agreement / the agree tests compare them on larger instances as well.
@settings(max_examples=50, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_milp_matches_brute_force_with_topology(seed: int) -> None:
    _check(seed, "milp")


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_auto_matches_brute_force_with_topology(seed: int) -> None:
    # auto may stop early when its starting plan reaches the LP bound: with topology
    # levels too, that claim of optimality must hold
    _check(seed, "auto")


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_heuristics_and_bound_with_topology(seed: int) -> None:
    """Greedy, LP rounding, local search and the heuristic planner give valid plans; the
    LP bound is at least the brute-forced optimum."""
    req = random_request(random.Random(seed), solver="heuristic", max_gpus=6, max_nodes=4,
                         topology=True)
    result = plan(req)
    assert validate_plan(req, result) == []
    greedy = plan_greedy(req)
    rel = relax(req, time_limit_s=5.0)
    starts = [greedy, improve(req, greedy, deadline=float("inf"), seed=seed, max_moves=30)]
    if rel is not None:
        starts.append(plan_lp_round(req, rel.targets))
    for res in starts:
        _assert_required_hold(req, res.placements)
    ref = brute_force(req)
    if ref is not None and req.policy.objective != "fairness":
        bound = upper_bound(req, time_limit_s=5.0)
        assert bound is not None and bound >= ref[0] - 1e-6


def _assert_required_hold(req: PlanRequest, placements: dict[str, Any]) -> None:
    nodes = {n.name: n for n in req.cluster.nodes}
    levels = req.cluster.topology_levels
    for job in req.jobs:
        pls = placements.get(job.name)
        level = job.topology.required if job.topology is not None else None
        if not pls or level is None or job.current:
            continue
        if level == "host":
            doms = {p.node for p in pls}
        elif level == "domain":
            doms = {nodes[p.node].topology_domain or p.node for p in pls}
        else:
            cut = levels[:levels.index(level) + 1]
            doms = {tuple(nodes[p.node].topology[lv] for lv in cut) for p in pls}
        assert len(doms) == 1, (job.name, pls)


# ------------------------------------------------------------------ v1 unchanged


def _reference() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(REFERENCE.read_text())
    return rows


@pytest.mark.parametrize("row", _reference(), ids=lambda r: str(len(r["request"]["jobs"])))
def test_v1_requests_compile_and_plan_as_before(row: dict[str, Any]) -> None:
    """Compiled models (exact, pruned, throughput terms), the LP bound and the heuristic
    plans of v1 requests (same_domain gangs included) are those of the code before
    topology levels (tests/solver/v1_fingerprint.py)."""
    req = PlanRequest.model_validate(row["request"])
    assert fingerprint(req) == row["fingerprint"]


def test_same_domain_is_the_level_domain() -> None:
    """A v1 same_domain gang and the same gang with {"required": "domain"} compile to one
    model up to the level's tag in names, and plan alike."""
    nodes = [{"name": n, "topology_domain": d,
              "gpus": [{"index": i, "model": "A100-SXM4-80GB"} for i in range(2)]}
             for n, d in (("a", "d1"), ("b", "d2"), ("c", "d2"), ("e", None))]
    v1 = {"cluster": {"nodes": nodes}, "jobs": [
        {"name": "g", "gpus": 3, "single_node": False, "same_domain": True}]}
    v11 = {"cluster": {"nodes": nodes}, "jobs": [
        {"name": "g", "gpus": 3, "single_node": False, "topology": {"required": "domain"}}]}
    a = compile_request(PlanRequest.model_validate(v1)).model
    b = compile_request(PlanRequest.model_validate(v11)).model
    assert len(a.names) == len(b.names) and len(a.constraints) == len(b.constraints)
    assert [c.terms for c in a.constraints] == [c.terms for c in b.constraints]
    assert a.objective == b.objective
    for solver in EXACT:
        _r1, p1 = _plan(v1, solver)
        _r2, p2 = _plan(v11, solver)
        assert _nodes_of(p1, "g") == _nodes_of(p2, "g") == {"b", "c"}


# ------------------------------------------------------------------ the model itself


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9),
       st.sampled_from(["throughput", "jct", "makespan"]))
def test_a_topology_plan_encoded_is_feasible_at_its_objective(seed: int,
                                                              objective: str) -> None:
    """A greedy plan of a request with topology levels, encoded as a hint, satisfies every
    row (required levels, spans) and has its evaluated objective (topology costs
    included); every row is named after a documented family."""
    req = random_request(random.Random(seed), max_gpus=8, max_jobs=8, max_nodes=4,
                         objective=objective, topology=True)
    start = plan_greedy(req)
    c, _, _ = assert_encoded_plan_feasible(req, start.placements)
    families = _families()
    assert all(row.name.split("[")[0] in families for row in c.model.constraints)
