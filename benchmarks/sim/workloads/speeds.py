"""Per-job speeds on our catalog models, drawn from Gavel's measured throughputs.

Source: `gavel/gavel_simulation_throughputs.json` (stanford-futuredata/gavel @ c4fa400,
`scheduler/simulation_throughputs.json`): steps/s of 26 single-GPU job types (ResNet-18/50,
Transformer, LM, Recommendation, A3C, CycleGAN at several batch sizes) measured alone on
K80, P100 and V100.

Each simulated job draws one job type uniformly (seeded). Its speeds are relative to its
own V100 speed (`V100-32GB` = 1.0, so `remaining_work` is seconds on a V100 gang); the
models Gavel did not measure are extrapolated from the job's measured generation gain
`r = v100 / p100` (how much this job profits from a newer GPU, 0.45 for the input-bound
Recommendation models up to 1.85 for CycleGAN):

    A100 = clamp(r, 1.0, 2.2)            (one generation newer than V100)
    H100 = A100 * clamp(r, 1.0, 2.2)     (two generations)
    T4   = min(1.0, p100 / v100)         (a T4 trains at about a P100's speed)

so compute-bound jobs gain up to 4.8x on an H100 and input-bound ones nothing, which is
the heterogeneity Gavel exploits. `A100-SXM4-40GB/80GB` share the A100 speed, H100/H200
share the H100 speed, L40S takes the A100 speed, A30 half of it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from benchmarks.paths import data_dir

#: Clamp of the per-generation gain used in the extrapolation.
GAIN_MIN, GAIN_MAX = 1.0, 2.2


@dataclass(frozen=True)
class JobType:
    """A Gavel job type with its speeds on our catalog models (V100 = 1.0)."""

    name: str
    speeds: dict[str, float]


def _throughputs_path() -> Path:
    return data_dir() / "gavel" / "gavel_simulation_throughputs.json"


def extrapolate(name: str, p100: float, v100: float) -> JobType:
    """The speeds of a job type measured at `p100` / `v100` steps/s (see module doc)."""
    r = v100 / p100
    g = min(GAIN_MAX, max(GAIN_MIN, r))
    a100 = g
    h100 = a100 * g
    speeds = {
        "V100-32GB": 1.0,
        "T4-16GB": round(min(1.0, p100 / v100), 4),
        "A100-SXM4-40GB": round(a100, 4),
        "A100-SXM4-80GB": round(a100, 4),
        "L40S-48GB": round(a100, 4),
        "A30-24GB": round(a100 / 2, 4),
        "H100-SXM5-80GB": round(h100, 4),
        "H100-NVL-94GB": round(h100, 4),
        "H200-141GB": round(h100, 4),
    }
    return JobType(name=name, speeds=speeds)


@cache
def job_types(path: Path | None = None) -> tuple[JobType, ...]:
    """Every single-GPU Gavel job type, in file order, with extrapolated speeds."""
    raw = json.loads((path or _throughputs_path()).read_text())
    out = []
    for key, row in raw["v100"].items():
        if not key.endswith(", 1)"):
            continue
        name = key.strip("()").rsplit(",", 1)[0].strip("'")
        out.append(extrapolate(name, raw["p100"][key]["null"], row["null"]))
    return tuple(out)


def draw(rng: random.Random) -> JobType:
    """One job type drawn uniformly with `rng`."""
    return rng.choice(job_types())
