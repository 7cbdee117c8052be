"""The simulator's job record and the loaders' shared helpers."""

from __future__ import annotations

from dataclasses import dataclass, replace

from models import Job


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace.

    - `job`: its demand shape, kind, tenant and throughput map (no running state);
    - `submit`: arrival time (s);
    - `work`: seconds of work at relative speed 1.0 (a V100 gang of its size, see
      `speeds.py`): running on model m it completes after `work / speed(m)` seconds;
    - `job_type`: the Gavel job type its speeds come from.
    """

    job: Job
    submit: float
    work: float
    job_type: str = ""

    @property
    def name(self) -> str:
        return self.job.name


def rebase(jobs: list[TraceJob], arrival_scale: float = 1.0) -> list[TraceJob]:
    """Sort by arrival, shift the first arrival to t=0 and scale inter-arrival times.

    `arrival_scale` < 1 compresses arrivals (a heavier load on the same cluster).
    """
    if not jobs:
        return []
    jobs = sorted(jobs, key=lambda j: (j.submit, j.name))
    t0 = jobs[0].submit
    return [replace(j, submit=round((j.submit - t0) * arrival_scale, 3)) for j in jobs]
