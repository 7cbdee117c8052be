"""Pollux's 8 evaluation workloads (`pollux/workloads/workload-<k>.csv`) as elastic jobs.

Source: petuum/adaptdl @ c793c708 (branch osdi21-artifact), `simulator/workloads/`
(Qiao et al., Pollux, OSDI'21), Apache-2.0: 160 jobs each, sampled from Microsoft's Philly
trace, `name,time,application,num_replicas,batch_size` (arrival in seconds, the GPU count
the user asked for). Their cluster: 16 nodes x 4 GPUs of one model (`pollux-64`).

Mapping of a row:

- a whole-GPU gang of `gpus = num_replicas` (the nominal size, capped at `max_gang`) on
  the study's GPU, `T4-16GB` (Pollux's testbed: AWS g4dn.12xlarge nodes, 4 NVIDIA T4 each;
  the step times were measured there): throughput map `{"T4-16GB": 1.0}`;
- `elastic` (contract 5.1): the allowed sizes are the application's speedup curve
  (`benchmarks/data/pollux.py`) reduced to the sizes where more GPUs buy more throughput
  than every smaller size (a size that is slower than a smaller one is never worth its
  GPUs), plus the nominal size, which the contract requires to be allowed; `min_gpus` and
  `max_gpus` are the smallest and largest of them; `speedup` the curve at those sizes
  (rounded to 6 digits). `ncf` jobs stay fixed at their size: Pollux's own simulator
  never gives NCF more than one replica (`max_replicas = 1`);
- `single_node` only for a fixed gang that fits one node: an elastic gang that may grow
  past 4 GPUs must be allowed to span nodes (the speedup is the packed placement's, see
  the data module; the simulator charges it however the chosen GPUs lie);
- `work`: seconds on the nominal gang, `SAMPLES[app] / throughput_1 / speedup[gpus]` (the
  application's samples to completion at its single-GPU throughput). The user's
  `batch_size` is not modelled: every job runs at the per-GPU batch of its curve.
"""

from __future__ import annotations

import csv
from pathlib import Path

from benchmarks.data import pollux
from benchmarks.sim.workloads.trace import TraceJob, rebase
from models import Job

HEADER = ("name", "time", "application", "num_replicas", "batch_size")

#: The GPU model the step times were measured on (speed 1.0 there).
MODEL = "T4-16GB"

#: Applications Pollux keeps at one replica.
FIXED_APPS = frozenset({"ncf"})


def workload_path(k: int) -> Path:
    """The shared file of Pollux's workload k (1-8)."""
    return pollux.traces_dir().parent / "workloads" / f"workload-{k}.csv"


def allowed_curve(speedup: dict[int, float], nominal: int, max_gang: int) -> dict[int, float]:
    """The sizes an elastic gang may take (module doc): each size up to `max_gang` whose
    speedup beats every smaller size's, plus `nominal`; values rounded to 6 digits."""
    out: dict[int, float] = {}
    best = 0.0
    for n in sorted(speedup):
        if n > max_gang:
            break
        if speedup[n] > best or n == nominal:
            out[n] = round(speedup[n], 6)
        best = max(best, speedup[n])
    return out


def pollux_job(name: str, app: str, nominal: int, *, max_gang: int = 64,
               gpus_per_node: int = 4) -> tuple[Job, float]:
    """The job of one workload row and its work (s on the nominal gang)."""
    curve = pollux.curves()[app]
    if nominal not in curve.speedup:
        raise ValueError(f"{name}: no measured placement of {nominal} GPUs for {app}")
    work_1 = curve.work_s(pollux.SAMPLES[app])
    if app in FIXED_APPS:
        job = Job(name=name, gpus=nominal, single_node=nominal <= gpus_per_node,
                  throughput={MODEL: 1.0})
        return job, work_1 / curve.speedup[nominal]
    sizes = allowed_curve(curve.speedup, nominal, max_gang)
    job = Job.model_validate({
        "name": name, "gpus": nominal, "single_node": False, "throughput": {MODEL: 1.0},
        "elastic": {"min_gpus": min(sizes), "max_gpus": max(sizes),
                    "speedup": {str(n): s for n, s in sizes.items()}}})
    return job, work_1 / sizes[nominal]


def load_pollux(path: Path, *, limit: int | None = None, seed: int = 0, max_gang: int = 64,
                gpus_per_node: int = 4, arrival_scale: float = 1.0) -> list[TraceJob]:
    """The first `limit` jobs of a Pollux workload file (`seed` is unused: no draw)."""
    del seed
    with path.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: (float(r["time"]), r["name"]))
    out: list[TraceJob] = []
    for row in rows[:limit]:
        app = row["application"]
        nominal = max(1, min(int(row["num_replicas"]), max_gang))
        job, work = pollux_job(row["name"], app, nominal, max_gang=max_gang,
                               gpus_per_node=gpus_per_node)
        out.append(TraceJob(job=job, submit=float(row["time"]), work=round(work, 3),
                            job_type=app))
    return rebase(out, arrival_scale)
