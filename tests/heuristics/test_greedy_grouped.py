"""The greedy's sequence grouped by fit keys (`Greedy.place_grouped`): it makes exactly the
placements, and gives exactly the reasons, of the plain sequence (`place_sequence` over
the sorted jobs), in a single pass and in a planning session's warm plans on the placer
carried from plan to plan."""

from __future__ import annotations

import random
from typing import Any

import pytest

import heuristics.greedy as greedy
from benchmarks.generator import generate_custom
from benchmarks.latency import random_events
from heuristics.greedy import Greedy
from models import PlanRequest, Quota
from solver import warm
from solver.session import PlanningSession
from tests.heuristics.helpers import crowded, node, request, same_passes


def _crowded(seed: int, objective: str, **kw: Any) -> PlanRequest:
    """`helpers.crowded` on 64 GPUs and 240 jobs; `kw`: `generate_custom`'s (elastic
    gangs, topology)."""
    return PlanRequest.model_validate(crowded(64, 240, seed, objective, **kw).model_dump())


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pass runs the plain sequence."""
    monkeypatch.setattr(greedy, "_groups_apply", lambda *a: False)


PASSES: tuple[dict[str, Any], ...] = (
    {"keep_running": True}, {"keep_running": False}, {"seed": 5, "keep_running": True},
    {"seed": 5, "keep_running": False})


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("objective", ["throughput", "jct", "makespan", "priority_fifo",
                                       "fairness"])
def test_grouped_sequence_is_the_plain_one(seed: int, objective: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    req = _crowded(seed, objective, topology=("zone", "rack") if seed % 2 else ())
    calls: list[int] = []
    real = Greedy.place_grouped

    def spy(self: Greedy, *a: Any, **kw: Any) -> bool:
        calls.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(Greedy, "place_grouped", spy)   # the plain sequence calls none
    grouped = same_passes(req, PASSES, _plain, monkeypatch)
    assert calls and any(r.reasons for r in grouped)


def test_grouped_with_quotas_and_mig_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quotas with limits only (no levels: the grouped sequence serves them), the tenant
    in the fit key, and MIG layouts that may not change."""
    req = _crowded(1, "throughput")
    cluster = req.cluster.model_copy(update={"quotas": {"team-0": Quota(limit={"*": 6})}})
    policy = req.policy.model_copy(update={"allow_mig_reconfiguration": False})
    req = PlanRequest.model_validate(req.model_copy(update={
        "cluster": cluster, "policy": policy}).model_dump())
    same_passes(req, PASSES, _plain, monkeypatch)


def test_a_key_that_found_no_place_is_not_tried_again() -> None:
    """Four 1-GPU jobs of one demand on a node with two free GPUs, without model prices:
    two are placed, the third finds no place and the fourth is not tried (its reason is
    the third's)."""
    req = request([node("a", "A100-SXM4-80GB", 2)], [
        {"name": f"j{k}", "gpus": 1, "weight": 4.0 - k} for k in range(4)])
    tried: list[str] = []
    g = Greedy(req)
    real = g.place

    def place(info: Any, models: Any = None) -> bool:
        tried.append(info.name)
        return real(info, models)

    g.place = place  # type: ignore[method-assign]
    result = greedy.place_pending(g, [], order=None, seed=None, deadline=None,
                                  keep_all=True, priced=False)
    assert tried == ["j0", "j1", "j2"]
    assert set(result.placements) == {"j0", "j1"}
    assert result.reasons["j3"] == result.reasons["j2"]


def _session_plans(seed: int, plain: bool, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The warm plans of a session (the greedy pass alone: no LP, bound or search, whose
    running depends on timing), as JSON without their solve times."""
    with monkeypatch.context() as m:
        if plain:
            _plain(m)
        m.setattr(warm, "_repack", lambda request, result, *a: (result, None))
        m.setattr(warm, "_bound", lambda *a: None)
        m.setattr(warm, "_search", lambda request, result, *a: result)
        req = generate_custom(96, 260, seed=seed)
        policy = req.policy.model_copy(update={"seed": seed, "solver": "heuristic"})
        session = PlanningSession(req.model_copy(update={"policy": policy}))
        session.plan(30.0)
        session.prepare(lp=False)
        rng = random.Random(seed)
        out = []
        for r in range(5):
            session.apply(random_events(session.request, rng, 12, f"r{r}"))
            plan = session.plan(30.0)
            session.prepare(lp=False)
            out.append(plan.model_copy(update={"solve_time_s": 0.0}).model_dump_json())
        assert session.memo is not None and session.memo.carried >= 4
        return out


@pytest.mark.parametrize("seed", [0, 1])
def test_warm_plans_grouped_are_the_plain_ones(seed: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert _session_plans(seed, False, monkeypatch) == _session_plans(seed, True,
                                                                      monkeypatch)
