"""Topology levels at the boundary (contract 5.5): the 422 cases with their field paths, and
the rule helpers (domains per level, capacity per domain, required and preferred levels)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from models import PlanRequest
from models.capacity import CapacitySummary, Topology
from models.objective import evaluate
from models.reasons import StaticReasons
from models.request import Placement
from models.rules import costed_level, required_levels, topology_cost, within_required


def _node(name: str, topo: dict[str, str] | None, gpus: int = 2, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "gpus": [{"index": i, "model": "A100-SXM4-40GB"}
                                                  for i in range(gpus)], **kw}
    if topo is not None:
        out["topology"] = topo
    return out


def _request(levels: list[str] | None = None, nodes: list[dict[str, Any]] | None = None,
             jobs: list[dict[str, Any]] | None = None, **policy: Any) -> dict[str, Any]:
    cluster: dict[str, Any] = {"nodes": nodes if nodes is not None else [
        _node("a", {"block": "b1", "rack": "r1"}), _node("b", {"block": "b1", "rack": "r2"}),
        _node("c", {"block": "b2", "rack": "r1"})]}
    cluster["topology_levels"] = levels if levels is not None else ["block", "rack"]
    return {"cluster": cluster, "jobs": jobs or [], "policy": policy}


def _errors(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as info:
        PlanRequest.model_validate(data)
    return [(tuple(e["loc"]), e["msg"]) for e in info.value.errors()]


def _locs(data: dict[str, Any]) -> list[tuple[str | int, ...]]:
    return [loc for loc, _ in _errors(data)]


def test_valid_request_with_levels() -> None:
    req = PlanRequest.model_validate(_request(jobs=[
        {"name": "j", "gpus": 4, "single_node": False,
         "topology": {"required": "block", "preferred": "rack"}}], topology_cost=0.5))
    job = req.jobs[0]
    assert job.topology is not None and job.topology.required == "block"
    assert req.policy.topology_cost == 0.5
    assert PlanRequest.model_validate(_request()).policy.topology_cost == 0.1


def test_unknown_level_in_job() -> None:
    data = _request(jobs=[{"name": "j", "gpus": 2, "topology": {"required": "zone"}},
                          {"name": "k", "gpus": 2, "topology": {"preferred": "row"}}])
    assert _locs(data) == [("jobs", 0, "topology", "required"),
                           ("jobs", 1, "topology", "preferred")]
    msg = _errors(data)[0][1]
    assert "unknown topology level 'zone'" in msg and "'block'" in msg


def test_implicit_levels_are_always_known() -> None:
    for level in ("host", "domain"):
        PlanRequest.model_validate(_request(
            levels=[], nodes=[_node("a", None)],
            jobs=[{"name": "j", "gpus": 2, "topology": {"required": level}}]))


def test_unknown_level_in_node() -> None:
    nodes = [_node("a", {"block": "b1", "rack": "r1", "zone": "z"})]
    assert _locs(_request(nodes=nodes)) == [("cluster", "nodes", 0, "topology", "zone")]
    # no levels at all: any entry is unknown
    assert _locs(_request(levels=[], nodes=[_node("a", {"rack": "r"})])) == [
        ("cluster", "nodes", 0, "topology", "rack")]


def test_node_missing_a_level() -> None:
    nodes = [_node("a", {"block": "b1", "rack": "r1"}), _node("b", {"block": "b1"}),
             _node("c", None)]
    errs = _errors(_request(nodes=nodes))
    assert [loc for loc, _ in errs] == [("cluster", "nodes", 1, "topology"),
                                        ("cluster", "nodes", 2, "topology")]
    assert "'rack'" in errs[0][1] and "'block', 'rack'" in errs[1][1]


def test_duplicate_and_implicit_levels() -> None:
    assert ("cluster", "topology_levels", 2) in _locs(_request(levels=["block", "rack",
                                                                      "block"]))
    assert ("cluster", "topology_levels", 0) in _locs(_request(levels=["host", "rack"]))
    assert ("cluster", "topology_levels", 1) in _locs(_request(levels=["rack", "domain"]))


@pytest.mark.parametrize("cost", [-0.1, math.inf, math.nan])
def test_bad_topology_cost(cost: float) -> None:
    assert _locs(_request(topology_cost=cost)) == [("policy", "topology_cost")]


def test_empty_names_and_extra_fields() -> None:
    assert _locs(_request(levels=[""])) == [("cluster", "topology_levels", 0)]
    assert _locs(_request(jobs=[{"name": "j", "gpus": 1, "topology": {"requird": "rack"}}])
                 ) == [("jobs", 0, "topology", "requird")]


def test_domains_are_paths() -> None:
    req = PlanRequest.model_validate(_request())
    topo = Topology(req.cluster)
    # rack r1 of block b1 and rack r1 of block b2 are two racks
    assert topo.domain("a", "rack") != topo.domain("c", "rack")
    assert topo.domain("a", "block") == topo.domain("b", "block")
    assert topo.domain("a", "host") == "a"
    assert topo.nested("rack", "block") and not topo.nested("block", "rack")
    assert topo.nested("host", "rack") and not topo.nested("domain", "rack")
    cap = CapacitySummary(req.cluster)
    pool = ("A100-SXM4-40GB", False)
    assert cap.most_in_one("block", pool) == 4
    assert cap.most_in_one("rack", pool) == 2
    assert cap.most_in_one("host", pool) == 2
    assert cap.most_in_one("domain", pool) == 2  # no topology_domain: one node each


def test_job_rules() -> None:
    req = PlanRequest.model_validate(_request(jobs=[
        {"name": "v1", "gpus": 2, "single_node": False, "same_domain": True},
        {"name": "both", "gpus": 2, "single_node": False, "same_domain": True,
         "topology": {"required": "block", "preferred": "rack"}},
        {"name": "nested", "gpus": 2, "single_node": False,
         "topology": {"required": "rack", "preferred": "block"}}]))
    topo = Topology(req.cluster)
    v1, both, nested = req.jobs
    assert required_levels(v1) == ("domain",)
    assert required_levels(both) == ("domain", "block")
    assert costed_level(both, topo, 0.1) == "rack"
    assert costed_level(both, topo, 0.0) is None
    assert costed_level(nested, topo, 0.1) is None
    assert topology_cost(both, ["a", "b"], topo, 0.25) == 0.25
    assert topology_cost(both, ["a", "b", "c"], topo, 0.25) == 0.5
    assert topology_cost(both, ["a"], topo, 0.25) == 0.0
    assert within_required(nested, ["a"], topo)
    assert not within_required(nested, ["a", "c"], topo)


def test_evaluate_charges_the_preferred_level() -> None:
    req = PlanRequest.model_validate(_request(jobs=[
        {"name": "g", "gpus": 4, "single_node": False, "topology": {"preferred": "rack"}}],
        topology_cost=0.25))
    spread = {"g": [Placement(node=n, gpu=i) for n in ("a", "c") for i in range(2)]}
    ev = evaluate(req, spread)
    assert ev.topology_cost == 0.25
    assert ev.objective_value == pytest.approx(ev.throughput)
    packed = {"g": [Placement(node=n, gpu=i) for n in ("a", "b") for i in range(2)]}
    assert evaluate(req, packed).objective_value == pytest.approx(ev.objective_value)


def test_static_reason_required_level() -> None:
    req = PlanRequest.model_validate(_request(jobs=[
        {"name": "g", "gpus": 6, "single_node": False, "topology": {"required": "block"}},
        {"name": "r", "gpus": 3, "single_node": False, "topology": {"required": "rack"}},
        {"name": "ok", "gpus": 4, "single_node": False, "topology": {"required": "block"}}]))
    why = StaticReasons(req)
    assert why.reason(req.jobs[0]) == (
        "gang_too_large", "needs 6 GPUs of one model in one block; at most 4 are eligible")
    assert why.reason(req.jobs[1]) is not None and "one rack" in why.reason(req.jobs[1])[1]
    assert why.reason(req.jobs[2]) is None
