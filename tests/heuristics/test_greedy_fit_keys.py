"""The greedy's fit keys (`Greedy.fit_key`): a pass that skips the jobs whose key already
found no place makes exactly the placements, and gives exactly the reasons, of a pass that
tries every job."""

from __future__ import annotations

import pytest

from heuristics.greedy import Greedy, plan_greedy
from models import PlanRequest, Quota
from tests.heuristics.helpers import crowded, node, request, violations

OBJECTIVES = ("throughput", "fairness", "priority_fifo", "jct")


def _request(seed: int, objective: str) -> PlanRequest:
    """A crowded cluster (more demand than GPUs, so many keys fill up) with tight host
    CPU and memory, some elastic gangs, small gangs that may span nodes, topology levels
    on odd seeds and quotas with a guarantee on seeds 2 mod 3."""
    topology = ("zone", "rack") if seed % 2 else ()
    req = crowded(64, 200, seed, objective, elastic=0.2, topology=topology)
    if seed % 3 == 2:
        cluster = req.cluster.model_copy(update={"quotas": {
            "team-0": Quota(limit={"*": 6}), "team-1": Quota(guaranteed={"*": 4})}})
        req = req.model_copy(update={"cluster": cluster})
    return PlanRequest.model_validate(req.model_dump())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_skipping_full_fit_keys_changes_nothing(seed: int, objective: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    req = _request(seed, objective)
    variants = []
    for keep in (False, True):
        variants.append(plan_greedy(req, keep_running=keep))
    with monkeypatch.context() as m:
        m.setattr(Greedy, "fit_key", lambda self, info: None)
        plain = [plan_greedy(req, keep_running=keep) for keep in (False, True)]
    for got, want in zip(variants, plain, strict=True):
        assert got.placements == want.placements
        assert got.reasons == want.reasons
    g = Greedy(req)
    assert any(g.fit_key(i) is not None for i in g.infos)


def test_a_gang_that_may_span_nodes_is_tried_after_a_single_node_one_failed() -> None:
    """Two nodes with 2 GPUs each: a single-node 4-GPU gang finds no place, and the
    same gang allowed to span nodes (a different key) is still tried, and placed."""
    req = request([node("a", "A100-SXM4-80GB", 2), node("b", "A100-SXM4-80GB", 2)], [
        {"name": "one", "gpus": 4, "weight": 3.0},
        {"name": "spans", "gpus": 4, "single_node": False},
    ])
    result = plan_greedy(req)
    assert "one" in result.reasons and result.placements["spans"]
    assert violations(req, result) == []
