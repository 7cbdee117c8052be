"""gpuplan's one entry point: `plan(request) -> Plan`.

The CLI, the service, the batch runner and the simulator all call `plan`; it compiles the
request once, runs the chosen backend (CP-SAT, MILP, heuristic or `auto`), decodes,
validates with `solver.validate` and returns the Plan.
"""

from solver.driver import PlanningError, plan

__all__ = ["PlanningError", "plan"]
