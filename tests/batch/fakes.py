"""Stand-in solve functions for the batch tests (module level, so workers can import them)."""

from __future__ import annotations

import os
import time

from heuristics.greedy import plan_greedy
from models import Plan, PlanRequest
from solver.build import build_plan

#: Size of the padding `padded_solve` adds to each plan, to make holding plans visible in RSS.
PAD_BYTES = 400_000


def greedy_solve(request: PlanRequest) -> Plan:
    """A valid plan from the greedy heuristic; notes the threads and pid it ran with."""
    plan = build_plan(request, plan_greedy(request), status="heuristic", solver="fake")
    plan.explanation = [f"threads={request.policy.threads}", f"pid={os.getpid()}"]
    return plan


def failing_solve(request: PlanRequest) -> Plan:
    """Fails for requests whose first job is called `boom`, else like greedy_solve."""
    if request.jobs and request.jobs[0].name == "boom":
        raise RuntimeError("boom requested")
    return greedy_solve(request)


def slow_solve(request: PlanRequest) -> Plan:
    """greedy_solve after sleeping `policy.time_limit_s` (a stand-in for a long solve)."""
    time.sleep(request.policy.time_limit_s)
    return greedy_solve(request)


def padded_solve(request: PlanRequest) -> Plan:
    """greedy_solve with PAD_BYTES of explanation, so that keeping plans would cost memory."""
    plan = greedy_solve(request)
    plan.explanation.append("x" * PAD_BYTES)
    return plan
