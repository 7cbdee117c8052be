"""gpuplan's one entry point: `plan(request) -> Plan`.

The CLI, the service, the batch runner and the simulator all call `plan`; it compiles the
request once, runs the chosen backend (CP-SAT, MILP, heuristic or `auto`), decodes,
validates with `solver.validate` and returns the Plan.

`plan` and `PlanningError` are imported from `solver.driver` on first use, so that
`solver.validate` (which needs no backend) loads without OR-Tools or the heuristics.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from solver.driver import PlanningError, plan

__all__ = ["PlanningError", "plan"]


def __getattr__(name: str) -> Any:
    """`solver.plan` / `solver.PlanningError`, loaded from `solver.driver` when first asked."""
    if name in __all__:
        return getattr(importlib.import_module("solver.driver"), name)
    raise AttributeError(f"module 'solver' has no attribute {name!r}")
