"""The unit of work a backend runs: one request in, one plan (or one error) out.

`solve_one` is the only code that runs on workers (local processes or Ray tasks). It never
raises for a failed solve: the error comes back as text so that one bad request does not
stop the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from models import Plan, PlanRequest

#: The solve function: `solver.plan` in production, a fake in tests.
SolveFn = Callable[[PlanRequest], Plan]


@dataclass(frozen=True)
class SolveTask:
    """A request to solve; `key` lets the runner find what it knows about it."""

    key: int
    request: PlanRequest


@dataclass(frozen=True)
class SolveOutcome:
    """A solved task: the plan, or why there is none, and the solve's wall time."""

    key: int
    plan: Plan | None
    error: str | None = None
    wall_s: float = 0.0


def solve_one(task: SolveTask, solve: SolveFn) -> SolveOutcome:
    """Run `solve` on the task's request, turning any exception into an error outcome."""
    start = time.perf_counter()
    try:
        plan = solve(task.request)
    except Exception as e:  # a solver failure is reported per request, never fatal
        return SolveOutcome(task.key, None, f"solver failed: {type(e).__name__}: {e}",
                            time.perf_counter() - start)
    return SolveOutcome(task.key, plan, None, time.perf_counter() - start)
