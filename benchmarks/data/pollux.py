"""Speedup curves and job sizes from Pollux's measured step times (Qiao et al., OSDI'21).

Source: `pollux/traces/<app>/placements.csv` and `scalability.csv` (petuum/adaptdl @
c793c708, `simulator/traces/`, Apache-2.0; see ../shared/data/README.md). Each row is one
measured configuration of one of six training jobs (bert, cifar10, deepspeech2, imagenet,
ncf, yolov3): `placement` is one digit per node, the GPUs used there (`44` = 2 nodes x 4
GPUs; the file lists each placement once, as its lexicographically smallest rotation),
`local_bsz` the per-GPU batch and `step_time` the seconds of one step; `scalability.csv`
holds wider runs as `num_nodes, num_replicas` (up to 16 nodes, 64 GPUs).

Derivation, per application:

1. The per-GPU batch b* the data covers best: the `local_bsz` measured in the most rows of
   both files together (ties: the largest of them, the most efficient one that every
   placement has).
2. Throughput on a placement at b*: `n * b* / step_time` samples per second, n the GPUs of
   the placement.
3. The placement of n GPUs is the packed one on 4-GPU nodes (as in Pollux's 16 x 4
   cluster): `min(n, 4)` GPUs on each node from the first, e.g. 6 -> nodes of 4 and 2,
   which the file lists as `24`. For n <= 16 (at most 4 nodes) it is read from
   `placements.csv`; wider ones from `scalability.csv`'s row with `ceil(n / 4)` nodes and
   n replicas. Only sizes with such a measured row get a point: no interpolation across
   placements (Pollux's own simulator interpolates; we leave unmeasured sizes out, so the
   contract's allowed sizes are exactly the measured ones).
4. `speedup[n] = throughput(n) / throughput(1)` (so `speedup[1] = 1`).

Job size. The workloads give no durations (Pollux runs each job until its validation
trace reaches the application's last epoch). `SAMPLES` is the work of each application in
training samples: Pollux's epoch count (`simulator/applications.py`: bert 2, cifar10 100,
deepspeech2 80, imagenet 90, ncf 10, yolov3 50) times the samples per epoch, read as
`iteration x batch` at the last epoch of the validation trace of the smallest measured
batch (`simulator/traces/<app>/validation-<b>.csv` at petuum/adaptdl @ de25dcc9: bert-12
14,774 x 12; cifar10-256 20,377 x 256; deepspeech2-160 4,041 x 160; imagenet-200
576,525 x 200; ncf-256 194,174 x 256; yolov3-8 103,444 x 8). A job's work at speed 1 is
`SAMPLES[app] / throughput(1)` seconds on one GPU. This leaves out statistical efficiency:
in Pollux's simulator a job with a larger batch needs more samples, so our fixed-batch
jobs are somewhat shorter than theirs, and Pollux's own batch-size tuning is not modelled.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from benchmarks.paths import data_dir

#: GPUs per node in Pollux's testbed and simulated cluster.
NODE_GPUS = 4

#: The six applications of Pollux's workloads.
APPLICATIONS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

#: Training samples a job processes to completion (see the module doc for each figure).
SAMPLES: dict[str, int] = {
    "bert": 14_774 * 12,
    "cifar10": 20_377 * 256,
    "deepspeech2": 4_041 * 160,
    "imagenet": 576_525 * 200,
    "ncf": 194_174 * 256,
    "yolov3": 103_444 * 8,
}


class PolluxDataError(ValueError):
    """A Pollux trace folder that is missing or lacks the rows a curve needs."""


@dataclass(frozen=True)
class Measurement:
    """One measured configuration: GPUs per node, per-GPU batch, step time (s)."""

    placement: tuple[int, ...]
    local_bsz: int
    step_time: float

    @property
    def gpus(self) -> int:
        """GPUs of the placement."""
        return sum(self.placement)

    @property
    def throughput(self) -> float:
        """Samples per second: n * local_bsz / step_time."""
        return self.gpus * self.local_bsz / self.step_time


@dataclass(frozen=True)
class SpeedupCurve:
    """An application's speedup curve and single-GPU throughput at its batch b*."""

    app: str
    local_bsz: int
    throughput_1: float
    speedup: dict[int, float]

    def work_s(self, samples: float) -> float:
        """Seconds on one GPU to process `samples`."""
        return samples / self.throughput_1


def traces_dir() -> Path:
    """The shared folder of Pollux's per-application traces."""
    return data_dir() / "pollux" / "traces"


def packed_placement(n: int) -> tuple[int, ...]:
    """n GPUs packed on 4-GPU nodes, as the trace files name it (smallest rotation)."""
    nodes = [NODE_GPUS] * (n // NODE_GPUS) + ([n % NODE_GPUS] if n % NODE_GPUS else [])
    return min(tuple(nodes[i:] + nodes[:i]) for i in range(len(nodes)))


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise PolluxDataError(f"cannot read {path}: {e.strerror or e}") from e


def read_measurements(folder: Path) -> list[Measurement]:
    """Every row of `placements.csv` and `scalability.csv` in `folder`.

    A scalability row with k nodes and n replicas is the packed placement of n GPUs when
    k = ceil(n / 4); other rows (fewer GPUs per node) become an even spread over k nodes,
    which no curve reads.
    """
    out = [Measurement(tuple(int(c) for c in r["placement"]), int(r["local_bsz"]),
                       float(r["step_time"]))
           for r in _read(folder / "placements.csv")]
    for r in _read(folder / "scalability.csv"):
        k, n = int(r["num_nodes"]), int(r["num_replicas"])
        pl = packed_placement(n) if k == math.ceil(n / NODE_GPUS) else (
            tuple(n // k + (i < n % k) for i in range(k)))
        out.append(Measurement(pl, int(r["local_bsz"]), float(r["step_time"])))
    return out


def best_local_bsz(rows: list[Measurement]) -> int:
    """The per-GPU batch measured in the most rows (ties: the largest)."""
    if not rows:
        raise PolluxDataError("no measurement")
    count = Counter(m.local_bsz for m in rows)
    return max(count, key=lambda b: (count[b], b))


def derive_curve(app: str, rows: list[Measurement]) -> SpeedupCurve:
    """The speedup curve of one application from its measurements (module doc, 1-4)."""
    b = best_local_bsz(rows)
    at_b = {m.placement: m for m in rows if m.local_bsz == b}
    one = at_b.get((1,))
    if one is None:
        raise PolluxDataError(f"{app}: no single-GPU row at local_bsz {b}")
    speedup: dict[int, float] = {}
    for n in range(1, 16 * NODE_GPUS + 1):
        m = at_b.get(packed_placement(n))
        if m is not None:
            speedup[n] = m.throughput / one.throughput
    return SpeedupCurve(app=app, local_bsz=b, throughput_1=one.throughput, speedup=speedup)


@cache
def curves(folder: Path | None = None) -> dict[str, SpeedupCurve]:
    """The speedup curve of every application in the traces folder (default: shared)."""
    root = folder or traces_dir()
    if not root.is_dir():
        raise PolluxDataError(f"{root}: no Pollux traces folder")
    return {app: derive_curve(app, read_measurements(root / app)) for app in APPLICATIONS
            if (root / app).is_dir()}
