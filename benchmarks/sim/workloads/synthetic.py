"""A synthetic workload: Poisson arrivals, ITP-like gang sizes and durations, a mix of
whole-GPU training gangs, MIG inference slices and shared-GPU jobs.

- inter-arrival times: exponential with mean `mean_interarrival_s`;
- shape: whole-GPU gang with probability 1 - `p_mig` - `p_share`, gang size 1/2/4/8 with
  probabilities 0.70/0.10/0.12/0.08 (ITP: 83% of jobs use one GPU), capped at `max_gang`,
  on one node when at most `gpus_per_node`; MIG inference with
  1, 2 or 3 compute slices; shared GPU with a share in {0.25, 0.5};
- work: log-normal with median `median_work_s` and sigma 1.2 (V100 seconds), clipped to
  [60 s, 3 days]; speeds from a Gavel job type (`speeds.py`).
"""

from __future__ import annotations

import math
import random

from benchmarks.sim.workloads import speeds
from benchmarks.sim.workloads.trace import TraceJob, rebase
from models import Job, MigDemand

_GANGS = ((1, 0.70), (2, 0.10), (4, 0.12), (8, 0.08))


def generate(n: int, *, seed: int = 0, mean_interarrival_s: float = 120.0,
             median_work_s: float = 3600.0, p_mig: float = 0.15, p_share: float = 0.10,
             max_gang: int = 8, gpus_per_node: int = 8,
             arrival_scale: float = 1.0) -> list[TraceJob]:
    """`n` synthetic jobs drawn with `seed` (same seed, same jobs)."""
    rng = random.Random(seed)
    t = 0.0
    out: list[TraceJob] = []
    for i in range(n):
        t += rng.expovariate(1.0 / mean_interarrival_s)
        jt = speeds.draw(rng)
        thr = dict(jt.speeds)
        u = rng.random()
        name = f"syn-{i:05d}"
        if u < p_mig:
            job = Job(name=name, kind="inference",
                      mig=MigDemand(compute_slices=rng.choice((1, 1, 2, 3))), throughput=thr)
        elif u < p_mig + p_share:
            job = Job(name=name, gpu_share=rng.choice((0.25, 0.5)), throughput=thr)
        else:
            gpus = rng.choices([g for g, _ in _GANGS], [p for _, p in _GANGS])[0]
            gpus = max(1, min(gpus, max_gang))
            job = Job(name=name, gpus=gpus, single_node=gpus <= gpus_per_node,
                      throughput=thr)
        work = min(3 * 86400.0, max(60.0, median_work_s * math.exp(rng.gauss(0.0, 1.2))))
        out.append(TraceJob(job=job, submit=round(t, 3), work=round(work, 3),
                            job_type=jt.name))
    return rebase(out, arrival_scale)
