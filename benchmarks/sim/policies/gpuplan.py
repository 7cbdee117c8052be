"""`gpuplan`: this project's planner, called once per round through `solver.plan`.

Each round sends the contract's PlanRequest (running jobs with `current` and
`remaining_work`, the queue with `submitted_at`) with objective `jct`: each placed job is
worth `weight * speed(model) * 3600 / remaining_work` (Smith's rule for mean completion
time: short jobs first, each on the model where it runs fastest relative to the others;
docs/semantics.md), minus the migration / preemption costs.

Age weighting: `weight = 1 + age / aging_s` (age = seconds since submission), so a long
job's priority doubles every `aging_s` (default 2 h) it waits or runs: Smith's rule alone
would starve long jobs behind a steady stream of short ones. The costs follow the
simulator's restart overhead: losing `restart_overhead_s` of progress on a job is worth
`cost_scale` objective units (defaults: migration 0.5, preemption 1.0, the contract's).

The queue sent is the running jobs plus the `max_queue` waiting jobs of highest Smith
index on their best model (a bounded request keeps the round inside its time budget);
after the plan, the waiting jobs it does not place (left out of the request, or left by a
planner that ran out of time) are backfilled first fit on their fastest model, in Smith
order, into the capacity the plan leaves free. Every `jct` value is positive, so placing a
job that fits never lowers the objective: the backfill only completes the plan.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from benchmarks.sim.engine import Decision, JobRun, RoundView
from benchmarks.sim.policies.base import fresh_occupancy
from models import Placement, PlanRequest, Policy
from solver import plan

log = logging.getLogger(__name__)

HORIZON_S = 3600.0


@dataclass
class GpuPlan:
    """gpuplan's `jct` objective with age weighting, via `solver.plan`."""

    solver: Literal["auto", "heuristic", "cp_sat", "milp"] = "heuristic"
    time_limit_s: float = 0.5
    aging_s: float = 2 * 3600.0
    max_queue: int = 160
    migration_cost: float = 0.5
    preemption_cost: float = 1.0
    name: str = "gpuplan"
    backend_used: dict[str, int] = field(default_factory=dict)

    def weight(self, r: JobRun, now: float) -> float:
        """1 + age / aging_s."""
        return 1.0 + max(0.0, now - r.submit) / self.aging_s

    def _index(self, r: JobRun, now: float) -> float:
        best = max((v for v in (r.job.throughput or {}).values()), default=1.0)
        return self.weight(r, now) * best * HORIZON_S / max(r.remaining, 1.0)

    def schedule(self, view: RoundView) -> Decision:
        """One `solver.plan` call on this round's request."""
        waiting = sorted(view.waiting, key=lambda r: (-self._index(r, view.now),
                                                      r.submit, r.name))
        jobs = [*view.running, *waiting[: self.max_queue]]
        policy = Policy(objective="jct", solver=self.solver, time_limit_s=self.time_limit_s,
                        migration_cost=self.migration_cost,
                        preemption_cost=self.preemption_cost, seed=0, threads=1)
        request = view.request(policy, jobs,
                               weights={r.name: self.weight(r, view.now) for r in jobs})
        placements = self._plan(request)
        decision: Decision = {j: list(p) for j, p in placements.items() if p}
        rest = [r for r in waiting if r.name not in decision]
        if rest:
            occ = fresh_occupancy(view)
            by_name = {r.name: r for r in view.active}
            for name in sorted(decision, key=lambda n: by_name[n].placements is None):
                occ.add(by_name[name].job, decision[name])
            for r in rest:
                pl = occ.find(r.job, self._fastest_first(r))
                if pl is not None:
                    occ.add(r.job, pl)
                    decision[r.name] = pl
        return decision

    @staticmethod
    def _fastest_first(r: JobRun) -> list[str] | None:
        thr = r.job.throughput
        return sorted(thr, key=lambda m: (-thr[m], m)) if thr else None

    def _plan(self, request: PlanRequest) -> dict[str, list[Placement]]:
        result = plan(request)
        self.backend_used[result.solver] = self.backend_used.get(result.solver, 0) + 1
        return {a.job: a.placements for a in result.assignments}

