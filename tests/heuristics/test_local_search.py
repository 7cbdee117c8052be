"""Local search: the evict-and-place move for gangs that no node has room for."""

from __future__ import annotations

import time
from typing import Any

import pytest

from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from models.objective import evaluate
from tests.heuristics.helpers import node, request, violations

V100 = "V100-32GB"


def _scattered(objective: str, gang_work: float, **policy: Any) -> Any:
    """Two 8-GPU nodes, each with one running 1-GPU job: 14 GPUs free, but no node has
    the 8 the waiting gang needs until one of the small jobs moves next to the other."""
    return request([node("a", V100), node("b", V100)],
                   [{"name": "x", "gpus": 1, "current": [{"node": "a", "gpu": 0}],
                     "remaining_work": 36000},
                    {"name": "y", "gpus": 1, "current": [{"node": "b", "gpu": 0}],
                     "remaining_work": 36000},
                    {"name": "gang", "gpus": 8, "remaining_work": gang_work}],
                   objective=objective, **policy)


@pytest.mark.parametrize("objective", ["throughput", "jct"])
def test_evict_and_place_makes_room_for_a_gang(objective: str) -> None:
    # jct: the gang is worth 0.4 x 3600 / 600 = 2.4 > one migration (0.5).
    req = _scattered(objective, 600.0)
    base = plan_greedy(req)
    assert "gang" not in base.placements
    res = improve(req, base, deadline=time.monotonic() + 5, seed=0, max_moves=0)
    assert "gang" in res.placements
    assert {p.node for p in res.placements["gang"]} in ({"a"}, {"b"})
    assert {"x", "y"} <= set(res.placements)
    ev = evaluate(req, res.placements)
    assert len(ev.migrated) == 1 and not ev.preempted
    assert ev.objective_value > evaluate(req, base.placements).objective_value
    assert violations(req, res) == []


def test_evict_and_place_pays_the_migration_cost() -> None:
    # jct: a gang worth 0.4 x 3600 / 3600 = 0.4 does not pay for a migration (0.5) ...
    req = _scattered("jct", 3600.0)
    res = improve(req, plan_greedy(req), deadline=time.monotonic() + 5, seed=0, max_moves=0)
    assert "gang" not in res.placements
    # ... and does when migrations cost less.
    req = _scattered("jct", 3600.0, migration_cost=0.05)
    res = improve(req, plan_greedy(req), deadline=time.monotonic() + 5, seed=0, max_moves=0)
    assert "gang" in res.placements
    assert violations(req, res) == []


def test_evict_and_place_respects_non_preemptible_jobs() -> None:
    req = request([node("a", V100), node("b", V100)],
                  [{"name": "x", "gpus": 1, "current": [{"node": "a", "gpu": 0}],
                    "preemptible": False},
                   {"name": "y", "gpus": 1, "current": [{"node": "b", "gpu": 0}],
                    "preemptible": False},
                   {"name": "gang", "gpus": 8}])
    res = improve(req, plan_greedy(req), deadline=time.monotonic() + 5, seed=0, max_moves=0)
    assert "gang" not in res.placements
    assert res.placements["x"][0].node == "a" and res.placements["y"][0].node == "b"
