"""The greedy pass with quotas and priority classes skips the searches whose answer it
knows (`heuristics.greedy.NoPlace`, the sequence grouped by fit keys, a running job kept
without a search when no move can pay): it makes exactly the placements, and gives exactly
the reasons, of the pass that searches for every job, and a pass that starts past its
deadline searches for none."""

from __future__ import annotations

from typing import Any

import pytest

import heuristics.greedy as greedy
from benchmarks.generator import with_levels
from heuristics.greedy import Greedy, plan_greedy
from models import PlanRequest, Quota
from tests.heuristics.helpers import crowded, same_passes, violations

PASSES: tuple[dict[str, Any], ...] = (
    {"keep_running": True}, {"keep_running": False}, {"seed": 3, "keep_running": False})


def _request(seed: int, objective: str, quotas: int, classes: int, **kw: Any
             ) -> PlanRequest:
    """`helpers.crowded` on 64 GPUs and 240 jobs with `quotas` tenants under quotas and
    `classes` priority classes; `kw`: `generate_custom`'s (elastic gangs, topology)."""
    req = with_levels(crowded(64, 240, seed, objective, **kw), tenants_quota=quotas,
                      priority_classes=classes, seed=seed)
    return PlanRequest.model_validate(req.model_dump())


def _searching(m: pytest.MonkeyPatch) -> None:
    """Every pass searches for every job: no demand key known (so nothing is known to
    find no place), no running job kept unsearched, the class sequence job by job."""
    m.setattr(Greedy, "demand_key", lambda self, info: None)
    m.setattr(Greedy, "_move_bound", lambda self, info, models: float("inf"))

    def plain(self: Greedy, entries: Any, deadline: float | None = None,
              known: Any = None) -> bool:
        seq = [e[-1] for e in entries]
        self.place_sequence(seq, stop=greedy._stopper(self, seq, deadline))
        return False

    m.setattr(Greedy, "place_grouped", plain)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("objective", "quotas", "classes", "kw"), [
    ("throughput", 4, 3, {}),
    ("throughput", 8, 1, {}),
    ("throughput", 0, 3, {}),
    ("throughput", 4, 3, {"elastic": 0.4}),
    ("jct", 4, 3, {"topology": ("zone", "rack")}),
    ("priority_fifo", 4, 3, {}),
    ("fairness", 4, 3, {}),
])
def test_the_level_pass_is_the_searching_one(seed: int, objective: str, quotas: int,
                                             classes: int, kw: dict[str, Any],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    req = _request(seed, objective, quotas, classes, **kw)
    assert violations(req, same_passes(req, PASSES, _searching, monkeypatch)[0]) == []


@pytest.mark.parametrize("allow", [False, True])
def test_running_jobs_that_must_move_and_fixed_mig(allow: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Preemption forbidden (the running jobs that could not stay move first) or MIG
    layouts that may not change."""
    req = _request(1, "throughput", 4, 3)
    policy = req.policy.model_copy(update={"allow_preemption": allow,
                                           "allow_mig_reconfiguration": allow})
    req = PlanRequest.model_validate(req.model_copy(update={"policy": policy}).model_dump())
    same_passes(req, PASSES, _searching, monkeypatch)


@pytest.mark.parametrize("seed", range(3))
def test_guarantees_per_model(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guarantees on some models only: a job raises the guaranteed usage served on a part
    of its models, so a search that fails there leaves the others open."""
    req = _request(seed, "throughput", 0, 3)
    quotas = {
        "org-a": Quota(guaranteed={"H100-SXM5-80GB": 6.0, "A100-SXM4-80GB": 8.0,
                                "H200-141GB": 3.0, "*": 5.0}, limit={"*": 40.0}),
        "team-0": Quota(guaranteed={"H100-SXM5-80GB": 4.0, "A100-SXM4-80GB": 8.0},
                        limit={"*": 20.0}, parent="org-a"),
        "team-1": Quota(guaranteed={"H200-141GB": 3.0, "*": 5.0}, limit={"*": 12.0},
                        parent="org-a"),
        "team-2": Quota(guaranteed={"A100-SXM4-80GB": 6.0}, limit={"A100-SXM4-80GB": 9.0}),
    }
    cluster = req.cluster.model_copy(update={"quotas": quotas})
    req = PlanRequest.model_validate(req.model_copy(update={"cluster": cluster}).model_dump())
    same_passes(req, PASSES, _searching, monkeypatch)


def test_the_skips_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a crowded request most of the guarantee phase's searches are known to fail."""
    req = _request(0, "throughput", 4, 3)
    searches: list[str] = []
    real = Greedy.find

    def counted(self: Greedy, info: Any, models: Any = None) -> Any:
        searches.append(info.name)
        return real(self, info, models)

    monkeypatch.setattr(Greedy, "find", counted)
    plan_greedy(req, keep_running=True)
    skipping = len(searches)
    searches.clear()
    with monkeypatch.context() as m:
        _searching(m)
        plan_greedy(req, keep_running=True)
    assert skipping < len(searches) / 2


def test_a_pass_past_its_deadline_searches_for_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The guarantee phase reads the clock before its first job, as the sequences do: a
    pass that starts late asks no job's guarantee models and places no queued job (it
    asked up to `_DEADLINE_EVERY` of them, each a search, at L 0.5 s of CPU)."""
    req = _request(0, "throughput", 4, 3)
    asked: list[str] = []
    real = greedy.guarantee_models

    def counted(g: Greedy, info: Any, own: bool = False, within: bool = False) -> list[str]:
        asked.append(info.name)
        return real(g, info, own, within)

    monkeypatch.setattr(greedy, "guarantee_models", counted)
    late = plan_greedy(req, keep_running=True, deadline=0.0)
    assert asked == []
    queued = {j.name for j in req.jobs if not j.current}
    assert not set(late.placements) & queued
    assert all(late.reasons[n][0] == "time_limit" for n in queued)
