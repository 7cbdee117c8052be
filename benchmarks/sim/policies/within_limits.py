"""Baselines held to the tenants' quota limits: what a simple order does within them.

A quota limit is a hard rule (contract 5.3, Q1): a tenant at its limit may not borrow
more, whatever sits idle. `fifo_firstfit` ignores the limits, so its JCT on a cluster
with limits is not one a policy within them could reach. These two keep every running job
where it runs (no preemption, no reclaim) and skip a waiting job while its tenant's usage
plus its size would pass its limit (`"*"` key; unlimited without one):

- `fifo_limits` (`FifoWithinLimits`): `fifo_firstfit` within the limits, arrival order,
  first fit in the cluster file's order;
- `srpt_limits` (`SrptWithinLimits`): first the jobs within their tenant's guarantee, then
  the borrowing ones up to the limit, each pass shortest remaining run time first (the
  remaining work over the job's best speed), best fit on its fastest model first
  (`policies.gpuplan.best_fit`): the order that minimises mean JCT on one machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.sim.engine import Decision, JobRun, RoundView
from benchmarks.sim.policies.base import keep_running
from benchmarks.sim.policies.gpuplan import best_fit
from benchmarks.sim.tenants import guarantee, limit
from models.rules import HOST_TOL


@dataclass
class FifoWithinLimits:
    """`fifo_firstfit` within the tenants' limits (module doc)."""

    name: str = "fifo_limits"

    def schedule(self, view: RoundView) -> Decision:
        """Keep every running job; place waiting ones first fit in arrival order while
        their tenant stays within its limit."""
        quotas = view.cluster.quotas
        occ, decision, usage = keep_running(view)
        for r in sorted(view.waiting, key=lambda r: (r.submit, r.name)):
            t = r.job.tenant
            if usage.get(t, 0.0) + r.size > limit(quotas, t) + HOST_TOL:
                continue
            pl = occ.find(r.job)
            if pl is not None:
                occ.add(r.job, pl)
                decision[r.name] = pl
                usage[t] = usage.get(t, 0.0) + r.size
        return decision


def remaining_time(r: JobRun) -> float:
    """A job's remaining run time on its fastest model (speed 1 without a throughput)."""
    best = max((r.job.throughput or {}).values(), default=1.0)
    return r.remaining / max(best, 1e-9)


@dataclass
class SrptWithinLimits:
    """Guarantees first, then borrowing, shortest remaining time first (module doc)."""

    name: str = "srpt_limits"

    def schedule(self, view: RoundView) -> Decision:
        """Keep every running job; place waiting ones in two passes (within the
        guarantee, then within the limit), shortest remaining run time first."""
        quotas = view.cluster.quotas
        occ, decision, usage = keep_running(view)
        order = sorted(view.waiting, key=lambda r: (remaining_time(r), r.submit, r.name))
        for cap in (guarantee, limit):
            for r in order:
                t = r.job.tenant
                if r.name in decision or usage.get(t, 0.0) + r.size > cap(quotas, t) + HOST_TOL:
                    continue
                thr = r.job.throughput
                pl = best_fit(occ, r.job, sorted(thr, key=lambda m: (-thr[m], m)) if thr else None)
                if pl is not None:
                    occ.add(r.job, pl)
                    decision[r.name] = pl
                    usage[t] = usage.get(t, 0.0) + r.size
        return decision
