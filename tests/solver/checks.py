"""Shared assertions of the exact-solver tests: a plan against the brute-force optimum,
and CP-SAT against MILP on one request."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from models import PlanRequest
from solver import plan
from solver.validate import validate_plan
from tests.solver.brute import brute_force, levels_key


def _tolerance(req: PlanRequest) -> float:
    """Fairness is solved on a grid of shares; every other objective exactly."""
    return 1.5e-4 if req.policy.objective == "fairness" else 1e-6


def assert_brute_force_optimum(req: PlanRequest, seed: object, *, levels: bool = False,
                               tol: float | None = None) -> None:
    """`plan(req)` is valid, and optimal with the brute-force optimum's value (or
    infeasible where the brute force finds no plan); with `levels`, also at the
    brute-force optimum's lexicographic levels (quotas, priority classes). `seed` labels
    a failure."""
    ref = brute_force(req)
    # Generous: the test is about the optimum, not the time (a loaded machine may slow
    # CBC many times over, and a solve cut by its limit is not proven optimal).
    req.policy.time_limit_s = max(req.policy.time_limit_s, 60.0)
    result = plan(req)
    assert validate_plan(req, result) == [], seed
    if ref is None:
        assert result.status == "infeasible"
        return
    assert result.status == "optimal", (seed, result.status)
    tol = _tolerance(req) if tol is None else tol
    if levels:
        got = {a.job: a.placements for a in result.assignments}
        want, have = levels_key(req, ref[1]), levels_key(req, got)
        assert have == pytest.approx(want, abs=tol), (seed, want, have)
    assert result.objective_value == pytest.approx(ref[0], abs=tol, rel=1e-9), (seed, ref)


def assert_backends_agree(make: Callable[[str], PlanRequest]) -> None:
    """CP-SAT and MILP prove the same optimum (or both infeasibility) on `make(solver)`,
    with a generous time limit: the test is about the optimum, not the time (a loaded
    2-core machine may slow CBC many times over)."""
    values = {}
    req = make("cp_sat")
    for solver in ("cp_sat", "milp"):
        req = make(solver)
        req.policy.threads = 2
        req.policy.time_limit_s = 180
        result = plan(req)
        assert validate_plan(req, result) == []
        assert result.status in ("optimal", "infeasible"), (solver, result.status)
        values[solver] = (result.status, result.objective_value)
    assert values["cp_sat"][0] == values["milp"][0]
    assert values["cp_sat"][1] == pytest.approx(values["milp"][1], abs=_tolerance(req),
                                                rel=1e-9)
