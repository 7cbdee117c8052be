"""A greedy pass cut at its deadline: it returns what it placed so far, valid, keeps the
running jobs it did not reach where they run, and gives the jobs it did not reach the
reason `time_limit` (so a partly done pass is never worse than keeping the running jobs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import pytest

import heuristics.greedy as greedy
from benchmarks.generator import generate_custom, with_levels
from heuristics.greedy import plan_greedy
from heuristics.result import HeuristicResult
from models import PlanRequest
from models.objective import evaluate
from tests.heuristics.helpers import violations


def _request(seed: int) -> PlanRequest:
    """More demand than GPUs, about half the jobs running."""
    return generate_custom(256, 900, seed=seed)


class _Clock:
    """The greedy's clock, ticking 1 s at each reading from 0 (`run` starts it again): a
    deadline N s ahead cuts a pass after N readings, whatever the machine's speed.
    `midway` finds the deadline that cuts a pass at a share of the readings its whole
    pass makes, so that the tests do not depend on how often the pass reads its clock."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        monkeypatch.setattr(greedy, "time", SimpleNamespace(monotonic=self._read))

    def _read(self) -> float:
        self.reads += 1
        return float(self.reads - 1)

    def run(self, pass_: Callable[[float], HeuristicResult], deadline: float
            ) -> HeuristicResult:
        """`pass_(deadline)` on a clock started again."""
        self.reads = 0
        return pass_(deadline)

    def midway(self, pass_: Callable[[float], HeuristicResult], share: float = 0.5
               ) -> float:
        """The deadline that cuts `pass_` after `share` of its whole pass's readings."""
        self.run(pass_, math.inf)
        assert self.reads >= 4, "the pass reads its clock too seldom to be cut part way"
        return float(max(1, round(share * self.reads)))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("keep", [False, True])
def test_a_cut_pass_keeps_what_it_placed(seed: int, keep: bool,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    req = _request(seed)
    clock = _Clock(monkeypatch)

    def pass_(deadline: float) -> HeuristicResult:
        return plan_greedy(req, keep_running=keep, deadline=deadline)

    cut = clock.run(pass_, clock.midway(pass_))
    at_once = clock.run(pass_, -1.0)
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
    clock = _Clock(monkeypatch)

    def pass_(deadline: float) -> HeuristicResult:
        return plan_greedy(req, keep_running=True, deadline=deadline)

    cut = clock.run(pass_, clock.midway(pass_))
    assert 0 < len(cut.placements) < len(whole.placements)
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
    clock = _Clock(monkeypatch)

    def pass_(deadline: float) -> HeuristicResult:
        return plan_greedy(req, keep_running=True, deadline=deadline)

    # cut within the guarantee phase: a share of the readings of its three sweeps
    midway = clock.midway(pass_, 0.5 * len(asked) / (len(asked) + len(req.jobs)))
    asked.clear()
    at_once = clock.run(pass_, -1.0)
    assert len(asked) < greedy._DEADLINE_EVERY
    cut = clock.run(pass_, midway)
    names = {j.name for j in req.jobs}
    for r in (at_once, cut):
        assert violations(req, r) == []
        assert set(r.placements) | set(r.reasons) == names
        assert any(why[0] == "time_limit" for why in r.reasons.values())
    queued = {j.name for j in req.jobs if not j.current}
    assert len(set(at_once.placements) & queued) < greedy._DEADLINE_EVERY
    assert len(set(at_once.placements) & queued) < len(set(cut.placements) & queued) \
        < len(set(whole.placements) & queued)
