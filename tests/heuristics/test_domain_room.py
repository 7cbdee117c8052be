"""Evict-and-place for gangs (heuristics/domain_room.py): a same-domain gang that no domain
has room for once running jobs stay where they run, placed by moving one of them to the
other domain (a single-node gang: to the other node); never when the jobs that would move
may not, or when moving them costs more than the gang brings."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.generator import generate_custom
from heuristics.domain_room import place_by_eviction
from heuristics.greedy import Greedy
from heuristics.lp_round import plan_lp_round
from models import PlanRequest
from models.objective import evaluate
from solver.bound import relax
from solver.validate import validate_plan
from tests.heuristics.helpers import violations

A100 = "A100-SXM4-80GB"


def _request(gang_weight: float = 4.0, preemptible: bool = True,
             extra: list[dict[str, Any]] | None = None) -> PlanRequest:
    # Two domains of two 4-GPU nodes; a running 2-GPU job on one node of each, so each
    # domain has 6 free GPUs; a new 8-GPU gang that must stay in one domain.
    nodes = [{"name": f"{d}{i}", "topology_domain": d,
              "gpus": [{"index": g, "model": A100} for g in range(4)]}
             for d in ("a", "b") for i in range(2)]
    jobs: list[dict[str, Any]] = [
        {"name": f"r{d}", "gpus": 2, "preemptible": preemptible,
         "current": [{"node": f"{d}0", "gpu": 0}, {"node": f"{d}0", "gpu": 1}]}
        for d in ("a", "b")]
    jobs.append({"name": "gang", "gpus": 8, "single_node": False, "same_domain": True,
                 "weight": gang_weight})
    return PlanRequest.model_validate({
        "cluster": {"nodes": nodes}, "jobs": jobs + (extra or []),
        "policy": {"solver": "heuristic", "seed": 1}})


def _kept(req: PlanRequest) -> Greedy:
    g = Greedy(req)
    assert not g.keep_running()
    assert not g.place(g.by_name["gang"])   # 6 free GPUs in each domain
    return g


def test_a_running_job_moves_to_the_other_domain_for_the_gang() -> None:
    req = _request()
    g = _kept(req)
    assert place_by_eviction(g, g.by_name["gang"], [A100])
    placed = g.state.placed
    assert len(placed["gang"]) == 8
    assert len({p.node[0] for p in placed["gang"]}) == 1    # one domain
    domain = placed["gang"][0].node[0]
    other = "b" if domain == "a" else "a"
    # the evicted job found room in the other domain, beside the one running there
    assert {p.node[0] for p in placed[f"r{domain}"]} == {other}
    assert placed[f"r{other}"] == list(g.by_name[f"r{other}"].current or [])
    result = g.result()
    # 4 x 8 for the gang + 2 + 2, one migration (0.5)
    assert evaluate(req, result.placements).objective_value == pytest.approx(35.5)


def test_a_single_node_gang_gets_a_node() -> None:
    # Two 4-GPU nodes, a running 2-GPU job on each: no node holds the new 4-GPU gang until
    # one of the running jobs joins the other.
    req = PlanRequest.model_validate({
        "cluster": {"nodes": [{"name": f"n{i}", "gpus": [{"index": g, "model": A100}
                                                         for g in range(4)]}
                              for i in range(2)]},
        "jobs": [*({"name": f"r{i}", "gpus": 2,
                    "current": [{"node": f"n{i}", "gpu": 0}, {"node": f"n{i}", "gpu": 1}]}
                   for i in range(2)),
                 {"name": "gang", "gpus": 4, "weight": 4.0}],
        "policy": {"solver": "heuristic", "seed": 1}})
    g = Greedy(req)
    assert not g.keep_running()
    assert not g.place(g.by_name["gang"])
    assert place_by_eviction(g, g.by_name["gang"], [A100])
    result = g.result()
    assert {p.node for p in result.placements["gang"]} in ({"n0"}, {"n1"})
    # 4 x 4 + 2 + 2, one migration
    assert evaluate(req, result.placements).objective_value == pytest.approx(19.5)


def test_the_lp_rounding_places_the_gang_the_lp_places() -> None:
    # keep_first keeps both running jobs before it comes to the gang: without the
    # eviction pass the gang stays out (4 against 35.5)
    req = _request()
    rel = relax(req)
    assert rel is not None and rel.targets.get("gang") == A100
    for variant in ("gangs_first", "keep_first"):
        result = plan_lp_round(req, rel.targets, variant=variant, sizes=rel.amounts)
        assert "gang" in result.placements, variant
        assert evaluate(req, result.placements).objective_value == pytest.approx(35.5)


def test_non_preemptible_running_jobs_do_not_move() -> None:
    req = _request(preemptible=False)
    g = _kept(req)
    before = {n: list(p) for n, p in g.state.placed.items()}
    assert not place_by_eviction(g, g.by_name["gang"], [A100])
    assert g.state.placed == before


def test_no_eviction_that_costs_more_than_the_gang_brings() -> None:
    # The other domain is full (running jobs on the rest of b0 and on b1), so the
    # evicted job cannot come back: a gang worth 0.1 x 8 = 0.8 does not pay for a
    # running job worth 2 plus its preemption cost; the state is restored.
    extra = [{"name": "f", "gpus": 4, "current": [{"node": "b1", "gpu": g}
                                                   for g in range(4)]},
             {"name": "h", "gpus": 2, "current": [{"node": "b0", "gpu": g}
                                                   for g in (2, 3)]}]
    req = _request(gang_weight=0.1, extra=extra)
    g = Greedy(req)
    assert not g.keep_running()
    before = {n: list(p) for n, p in g.state.placed.items()}
    assert not place_by_eviction(g, g.by_name["gang"], [A100])
    assert g.state.placed == before
    # worth 4 x 8, the gang is placed and the evicted job is preempted
    req = _request(extra=extra)
    g = Greedy(req)
    assert not g.keep_running()
    assert place_by_eviction(g, g.by_name["gang"], [A100])
    result = g.result()
    assert [n for n in ("ra", "rb", "f", "h") if n not in result.placements] == ["ra"]
    assert validate_plan_ok(req, result.placements)


def validate_plan_ok(req: PlanRequest, placements: dict[str, Any]) -> bool:
    """Whether the placements, dressed as a plan, pass the validator."""
    from heuristics.result import HeuristicResult
    from solver.build import build_plan

    g = Greedy(req)
    reasons = {i.name: g.why_unplaced(i) for i in g.infos if i.name not in placements}
    plan = build_plan(req, HeuristicResult(placements=placements, reasons=reasons),
                      status="heuristic", solver="heuristic", solve_time_s=0.0)
    return validate_plan(req, plan) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(64, 512), st.integers(40, 300), st.integers(0, 10_000),
       st.sampled_from((0.0, 0.3)), st.sampled_from(((), ("block", "rack"))))
def test_evictions_never_lower_the_objective(gpus: int, jobs: int, seed: int,
                                             elastic: float, levels: tuple[str, ...]) -> None:
    # Greedy plans of generated requests (racks as domains, gangs spanning nodes with
    # required levels): every eviction kept raises the objective and leaves the plan
    # consistent; one refused leaves it as it was.
    req = generate_custom(gpus, jobs, seed, elastic=elastic, topology=levels)
    g = Greedy(req)
    g.keep_running()
    g.place_sequence(g.density_order(i for i in g.infos if i.name not in g.state.placed))
    value = evaluate(req, g.result().placements).objective_value
    for info in g.infos:
        if info.name in g.state.placed:
            continue
        before = {n: list(p) for n, p in g.state.placed.items()}
        if place_by_eviction(g, info, g.ranked_models(info)):
            now = evaluate(req, g.result().placements).objective_value
            assert now > value
            value = now
        else:
            assert g.state.placed == before
    assert violations(req, g.result()) == []
