"""The FGD paper's published per-seed figures, to compare a run with seed by seed.

`../shared/data/alibaba-pai-2023/fgd_published_per_seed.csv`: one row per workload
(`openb_pod_list_<workload>`), policy (`01-Random` ... `06-FGD`) and seed, with the
allocation in percent at 100% and 130% of arrived GPU request.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from benchmarks.openb.loader import trace_dir

FILE = "fgd_published_per_seed.csv"
#: our policy name -> the paper's
PAPER_NAMES = {"random": "01-Random", "dotprod": "02-DotProd",
               "gpuclustering": "03-GpuClustering", "gpupacking": "04-GpuPacking",
               "bestfit": "05-BestFit", "fgd": "06-FGD"}


@dataclass(frozen=True)
class Published:
    """One published figure pair."""

    at_100: float
    at_130: float


def load_published(path: Path | None = None) -> dict[tuple[str, str, int], Published]:
    """(workload, our policy name, seed) -> the published figures; {} when the file is absent."""
    path = path or trace_dir() / FILE
    if not path.exists():
        return {}
    ours = {v: k for k, v in PAPER_NAMES.items()}
    out: dict[tuple[str, str, int], Published] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            policy = ours.get(row["policy"])
            if policy is None:
                continue
            workload = row["workload"].removeprefix("openb_pod_list_")
            out[(workload, policy, int(row["seed"]))] = Published(
                float(row["alloc_at_100"]), float(row["alloc_at_130"]))
    return out
