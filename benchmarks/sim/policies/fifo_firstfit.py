"""`fifo_firstfit`: what a general-purpose scheduler does.

Jobs are served in arrival order; each goes to the first node (in the cluster file's order)
with enough free eligible GPUs; a job that does not fit is skipped and later ones may
backfill (as the Kubernetes default scheduler does; strict FIFO blocking would be worse).
Running jobs are never preempted, moved or repacked; GPU models are not told apart.
"""

from __future__ import annotations

from benchmarks.sim.engine import Decision, RoundView
from benchmarks.sim.policies.base import admit_and_place


class FifoFirstFit:
    """FIFO order, first fit, no preemption, no heterogeneity awareness."""

    name = "fifo_firstfit"

    def schedule(self, view: RoundView) -> Decision:
        """Keep every running job; place waiting ones first-fit in arrival order."""
        return admit_and_place(view, [*view.running, *view.waiting])
