"""A fake planner for the service tests, loaded by the workers via GPUPLAN_PLANNER.

It burns CPU for `policy.time_limit_s` seconds (like a solver using its whole budget),
reporting an incumbent every 50 ms, then answers with every job unplaced. Job names steer
it: a job named `hang*` makes it ignore its time limit (to test the kill), `boom*` makes it
raise PlanningError, `crash*` kills its own process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from models import Plan, PlanRequest, Unplaced
from solver import PlanningError


def _plan(request: PlanRequest, status: str) -> Plan:
    return Plan.model_validate({
        "status": status, "solver": "fake", "objective_value": 0.0,
        "unplaced": [Unplaced(job=j.name, reason="insufficient_capacity").model_dump()
                     for j in request.jobs],
    })


def plan(request: PlanRequest, *, on_incumbent: Callable[[Plan], None] | None = None,
         **_: object) -> Plan:
    """Spin for the time limit, with incumbents; see the module docstring."""
    names = [j.name for j in request.jobs]
    if any(n.startswith("boom") for n in names):
        raise PlanningError("fake planner: invalid plan on purpose")
    if any(n.startswith("crash") for n in names):
        os._exit(3)
    limit = 3600.0 if any(n.startswith("hang") for n in names) else request.policy.time_limit_s
    end = time.monotonic() + limit
    next_report = 0.0
    while (now := time.monotonic()) < end:
        if on_incumbent is not None and now >= next_report:
            on_incumbent(_plan(request, "heuristic"))
            next_report = now + 0.05
    return _plan(request, "heuristic")
