"""`tiresias_las`: discretised two-dimensional least-attained-service (Tiresias, NSDI'19).

A job's attained service is its GPU-time so far (GPUs x seconds held, 2D-LAS). Jobs fall
into K queues by attained service (thresholds `thresholds`, GPU-seconds): queue 0 below
the first threshold, and so on. Jobs are served queue by queue, FIFO by arrival inside a
queue (Tiresias's discretised LAS); in that order a job is admitted while its GPUs fit the
cluster's total (heterogeneity-agnostic, as Tiresias), and running jobs that are not
admitted are preempted when an admitted job needs their GPUs. Placement is first fit.
Not modelled: Tiresias's profile-guided consolidation and its starvation-promotion knob.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.sim.engine import Decision, JobRun, RoundView
from benchmarks.sim.policies.base import admit_and_place, admit_by_count


@dataclass
class TiresiasLas:
    """Discretised 2D-LAS with preemption."""

    thresholds: Sequence[float] = (3600.0, 8 * 3600.0)
    name: str = "tiresias_las"

    def queue(self, r: JobRun) -> int:
        """The queue index of a job: how many thresholds its attained service passed."""
        return sum(r.attained >= t for t in self.thresholds)

    def schedule(self, view: RoundView) -> Decision:
        """Admit by (queue, arrival), keep admitted running jobs, place the rest."""
        order = sorted(view.active, key=lambda r: (self.queue(r), r.submit, r.name))
        return admit_and_place(view, order, admit_by_count(view, order))
