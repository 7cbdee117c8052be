"""Co-location interference factors derived from Gavel's measured pair throughputs.

Source: `gavel/gavel_simulation_throughputs.json` of the shared data folder (see its
README), copied from stanford-futuredata/gavel @ c4fa40097339e9608ab71fd64c8bdea96a5e4a4c,
`scheduler/simulation_throughputs.json` (MIT licence; Narayanan et al., "Heterogeneity-Aware
Cluster Scheduling Policies for Deep Learning Workloads", OSDI'20). For each GPU type
(`k80`, `p100`, `v100`) and job type, written `"('<model> (batch size <b>)', <scale>)"`,
the file holds the job's throughput in steps/s alone (key `"null"`) and, for each other
job type, the pair `[this job's, the other job's]` throughputs measured while both run on
one GPU (Gavel's space sharing).

Derivation (contract 5.2: a job of class a runs at `speed` times its own speed while it
shares a GPU with a job of class b):

    factor(a, b) on GPU type t  =  throughput of a beside b  /  throughput of a alone
                                =  data[t][a][b][0] / data[t][a]["null"]

for the single-GPU job types (scale 1: only they share a GPU in the data). The class of a
job type is its name without the scale, e.g. `ResNet-50 (batch size 64)`. Two cases need
a rule the data does not give:

- a pair measured at 0 steps/s (40 pairs on the V100: the two did not fit one GPU's
  memory together) gets `MIN_FACTOR`: the contract needs a factor > 0, and 1% of a job's
  speed makes that co-location worthless to every planner;
- factors are clipped to the contract's (0, 2]; none of the data's exceeds 1.

The contract's factors are per class pair, not per GPU model, so one request uses one GPU
type's matrix: `interference_pairs(gpu)` (V100 by default, the catalog's `V100-32GB`).
Note that the factor compares a job sharing a GPU with the same job owning it: it already
contains the halving of the GPU that the value's `gpu_share` also counts, so a plan's
value under these factors is a conservative (low) estimate of co-located throughput.
"""

from __future__ import annotations

import ast
import json
from functools import cache
from pathlib import Path
from typing import Any

from benchmarks.paths import data_dir
from models.request import MAX_INTERFERENCE_SPEED, InterferencePair

#: Factor of a pair Gavel measured at 0 steps/s (could not run together).
MIN_FACTOR = 0.01
#: The GPU types of the file, and the catalog model each stands for (None: not in it).
GPU_TYPES = {"k80": None, "p100": None, "v100": "V100-32GB"}


def gavel_path() -> Path:
    """The shared copy of Gavel's throughput file."""
    return data_dir() / "gavel" / "gavel_simulation_throughputs.json"


@cache
def load(path: Path | None = None) -> dict[str, Any]:
    """The parsed throughput file (cached per path)."""
    return dict(json.loads((path or gavel_path()).read_text()))


def job_class(key: str) -> str | None:
    """The class of a Gavel job-type key: `"('A3C', 1)"` -> `A3C`; None for multi-GPU
    types (scale > 1) and keys that are not job types (`"null"`)."""
    if not key.startswith("("):
        return None
    name, scale = ast.literal_eval(key)
    return str(name) if scale == 1 else None


def factors(gpu: str = "v100", path: Path | None = None) -> dict[tuple[str, str], float]:
    """(class a, class b) -> factor(a, b) on GPU type `gpu` (module doc), every ordered
    pair of single-GPU job types, a == b included."""
    table = load(path)[gpu]
    out: dict[tuple[str, str], float] = {}
    for key, row in table.items():
        a = job_class(key)
        alone = row.get("null") if a is not None else None
        if a is None or not alone:
            continue
        for other, pair in row.items():
            b = job_class(other)
            if b is None:
                continue
            f = pair[0] / alone
            out[(a, b)] = MIN_FACTOR if f <= 0 else min(f, MAX_INTERFERENCE_SPEED)
    return out


def classes(gpu: str = "v100", path: Path | None = None) -> list[str]:
    """The single-GPU job types of `gpu`, sorted."""
    return sorted({a for a, _ in factors(gpu, path)})


def interference_pairs(gpu: str = "v100", only: set[str] | None = None,
                       path: Path | None = None) -> list[InterferencePair]:
    """The contract's `interference` list for GPU type `gpu` (pairs among `only` when
    given), sorted by (a, b)."""
    return [InterferencePair(a=a, b=b, speed=s)
            for (a, b), s in sorted(factors(gpu, path).items())
            if only is None or (a in only and b in only)]
