"""The heuristic pipeline the solver runs on its own or as a warm start.

`plan_heuristic(request, deadline=...)` runs the greedy planner twice (keeping every
running job in place, and letting preemptible running jobs take their turn in the value
order), keeps the better plan by `models.objective.evaluate`, then improves it with local
search until `deadline`.
"""

from __future__ import annotations

import time

from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from heuristics.result import HeuristicResult
from models import PlanRequest


def plan_heuristic(
    request: PlanRequest,
    *,
    deadline: float,
    seed: int | None = None,
    local_search: bool = True,
) -> HeuristicResult:
    """The best greedy plan, improved by local search until `deadline`
    (a `time.monotonic()` instant)."""
    best = plan_greedy(request, seed=seed, deadline=deadline)
    if local_search and time.monotonic() < deadline:
        best = improve(request, best, deadline=deadline, seed=seed)
    return best
