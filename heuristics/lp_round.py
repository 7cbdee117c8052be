"""LP rounding: a plan built from the aggregated LP relaxation's choice of jobs and models.

The bound LP (solver/bound.py) decides, over pooled capacities, which jobs to place and on
which model; its solution is nearly integral because identical jobs are grouped. Best fit
in value-density order (greedy.py) decides one job at a time and, once the pools fill,
cannot revisit the mix; the LP sees the whole mix at once. On requests without running
jobs the rounded LP plan is often within a fraction of a percent of the bound where
greedy plus CP-SAT stay several percent below it (benchmarks/RESULTS.md).

`plan_lp_round(request, targets)` places, with the greedy's best-fit machinery:
1. the jobs that must keep running (non-preemptible ones; all running jobs when the
   policy forbids preemption);
2. the LP's running jobs whose target is the model they run on, kept where they are;
3. the other LP-chosen jobs on their target model, largest gangs first (they are the
   hardest to pack), then by value on the target;
4. every job still unplaced, in value-density order on any model (this also places the
   jobs of fractional LP counts and any target that did not fit).
Every placement goes through the same conflict checks as the greedy, so the plan honours
the whole contract; it is one more starting point for local search and CP-SAT.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from heuristics.greedy import Greedy
from heuristics.result import HeuristicResult
from models import PlanRequest

#: How often (in jobs) the deadline is checked.
_DEADLINE_EVERY = 64


def plan_lp_round(request: PlanRequest, targets: Mapping[str, str], *,
                  deadline: float | None = None) -> HeuristicResult:
    """The plan of the LP's `targets` (job name -> model), completed by best fit."""
    g = Greedy(request)
    policy = request.policy
    keep_all = not policy.allow_preemption
    failed = g.keep_running(preemptible=keep_all)
    if not keep_all and policy.objective != "fairness":
        for info in g.infos:
            if info.current and info.preemptible:
                g.bonus[info.name] = policy.preemption_cost
    st = g.state
    # Running jobs that could not stay but may not stop move first.
    for info in failed:
        if info.preemptible:
            g.place(info)
    chosen = [g.by_name[n] for n in targets if n in g.by_name]
    for info in sorted((i for i in chosen if i.current and i.preemptible),
                       key=lambda i: (-i.density, i.name)):
        if info.name not in st.placed and st.model_of(info.current or []) == targets[
                info.name]:
            g.try_keep(info)
    order = sorted(chosen, key=lambda i: (-i.size, -g.value_on(i, targets[i.name]),
                                          i.name))
    for n, info in enumerate(order):
        if deadline is not None and n % _DEADLINE_EVERY == 0 and time.monotonic() > deadline:
            break
        if info.name not in st.placed and targets[info.name] in info.values:
            g.place(info, [targets[info.name]])
    rest = g.density_order(i for i in g.infos if i.name not in st.placed
                           and (i.preemptible or not i.current))
    for n, info in enumerate(rest):
        if deadline is not None and n % _DEADLINE_EVERY == 0 and time.monotonic() > deadline:
            for left in rest[n:]:
                if left.name not in st.placed:
                    g.reasons[left.name] = ("time_limit", "the heuristic ran out of time")
            break
        if not g.place(info):
            g.reasons[info.name] = g.reasoner.reason(info)
    return g.result()
