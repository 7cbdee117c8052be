"""The formulation's tables, hints and decoding agree with the plans they stand for.

A valid plan encoded as a hint is a feasible point of the model (every row, every bound)
whose objective is the plan's objective as models/objective.py recomputes it; decoding
that point gives back a valid plan of the same objective. And every row of the model
carries the name of the family (an `add_*` function of constraints.py) it comes from.
"""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heuristics.greedy import plan_greedy
from models import Placement, PlanRequest
from models.objective import evaluate
from solver.build import build_plan
from solver.formulation import Compiled, compile_request, constraints, decode, encode_hints
from solver.linear import LinearModel
from solver.validate import validate_plan
from tests.solver.strategies import random_request

#: Large enough that no target is pruned, and the symmetry rows (which order identical
#: nodes, so an arbitrary valid plan may break them) are left out.
NO_PRUNE_NO_SYMMETRY = 10**9


def _violations(model: LinearModel, x: list[int]) -> list[str]:
    """The rows and bounds `x` breaks."""
    out = [model.names[v] for v in range(model.num_vars)
           if not model.lbs[v] <= x[v] <= model.ubs[v]]
    for row in model.constraints:
        s = sum(c * x[v] for v, c in row.terms.items())
        if (row.lo is not None and s < row.lo - 1e-6) or (row.hi is not None
                                                          and s > row.hi + 1e-6):
            out.append(f"{row.name}: {row.lo} <= {s} <= {row.hi}")
    return out


def _objective(model: LinearModel, x: list[int]) -> float:
    return model.objective_const + sum(c * x[v] for v, c in model.objective.items())


def assert_encoded_plan_feasible(req: PlanRequest, placements: Mapping[str, list[Placement]]
                                 ) -> tuple[Compiled, list[int], float]:
    """Encode `placements` as a hint of the unpruned model of `req`: it breaks no row or
    bound and the model prices it at its evaluated objective; (model, values, objective)."""
    c = compile_request(req, prune=NO_PRUNE_NO_SYMMETRY)
    hints = encode_hints(c, placements)
    x = [hints[v] for v in range(c.model.num_vars)]
    assert _violations(c.model, x) == []
    want = evaluate(req, placements).objective_value
    assert _objective(c.model, x) == pytest.approx(want, abs=1e-6)
    return c, x, want


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9),
       st.sampled_from(["throughput", "jct", "makespan"]))
def test_a_plan_encoded_is_feasible_and_decodes_to_its_objective(seed: int,
                                                                  objective: str) -> None:
    req = random_request(random.Random(seed), max_gpus=8, max_jobs=8, max_nodes=3,
                         objective=objective)
    start = plan_greedy(req)
    c, x, want = assert_encoded_plan_feasible(req, start.placements)
    assert not c.pruned
    back = decode(c, x)
    plan = build_plan(req, back, status="feasible", solver="test")
    assert validate_plan(req, plan) == []
    assert plan.objective_value == pytest.approx(want, abs=1e-6)


def _families() -> set[str]:
    """The row family names the docstrings of constraints.py's add_* functions open with."""
    out = set()
    for name, fn in inspect.getmembers(constraints, inspect.isfunction):
        doc = inspect.getdoc(fn) or ""
        m = re.match(r"(\w+)\[", doc)
        if name.startswith("add_") and m:
            out.add(m.group(1))
    return out


def test_every_row_is_named_after_a_documented_family() -> None:
    families = _families()
    assert {"pool", "run", "gang", "slice", "mig_use", "cpu", "sym_node"} <= families
    seen: set[str] = set()
    for seed in range(30):
        req: PlanRequest = random_request(random.Random(seed), max_gpus=8, max_jobs=8,
                                          max_nodes=3)
        for row in compile_request(req).model.constraints:
            family = row.name.split("[")[0]
            assert family in families, row.name
            seen.add(family)
    assert len(seen) >= 15  # the random requests exercise most families
