"""Microsoft ITP traces (`itp/clusterNN.csv`: job_id,submission_time,duration,num_gpu).

Source: microsoft/elasticflow-traces @ 277ed24 (Gu et al., ElasticFlow, ASPLOS'23), MIT.
Mapping: every row is a training gang of `num_gpu` whole GPUs (capped at `max_gang`, the
largest whole-GPU pool of one model in the simulated cluster, so that every job can
complete); gangs of at most `gpus_per_node` GPUs stay on one node (`single_node`), larger
ones span nodes of one model. `duration` is taken as the job's run time on V100s, so
`work = duration` in V100-seconds; its speeds on other models follow its Gavel job type
(`speeds.py`, drawn with `seed`). The jobs are the first `limit` rows by arrival.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

from benchmarks.sim.workloads import speeds
from benchmarks.sim.workloads.trace import TraceJob, rebase
from models import Job

HEADER = ("job_id", "submission_time", "duration", "num_gpu")


def load_itp(path: Path, *, limit: int | None = None, seed: int = 0, max_gang: int = 64,
             gpus_per_node: int = 8, arrival_scale: float = 1.0) -> list[TraceJob]:
    """The first `limit` jobs of an ITP trace file as simulator jobs."""
    rng = random.Random(seed)
    out: list[TraceJob] = []
    with path.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["submission_time"]))
    for row in rows[:limit]:
        gpus = max(1, min(int(row["num_gpu"]), max_gang))
        jt = speeds.draw(rng)
        job = Job(name=f"itp-{len(out):05d}", gpus=gpus, single_node=gpus <= gpus_per_node,
                  throughput=dict(jt.speeds))
        work = max(1.0, float(row["duration"]))
        out.append(TraceJob(job=job, submit=float(row["submission_time"]), work=work,
                            job_type=jt.name))
    return rebase(out, arrival_scale)
