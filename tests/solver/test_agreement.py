"""CP-SAT and the MILP backend agree on the optimum of random small instances."""

from __future__ import annotations

import random

import pytest

from solver import plan
from solver.validate import validate_plan
from tests.solver.strategies import random_request


@pytest.mark.parametrize("seed", range(50))
def test_cp_sat_and_milp_agree(seed: int) -> None:
    values = {}
    for solver in ("cp_sat", "milp"):
        req = random_request(random.Random(1000 + seed), max_gpus=32, max_jobs=40,
                             max_nodes=6, solver=solver)
        req.policy.threads = 2
        # Generous: the proof takes well under a second on a quiet machine, but a loaded
        # 2-core machine may slow CBC many times over; the test is about the optimum.
        req.policy.time_limit_s = 180
        result = plan(req)
        assert validate_plan(req, result) == []
        assert result.status in ("optimal", "infeasible"), (solver, result.status)
        values[solver] = (result.status, result.objective_value)
    assert values["cp_sat"][0] == values["milp"][0]
    tol = 1.5e-4 if req.policy.objective == "fairness" else 1e-6
    assert values["cp_sat"][1] == pytest.approx(values["milp"][1], abs=tol, rel=1e-9)
