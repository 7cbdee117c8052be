"""What a planner hands back before it becomes a Plan, and how plans are compared.

An `Outcome` is built once, by the code that knows how the plan was produced, with its
final status, label and bound; nothing changes it afterwards. Its `solver` label names
what produced the returned plan ("cp_sat", "milp/cbc", "heuristic"), prefixed with
"auto/" when the `auto` policy chose it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heuristics.result import HeuristicResult
from models import Placement, PlanRequest, PlanStatus
from models.objective import Evaluation, evaluate, fifo_order, level_key

#: Objectives whose plans may start from the rounded LP relaxation and whose LP bound is
#: the objective's (the lexicographic ones have their own order of decisions).
LP_ROUND_OBJECTIVES = ("throughput", "jct", "makespan")


@dataclass(frozen=True)
class Outcome:
    """A planner's result before it becomes a Plan: decided once, never patched."""

    result: HeuristicResult
    status: PlanStatus
    solver: str
    bound: float | None = None
    stats: dict[str, float | int | str] = field(default_factory=dict)


def label(request: PlanRequest, producer: str) -> str:
    """The wire label of a plan `producer` made ("cp_sat", "heuristic", ...)."""
    return f"auto/{producer}" if request.policy.solver == "auto" else producer


def infeasible(request: PlanRequest, solver: str, why: str) -> Outcome:
    """The hard constraints conflict: no job is placed, every one says why."""
    reasons = {j.name: ("infeasible_constraints", why) for j in request.jobs}
    return Outcome(HeuristicResult(reasons=reasons), "infeasible", solver)


def rank(request: PlanRequest, placements: dict[str, list[Placement]],
         ev: Evaluation | None = None) -> tuple[float, ...]:
    """How good a plan is under the policy's objective, lexicographic where it is: the
    levels of quotas and priority classes first (`models.objective.level_key`, empty
    without them), then priority_fifo compares which jobs are placed in priority order,
    fairness the minimum share; then the objective (rounded, so that float noise does not
    rank). `ev`: the plan's evaluation when known already."""
    levels = level_key(request, placements)
    if ev is None:
        ev = evaluate(request, placements)
    if request.policy.objective == "priority_fifo":
        order = fifo_order(request)
        return (*levels, *(1.0 if placements.get(j.name) else 0.0 for j in order),
                round(ev.throughput, 9))
    if request.policy.objective == "fairness":
        return (*levels, round(ev.objective_value, 9), round(ev.throughput, 9))
    return (*levels, round(ev.objective_value, 9))
