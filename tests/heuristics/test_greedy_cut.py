"""A greedy pass cut at its deadline: it returns what it placed so far, valid, keeps the
running jobs it did not reach where they run, and gives the jobs it did not reach the
reason `time_limit` (so a partly done pass is never worse than keeping the running jobs)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

import heuristics.greedy as greedy
from benchmarks.generator import generate_custom, with_levels
from heuristics.greedy import plan_greedy
from models import PlanRequest
from models.objective import evaluate
from tests.heuristics.helpers import violations


def _request(seed: int) -> PlanRequest:
    """More demand than GPUs, about half the jobs running."""
    return generate_custom(256, 900, seed=seed)


def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The greedy's clock ticks 1 s at each reading: a deadline N s ahead cuts the pass
    after about N reads (one per `_DEADLINE_EVERY` jobs), whatever the machine's speed."""
    ticks = itertools.count()
    monkeypatch.setattr(greedy, "time", SimpleNamespace(monotonic=lambda: float(next(ticks))))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("keep", [False, True])
def test_a_cut_pass_keeps_what_it_placed(seed: int, keep: bool,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    req = _request(seed)
    _clock(monkeypatch)
    cut = plan_greedy(req, keep_running=keep, deadline=4.0)
    at_once = plan_greedy(req, keep_running=keep, deadline=-1.0)
    assert violations(req, cut) == [] and violations(req, at_once) == []
    names = {j.name for j in req.jobs}
    for r in (cut, at_once):
        assert set(r.placements) | set(r.reasons) == names
        assert not set(r.placements) & set(r.reasons)
    # cut part way: some jobs placed beyond what it kept, the rest not reached
    assert any(why[0] == "time_limit" for why in cut.reasons.values())
    queued = {j.name for j in req.jobs if not j.current}
    assert set(cut.placements) & queued
    # cut before its first job: every job it did not keep is left with `time_limit`
    # (unless it is a non-preemptible running job whose place conflicts)
    for name, why in at_once.reasons.items():
        assert why[0] in ("time_limit", "infeasible_constraints"), (name, why)
    assert not set(at_once.placements) & queued
    # a partly done pass is at least as good as the keep-only plan
    assert evaluate(req, cut.placements).objective_value >= \
        evaluate(req, at_once.placements).objective_value - 1e-9


def test_a_cut_pass_is_a_prefix_of_the_whole_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the running jobs kept first, each job the cut pass placed is placed exactly as
    the whole pass placed it: the cut pass is the whole pass stopped early."""
    req = _request(0)
    whole = plan_greedy(req, keep_running=True)
    _clock(monkeypatch)
    cut = plan_greedy(req, keep_running=True, deadline=6.0)
    same = sum(1 for n, pl in cut.placements.items() if whole.placements.get(n) == pl)
    assert same == len(cut.placements)


@pytest.mark.parametrize("seed", range(2))
def test_the_guarantee_phase_stops_at_the_deadline(seed: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With quotas the pass first places the jobs that raise the guaranteed usage served
    (`_run_levels`); that phase is cut at the deadline like the rest (on 16,384 GPUs /
    20,000 jobs it ran 2 s of CPU past a 2 s limit): cut before its first job it asks
    for at most one deadline period of jobs, and the pass it returns is valid and keeps
    the running jobs."""
    req = with_levels(_request(seed), tenants_quota=4, priority_classes=3, seed=seed)
    asked = []
    real = greedy.guarantee_models

    def counted(g: greedy.Greedy, info: greedy.JobInfo, own: bool = False,
                within: bool = False) -> list[str]:
        asked.append(info.name)
        return real(g, info, own, within)

    monkeypatch.setattr(greedy, "guarantee_models", counted)
    whole = plan_greedy(req, keep_running=True)
    assert len(asked) > 2 * greedy._DEADLINE_EVERY   # the phase has work to cut
    asked.clear()
    _clock(monkeypatch)
    at_once = plan_greedy(req, keep_running=True, deadline=-1.0)
    assert len(asked) < greedy._DEADLINE_EVERY
    cut = plan_greedy(req, keep_running=True, deadline=3.0)
    names = {j.name for j in req.jobs}
    for r in (at_once, cut):
        assert violations(req, r) == []
        assert set(r.placements) | set(r.reasons) == names
        assert any(why[0] == "time_limit" for why in r.reasons.values())
    queued = {j.name for j in req.jobs if not j.current}
    assert len(set(at_once.placements) & queued) < greedy._DEADLINE_EVERY
    assert len(set(at_once.placements) & queued) < len(set(cut.placements) & queued) \
        < len(set(whole.placements) & queued)
