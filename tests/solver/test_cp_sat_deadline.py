"""CP-SAT hands back by its deadline: the wall limit stops it inside presolve (which checks
its own clock only between steps), on a busy machine too, and the exact phase is not
started when building and presolving the model cannot fit in the time left."""

from __future__ import annotations

import time

import pytest

from benchmarks.generator import generate_custom
from models import PlanRequest
from solver import exact, plan
from solver.backends import BACKENDS
from solver.backends import cp_sat as cp_sat_backend
from solver.formulation import compile_request
from solver.linear import Limits, LinearModel
from solver.validate import validate_plan


def _request(limit: float) -> PlanRequest:
    req = generate_custom(512, 700, seed=3)
    req.policy.solver = "cp_sat"
    req.policy.time_limit_s = limit
    req.policy.threads = 2
    return req


@pytest.fixture(scope="module")
def model() -> LinearModel:
    """A pruned model CP-SAT neither settles in seconds nor presolves in a blink (9,706
    variables)."""
    return compile_request(_request(1.0), prune=4).model


def _returns_within(model: LinearModel, limit: float, slack: float) -> None:
    """CP-SAT on `model` with a `limit` s wall limit answers (with or without a
    solution) within `slack` seconds past it."""
    t0 = time.monotonic()
    sol = BACKENDS["cp_sat"].solve(model, Limits(time_limit_s=limit, threads=2, seed=0))
    wall = time.monotonic() - t0
    assert sol.status in ("feasible", "unknown"), limit
    assert wall < limit + slack, (limit, wall)


@pytest.mark.usefixtures("busy")
def test_the_wall_limit_stops_cp_sat_whatever_its_own_clock_says(
        model: LinearModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """With CP-SAT's own time limit out of reach, the backend's wall limit (the watcher's
    `stop_search`) alone ends the solve, near the limit."""
    configure = cp_sat_backend._configure

    def far_limit(p, limits, n_vars, wall_s):  # type: ignore[no-untyped-def]
        configure(p, limits, n_vars, wall_s)
        p.max_time_in_seconds = 1000.0
        p.relative_gap_limit = 0.0

    monkeypatch.setattr(cp_sat_backend, "_configure", far_limit)
    for limit in (0.05, 0.5):
        _returns_within(model, limit, 5.0)


@pytest.mark.usefixtures("busy")
def test_a_short_exact_solve_returns_near_its_limit_on_a_busy_machine(
        model: LinearModel) -> None:
    """Limits shorter than presolve: the backend returns (with or without a solution)
    within a generous bound of the limit, build and read-back included."""
    for limit in (0.1, 0.4):
        _returns_within(model, limit, 2.0)


def test_cp_sat_is_not_started_when_its_presolve_cannot_fit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose build and presolve are estimated past the time left is not handed to
    CP-SAT: the plan is the starting plan, valid, early, and says why."""
    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("CP-SAT was started")

    monkeypatch.setitem(exact.STARTUP_PRIORS, "cp_sat", lambda _m: 1e3)
    monkeypatch.setattr(BACKENDS["cp_sat"], "solve", never)
    req = _request(10.0)   # time to compile the model even on a loaded machine
    t0 = time.monotonic()
    result = plan(req)
    assert time.monotonic() - t0 < 10.0 + 3.0
    assert result.status == "heuristic"
    assert any("cp_sat not started" in note for note in result.explanation), \
        result.explanation
    assert validate_plan(req, result) == []


def test_deterministic_mode_does_not_skip_on_the_wall_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic mode takes the same path whatever the pace: the start-up estimate
    (a wall-clock guess) does not keep CP-SAT from running."""
    calls: list[float] = []
    solve = BACKENDS["cp_sat"].solve

    def counted(model, limits, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(limits.time_limit_s)
        return solve(model, limits, **kwargs)

    monkeypatch.setitem(exact.STARTUP_PRIORS, "cp_sat", lambda _m: 1e3)
    monkeypatch.setattr(BACKENDS["cp_sat"], "solve", counted)
    req = generate_custom(64, 80, seed=3)   # small: the wall safety net stays far
    req.policy.solver = "cp_sat"
    req.policy.time_limit_s = 10.0
    req.policy.deterministic = True
    req.policy.threads = 1
    req.policy.seed = 0
    result = plan(req)
    assert calls, result.explanation
    assert validate_plan(req, result) == []
