"""Microsoft Philly jobs with their virtual clusters as tenants (`pollux/philly.csv`).

Source: petuum/adaptdl @ c793c70 (osdi21-artifact), `simulator/traces/philly.csv`, as the
Pollux authors extracted it from msr-fiddle/philly-traces (Jeon et al., ATC'19),
Apache-2.0. Columns `timestamp,duration,num_gpus,gpu_time,cluster`; 82,247 jobs of
Sep-Dec 2017 in 15 virtual clusters.

Mapping, as for the ITP loader (`itp.py`):

- the jobs are taken in arrival order (`timestamp`, then file order): the `skip` first are
  dropped, the next `limit` kept (the window);
- every row is a training gang of `num_gpus` whole GPUs, capped at `max_gang` (the largest
  whole-GPU pool of one model of the simulated cluster, so that every job can complete);
  gangs of at most `gpus_per_node` GPUs stay on one node (`single_node`);
- `cluster` (the virtual cluster, one per team in Philly) is the job's `tenant`;
- `duration` is taken as the run time on V100s, so `work = duration` in V100-seconds,
  clipped to [1 s, `max_duration_s`] (default 2 days: the trace's tail runs for up to
  53 days, longer than any window a simulation replays; the cap bounds one job's hold on
  its GPUs, as a job time limit would); speeds on the other models follow a Gavel job
  type drawn with `seed` (`speeds.py`).

Philly's own GPUs (12 and 24 GB Pascal-generation cards) are not modelled: the jobs run on
the simulated cluster's models at their drawn speeds, exactly as the ITP jobs do.
"""

from __future__ import annotations

import csv
import random
from datetime import datetime
from pathlib import Path

from benchmarks.sim.workloads import speeds
from benchmarks.sim.workloads.trace import TraceJob, rebase
from models import Job

HEADER = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")

#: Default cap of one job's work (V100-seconds), see the module doc.
MAX_DURATION_S = 2 * 86400.0


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.strip()).timestamp()


def load_philly(path: Path, *, limit: int | None = None, seed: int = 0, max_gang: int = 64,
                gpus_per_node: int = 8, arrival_scale: float = 1.0, skip: int = 0,
                max_duration_s: float = MAX_DURATION_S) -> list[TraceJob]:
    """The jobs `skip` .. `skip + limit` (in arrival order) of a Philly trace file."""
    rng = random.Random(seed)
    with path.open(newline="") as f:
        rows = [(_seconds(r["timestamp"]), i, r) for i, r in enumerate(csv.DictReader(f))]
    rows.sort(key=lambda e: (e[0], e[1]))
    window = rows[skip:] if limit is None else rows[skip: skip + limit]
    out: list[TraceJob] = []
    for submit, _, row in window:
        gpus = max(1, min(int(row["num_gpus"]), max_gang))
        tenant = row["cluster"].strip() or "default"
        jt = speeds.draw(rng)
        job = Job(name=f"philly-{len(out):05d}", gpus=gpus, tenant=tenant,
                  single_node=gpus <= gpus_per_node, throughput=dict(jt.speeds))
        work = min(max_duration_s, max(1.0, float(row["duration"])))
        out.append(TraceJob(job=job, submit=submit, work=work, job_type=jt.name))
    return rebase(out, arrival_scale)
