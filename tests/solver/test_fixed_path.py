"""The fixed path of a solve whose budget buys nothing but the running jobs: the plan
keeping every running job is made without a greedy pass, and the driver falls back to
the pass when the validator rejects it (running jobs that conflict)."""

from __future__ import annotations

import logging

import pytest

import solver.portfolio as portfolio_mod
from benchmarks.generator import generate_custom
from models import PlanRequest
from solver import plan
from solver.budget import Budget
from solver.context import Context
from solver.validate import validate_plan


@pytest.fixture
def no_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every greedy pass finds its deadline too close to place a queued job."""
    monkeypatch.setattr(portfolio_mod.Portfolio, "_keep_only", lambda self, room: True)


def _with_limit(req: PlanRequest, limit: float) -> PlanRequest:
    return req.model_copy(update={"policy": req.policy.model_copy(
        update={"time_limit_s": limit, "solver": "heuristic"})})


@pytest.mark.parametrize("seed", [0, 2])
def test_without_room_every_running_job_is_kept_as_it_runs(no_room: None, seed: int) -> None:
    """The starting plan keeps every running job on its current placements and leaves
    every queued job out; the plan the driver returns from it is valid and bounded."""
    req = _with_limit(generate_custom(128, 200, seed=seed), 1.0)
    ctx = Context.start(req, None, None)
    start = ctx.portfolio.greedy()
    assert start is ctx.portfolio.unchecked
    running = [j for j in req.jobs if j.current]
    assert running
    assert start.placements == {j.name: j.current for j in running}
    assert set(start.reasons) == {j.name for j in req.jobs if not j.current}
    out = plan(req)
    assert validate_plan(req, out) == []
    assert out.best_bound is not None and out.best_bound >= out.objective_value


def _conflicting() -> PlanRequest:
    """Two preemptible running jobs on the same whole GPU (the snapshot is stale), and
    a free GPU beside it."""
    return PlanRequest.model_validate({
        "cluster": {"nodes": [{"name": "n0", "gpus": [
            {"index": 0, "model": "A100-SXM4-80GB"}, {"index": 1, "model": "A100-SXM4-80GB"}]}]},
        "jobs": [
            {"name": f"run-{k}", "gpus": 1, "preemptible": True,
             "current": [{"node": "n0", "gpu": 0}]} for k in range(2)],
        "policy": {"time_limit_s": 1.0, "solver": "heuristic"},
    })


def test_time_found_after_the_bound_goes_to_a_greedy_pass(no_room: None) -> None:
    """With the bound known and time left, a greedy pass that keeps the running jobs and
    places queued ones replaces the unchecked plan."""
    req = _with_limit(generate_custom(128, 200, seed=0), 5.0)
    ctx = Context.start(req, None, None)
    start = ctx.portfolio.start()
    assert ctx.portfolio.unchecked is None
    assert any(not j.current and j.name in start.placements for j in req.jobs)


def test_running_jobs_that_conflict_fall_back_to_the_greedy_pass(
        no_room: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(portfolio_mod.Portfolio, "_greedy_after_keep",
                        lambda self, kept: kept)
    req = _conflicting()
    with caplog.at_level(logging.INFO, logger="solver.driver"):
        out = plan(req)
    assert any("fails validation" in r.getMessage() for r in caplog.records)
    assert validate_plan(req, out) == []
    kept = [a.job for a in out.assignments
            if [(p.node, p.gpu) for p in a.placements] == [("n0", 0)]]
    assert len(kept) == 1
    assert len(out.assignments) + len(out.unplaced) == 2


def test_a_loaded_machine_keeps_more_back_for_an_exact_backend_and_finishing() -> None:
    """The load the solve measured (wall over CPU seconds of its Python phases) widens an
    exact backend's exit allowance and the finishing margin: under load the same time
    left gives the backend less and keeps more back."""
    quiet = Budget(limit_s=10.0, jobs=1500, gpus=1024)
    loaded = Budget(limit_s=10.0, jobs=1500, gpus=1024, started=quiet.started)
    for b, wall in ((quiet, 1.0), (loaded, 3.0)):
        b._py_wall, b._py_cpu = wall, 1.0
    assert loaded.load() == pytest.approx(3.0) and quiet.load() == pytest.approx(1.0)
    assert loaded.finish_reserve() > quiet.finish_reserve()
    q, w = (b.limits("cp_sat", 1, 0, 0.0).time_limit_s for b in (quiet, loaded))
    assert w < q - 0.3   # 0.12 s of it before the load scaled them (the pace alone)
