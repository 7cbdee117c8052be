"""`afs_elastic`: AFS-L, elastic resource sharing (Hwang et al., NSDI'21).

AFS hands out GPUs one step at a time, each next step to the job whose throughput gains
the most per GPU relative to its remaining work; with a job's throughput in units of its
own one-GPU throughput and its remaining work W_j in seconds on one GPU
(`remaining_on(job, 1)`, contract 5.1), a step from n to n' GPUs scores

    score_j = (speedup_j[n'] - speedup_j[n]) / (n' - n) / W_j        (speedup_j[0] = 0)

i.e. the fraction of its remaining work one more GPU finishes per second. A waiting job
steps from 0 to its smallest allowed size, a running one to its next allowed size that is
faster than its current one; a fixed gang has one step, 0 -> gpus (`speedup[n] = n`).
Steps go, best score first (earliest arrival, then name, on ties), while the cluster has
GPUs for them. Placement: jobs that keep their size keep their GPUs; the others are placed
packed (`packed_fit`), largest first. As in AFS, the allocation is recomputed when the set
of jobs changes (an arrival or a completion), not at every round: between those events the
jobs keep their GPUs, so a resize is paid for only when the competition changed (and
when nothing runs, so that a job the last allocation could not place is tried again).
Jobs are preemptible: a running job that gets no step goes back to the queue.
AFS sizes whole-GPU gangs; jobs of the other shapes (a GPU share, a MIG slice) come after
them in arrival order, each keeping its place when it runs or placed first fit into what
the gangs leave.

This is AFS's rule as issue 15 states it: the greedy by marginal throughput per remaining
work. The paper's AFS-L corrects that greedy for its optimism about the resources the
running jobs will have later; the correction is not modelled here (benchmarks/ELASTIC.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.sim.engine import Decision, JobRun, RoundView
from benchmarks.sim.occupancy import CapacityError
from benchmarks.sim.policies.base import fresh_occupancy, packed_fit
from models.rules import allowed_sizes, remaining_on, speedup


def one_gpu_work(r: JobRun) -> float:
    """The job's remaining work in seconds on one GPU (at least 1 s)."""
    job = r.job.model_copy(update={"remaining_work": max(r.remaining, 0.0)})
    return max(1.0, remaining_on(job, 1) or 0.0)


def next_step(r: JobRun, n: int) -> int | None:
    """The next size after n: the smallest allowed size above n that is faster (None when
    there is none)."""
    cur = speedup(r.job, n) if n > 0 else 0.0
    return next((m for m in allowed_sizes(r.job) if m > n and speedup(r.job, m) > cur), None)


def afs_sizes(jobs: list[JobRun], gpus: int) -> dict[str, int]:
    """The AFS-L allocation: GPUs per job (module doc); jobs left out are absent."""
    size = {r.name: 0 for r in jobs}
    work = {r.name: one_gpu_work(r) for r in jobs}
    free = gpus
    while True:
        best: tuple[float, float, str, int] | None = None
        for r in jobs:
            n = size[r.name]
            m = next_step(r, n)
            if m is None or m - n > free:
                continue
            gain = speedup(r.job, m) - (speedup(r.job, n) if n > 0 else 0.0)
            score = gain / (m - n) / work[r.name]
            key = (-score, r.submit, r.name, m)
            if best is None or key < best:
                best = key
        if best is None:
            return {k: v for k, v in size.items() if v > 0}
        _, _, name, m = best
        free -= m - size[name]
        size[name] = m


@dataclass
class AfsElastic:
    """AFS-L: marginal throughput per remaining work, recomputed on arrivals/completions."""

    name: str = "afs_elastic"
    last_jobs: frozenset[str] = field(default_factory=frozenset)

    def schedule(self, view: RoundView) -> Decision:
        """Keep the allocation while the job set is unchanged; else recompute it."""
        jobs = view.active
        names = frozenset(r.name for r in jobs)
        if names == self.last_jobs and view.running:
            return {r.name: list(r.placements) for r in view.running if r.placements}
        self.last_jobs = names
        gpus = sum(1 for g in view.occupancy.gpus.values() if not g.mig)
        sizes = afs_sizes([r for r in jobs if r.job.shape == "whole"], gpus)
        occ = fresh_occupancy(view)
        decision: Decision = {}
        for r in view.running:
            if r.placements is not None and sizes.get(r.name) == len(r.placements):
                occ.add(r.job, r.placements)
                decision[r.name] = list(r.placements)
        by_name = {r.name: r for r in jobs}
        rest = sorted((n for n in sizes if n not in decision),
                      key=lambda n: (-sizes[n], by_name[n].submit, n))
        for name in rest:
            r = by_name[name]
            pl = packed_fit(occ, r.job, sizes[name])
            if pl is not None:
                occ.add(r.job, pl)
                decision[name] = pl
        for r in sorted((r for r in jobs if r.job.shape != "whole"),
                        key=lambda r: (r.placements is None, r.submit, r.name)):
            if r.placements is not None:
                try:
                    occ.add(r.job, r.placements)
                    decision[r.name] = list(r.placements)
                    continue
                except CapacityError:
                    pass
            pl = occ.find(r.job)
            if pl is not None:
                occ.add(r.job, pl)
                decision[r.name] = pl
        return decision
