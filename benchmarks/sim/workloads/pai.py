"""Alibaba PAI 2023 pods (`openb_pod_list_*.csv`) as simulator jobs.

Source: alibaba/clusterdata @ 7a6c496e, `cluster-trace-gpu-v2023` (Weng et al., ATC'23).
Mapping of a pod `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time`:

- CPU-only pods (`num_gpu = 0`) and pods without a deletion time are dropped;
- `gpu_milli = 1000`: a gang of `num_gpu` whole GPUs on one node (training; at most
  `gpus_per_node` GPUs);
- `gpu_milli < 1000` and latency-sensitive (`qos = LS`) with `gpu_milli <= mig_max_milli`:
  a small inference job on a MIG slice with `ceil(7 * gpu_milli / 1000)` compute slices;
- other fractional pods: a shared GPU, `gpu_share = gpu_milli / 1000` (training when
  `qos` is BE, inference otherwise);
- `work = deletion_time - creation_time` (at least 1 s, at most `max_duration_s`: many
  latency-sensitive pods are services that live until the end of the trace), in V100
  seconds; speeds per model from a Gavel job type drawn with `seed` (`speeds.py`).
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

from benchmarks.sim.workloads import speeds
from benchmarks.sim.workloads.trace import TraceJob, rebase
from models import Job, MigDemand

HEADER = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


def _job(row: dict[str, str], name: str, jt: speeds.JobType, mig_max_milli: int,
         max_gang: int) -> Job:
    milli = int(row["gpu_milli"])
    num = int(row["num_gpu"])
    ls = row.get("qos", "") == "LS"
    thr = dict(jt.speeds)
    if milli >= 1000 or num > 1:
        return Job(name=name, gpus=min(num, max_gang), throughput=thr)
    if ls and milli <= mig_max_milli:
        slices = max(1, math.ceil(7 * milli / 1000))
        return Job(name=name, kind="inference", mig=MigDemand(compute_slices=slices),
                   throughput=thr)
    return Job(name=name, kind="inference" if ls else "training", gpu_share=milli / 1000,
               throughput=thr)


def load_pai(path: Path, *, limit: int | None = None, seed: int = 0,
             mig_max_milli: int = 500, max_duration_s: float = 2 * 86400.0,
             max_gang: int = 8, gpus_per_node: int = 8,
             arrival_scale: float = 1.0) -> list[TraceJob]:
    """The first `limit` GPU pods of a PAI pod list as simulator jobs."""
    rng = random.Random(seed)
    out: list[TraceJob] = []
    with path.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["creation_time"] or 0))
    for row in rows:
        if limit is not None and len(out) >= limit:
            break
        if int(row["num_gpu"]) == 0 or int(row["gpu_milli"]) == 0 or not row["deletion_time"]:
            continue
        jt = speeds.draw(rng)
        job = _job(row, f"pai-{len(out):05d}", jt, mig_max_milli, min(gpus_per_node, max_gang))
        work = min(max_duration_s,
                   max(1.0, float(row["deletion_time"]) - float(row["creation_time"])))
        out.append(TraceJob(job=job, submit=float(row["creation_time"]), work=work,
                            job_type=jt.name))
    return rebase(out, arrival_scale)
