"""Reclaiming whole nodes for a gang of a tenant below its guarantee
(`heuristics.levels.reclaim_nodes`), on hand-made clusters whose best plans are worked
out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from heuristics.greedy import plan_greedy
from heuristics.levels import _try_node, placer_of, reclaim_nodes
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.objective import evaluate, level_values
from tests.heuristics.helpers import node, violations

V100 = "V100-32GB"


def _spread(nodes: int, a_priority: int = 0) -> PlanRequest:
    """`nodes` nodes of 8 V100s, all busy: tenant b (guaranteed nodes + 1) runs one job on
    each node and one more on n0, tenant c (guaranteed the rest minus a's 8) fills every
    other GPU, so it borrows 8. Tenant a (guaranteed 8) submits an 8-GPU single-node gang.
    No node is free, and each holds one of b's jobs that count toward its guarantee."""
    slots = [(n, gpu) for gpu in range(8) for n in range(nodes)]
    jobs: list[dict[str, Any]] = []
    for i in range(nodes + 1):
        n, gpu = slots.pop(0)
        jobs.append({"name": f"b{i:02d}", "tenant": "b", "gpus": 1, "throughput": {V100: 1.0},
                     "current": [{"node": f"n{n}", "gpu": gpu}]})
    for i, (n, gpu) in enumerate(slots):
        jobs.append({"name": f"c{i:02d}", "tenant": "c", "gpus": 1, "throughput": {V100: 1.0},
                     "current": [{"node": f"n{n}", "gpu": gpu}]})
    jobs.append({"name": "a-gang", "tenant": "a", "gpus": 8, "single_node": True,
                 "priority": a_priority, "throughput": {V100: 1.0}})
    quotas = {"a": {"guaranteed": {"*": 8}}, "b": {"guaranteed": {"*": nodes + 1}},
              "c": {"guaranteed": {"*": 8 * nodes - 8 - nodes - 1}}}
    return PlanRequest.model_validate({
        "cluster": {"nodes": [node(f"n{i}", V100) for i in range(nodes)], "quotas": quotas},
        "jobs": jobs, "policy": {"objective": "throughput"}})


@pytest.mark.parametrize("nodes", [3, 5])
def test_a_node_is_cleared_for_the_gang(nodes: int) -> None:
    req = _spread(nodes)
    gpus = 8 * nodes
    greedy = plan_greedy(req)
    # Best fit keeps the running jobs within b's and c's guarantees first: no node has
    # room, the gang stays out and a is served nothing.
    assert "a-gang" not in greedy.placements
    assert level_values(req, greedy.placements)[0] == ("quota", gpus - 8.0)
    out = reclaim_nodes(req, greedy)
    assert violations(req, out) == []
    # Every guarantee is served in full: a's gang on one node, the b job there moved to a
    # GPU of c's borrowed work; c keeps exactly its guarantee. The best lower level, by
    # hand: every GPU busy (value gpus), 8 of c's jobs preempted (8 x 1.0) and one of b's
    # moved (0.5).
    assert len(out.placements["a-gang"]) == 8
    assert level_values(req, out.placements) == [("quota", float(gpus)),
                                                 ("priority 0", gpus - 8.5)]
    assert sum(1 for n in out.placements if n.startswith("b")) == nodes + 1
    assert sum(1 for n in out.placements if n.startswith("c")) == 8 * nodes - 8 - nodes - 1
    assert evaluate(req, out.placements).objective_value == pytest.approx(gpus - 8.5)


def test_nothing_changes_when_the_guarantees_are_served() -> None:
    # a's gang without a guarantee for a: clearing a node would serve no more guarantee.
    req = _spread(3)
    quotas = dict(req.cluster.quotas)
    quotas["a"] = quotas["a"].model_copy(update={"guaranteed": {}})
    req = req.model_copy(update={"cluster": req.cluster.model_copy(
        update={"quotas": quotas})})
    greedy = plan_greedy(req)
    assert reclaim_nodes(req, greedy) is greedy


def test_a_clearing_that_serves_no_more_is_undone_entirely() -> None:
    # n0 (2 GPUs) holds b's two jobs, both within b's guarantee of 2; n1 (1 GPU) holds
    # c's job, borrowed (c has no guarantee). a (guaranteed 1) submits a 2-GPU gang.
    # Clearing n0 for it: b1 takes c's GPU (c's job taken out), b2 finds no room: a gains
    # 1, b loses 1, no more is served, so everything goes back, c's job included.
    one = {"throughput": {V100: 1.0}, "gpus": 1}
    jobs = [{"name": "b1", "tenant": "b", **one, "current": [{"node": "n0", "gpu": 0}]},
            {"name": "b2", "tenant": "b", **one, "current": [{"node": "n0", "gpu": 1}]},
            {"name": "c1", "tenant": "c", **one, "current": [{"node": "n1", "gpu": 0}]},
            {"name": "a-gang", "tenant": "a", "gpus": 2, "single_node": True,
             "throughput": {V100: 1.0}}]
    req = PlanRequest.model_validate({
        "cluster": {"nodes": [node("n0", V100, 2), node("n1", V100, 1)],
                    "quotas": {"a": {"guaranteed": {"*": 1}}, "b": {"guaranteed": {"*": 2}},
                               "c": {}}},
        "jobs": jobs, "policy": {"objective": "throughput"}})
    start = {j["name"]: [Placement.model_validate(p) for p in j["current"]]
             for j in jobs if "current" in j}
    g = placer_of(req, HeuristicResult(start, {}))
    gang = g.by_name["a-gang"]
    occupants = [g.by_name["b1"], g.by_name["b2"]]
    assert not _try_node(g, gang, V100, occupants)
    assert g.state.placed == start

