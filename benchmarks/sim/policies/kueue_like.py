"""`kueue_like`: quota queues with borrowing and reclaim, as Kueue admits workloads.

One queue per tenant (a Kueue ClusterQueue with one LocalQueue), every queue in one
cohort; a tenant's nominal quota is its guarantee on the `"*"` key of `Cluster.quotas`
and its borrowing limit is its limit there (none: it may borrow every idle GPU). Tenants
without a quota have a nominal quota of 0. Per round, on the running jobs as they are:

1. Admission within the nominal quota, in arrival order (each queue FIFO; across queues
   the heads that do not borrow come first, as Kueue orders them): a waiting job whose
   tenant's usage plus its size stays within the guarantee is placed first fit. When it
   does not fit, it reclaims: running jobs of *other* tenants that borrow (usage above
   their guarantee) are candidates, newest admitted first; candidates are taken off the
   cluster one by one until the job fits, then those not needed are put back (the last
   taken first, Kueue's minimal victim set); no fit even with every candidate off: no
   preemption. A preempted job goes back to its queue.
2. Borrowing: the remaining waiting jobs, in arrival order, are placed first fit on idle
   GPUs while their tenant's usage plus their size stays within its limit. Borrowing
   never preempts.

Queues are best-effort FIFO (Kueue's default `BestEffortFIFO`): a job that cannot be
admitted does not block the ones behind it. Placement is first fit in the cluster file's
order, as `fifo_firstfit`; running jobs are never moved. Not modelled: Kueue's priorities
within a queue, `withinClusterQueue` preemption, fair sharing weights, flavor fungibility
(a tenant's quota here covers every model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.sim.engine import Decision, JobRun, RoundView
from benchmarks.sim.occupancy import Occupancy
from benchmarks.sim.policies.base import keep_running
from benchmarks.sim.tenants import guarantee, limit
from models.rules import HOST_TOL


@dataclass
class KueueLike:
    """FIFO per tenant queue, nominal quota first, borrowing, reclaim of borrowed GPUs."""

    name: str = "kueue_like"
    #: job name -> the rank of its last admission (the newest borrowed work, the highest
    #: rank, is preempted first; ties of time go by admission order).
    admitted_at: dict[str, int] = field(default_factory=dict)
    admissions: int = 0

    def schedule(self, view: RoundView) -> Decision:
        """The two admission passes of the module doc on the current placements."""
        quotas = view.cluster.quotas
        occ, decision, usage = keep_running(view)
        running = {r.name: r for r in view.running}
        waiting = sorted(view.waiting, key=lambda r: (r.submit, r.name))
        for r in waiting:
            t = r.job.tenant
            if usage.get(t, 0.0) + r.size > guarantee(quotas, t) + HOST_TOL:
                continue
            if self._admit(r, occ, decision, usage):
                continue
            for v in self._reclaim(r, occ, running, usage, view):
                del decision[v.name]
                del running[v.name]
                usage[v.job.tenant] -= v.size
            self._admit(r, occ, decision, usage)
        for r in waiting:
            t = r.job.tenant
            if r.name in decision or usage.get(t, 0.0) + r.size > limit(quotas, t) + HOST_TOL:
                continue
            self._admit(r, occ, decision, usage)
        return decision

    def _admit(self, r: JobRun, occ: Occupancy, decision: Decision,
               usage: dict[str, float]) -> bool:
        """Place `r` first fit if it fits now; True when placed."""
        pl = occ.find(r.job)
        if pl is None:
            return False
        occ.add(r.job, pl)
        decision[r.name] = pl
        usage[r.job.tenant] = usage.get(r.job.tenant, 0.0) + r.size
        self.admissions += 1
        self.admitted_at[r.name] = self.admissions
        return True

    def _reclaim(self, r: JobRun, occ: Occupancy, running: dict[str, JobRun],
                 usage: dict[str, float], view: RoundView) -> list[JobRun]:
        """The borrowed jobs to preempt so that `r` fits (empty: none, or no set does);
        they are already off `occ` when returned."""
        quotas = view.cluster.quotas
        cands = sorted((v for v in running.values()
                        if v.job.tenant != r.job.tenant
                        and usage.get(v.job.tenant, 0.0) > guarantee(quotas, v.job.tenant)
                        + HOST_TOL),
                       key=lambda v: (-self.admitted_at.get(v.name, -1), v.name))
        left = dict(usage)
        taken: list[JobRun] = []
        for v in cands:
            t = v.job.tenant
            if left[t] <= guarantee(quotas, t) + HOST_TOL:
                continue  # no longer borrowing once the newer ones are off
            occ.remove(v.name)
            left[t] -= v.size
            taken.append(v)
            if occ.find(r.job) is not None:
                break
        else:
            for v in reversed(taken):
                occ.add(v.job, v.placements or [])
            return []
        for v in reversed(taken[:-1]):
            occ.add(v.job, v.placements or [])
            if occ.find(r.job) is None:
                occ.remove(v.name)
            else:
                taken.remove(v)
        return taken
