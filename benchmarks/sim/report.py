"""Merge `summary.json` files of `gpuplan simulate` runs into one markdown table.

    python -m benchmarks.sim.report [--fill] OUT_DIR/summary.json OTHER/summary.json

(policies run as separate processes, e.g. in parallel, are compared in one table). A
figure a file lacks (written before that figure existed) shows as `-`, unless `--fill`
recomputes the ones that need no new run: the ideal JCT and its ratio depend only on the
trace and the cluster recorded in the file's `meta` (reloaded as `gpuplan simulate`
loads them), the work per allocated GPU-hour on them and the recorded `gpu_hours`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.sim.cluster import largest_pool, load_cluster
from benchmarks.sim.metrics import ideal_avg_jct, work_gpu_seconds
from benchmarks.sim.runner import columns
from benchmarks.sim.workloads import load_trace


def fill_figures(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The summaries of `doc` with the ideal JCT, its ratio and work per GPU-hour added."""
    meta = doc["meta"]
    cluster = load_cluster(meta["cluster"])
    trace = load_trace(meta["trace"], limit=meta.get("jobs"), seed=meta.get("seed", 0),
                       max_gang=largest_pool(cluster),
                       gpus_per_node=max(len(n.gpus) for n in cluster.nodes),
                       arrival_scale=meta.get("arrival_scale", 1.0),
                       skip=meta.get("skip", 0))
    ideal = ideal_avg_jct(trace, cluster)
    work = work_gpu_seconds(trace, cluster)
    out: dict[str, dict[str, Any]] = {}
    for name, s in doc["summaries"].items():
        filled = dict(s)
        filled.setdefault("ideal_avg_jct_s", ideal)
        filled.setdefault("jct_over_ideal", s["avg_jct_s"] / ideal if ideal else float("nan"))
        if s.get("gpu_hours"):
            filled.setdefault("work_per_gpu_hour", work / (s["gpu_hours"] * 3600.0))
        out[name] = filled
    return out


def merged_markdown(paths: Sequence[Path], fill: bool = False) -> str:
    """One markdown row per policy over every summary file, in file order."""
    docs = [json.loads(p.read_text()) for p in paths]
    cols = columns({f"{i}/{n}": s for i, d in enumerate(docs)
                    for n, s in d["summaries"].items()})
    heads = ["policy", *(h for _, h, _ in cols)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for doc in docs:
        summaries = fill_figures(doc) if fill else doc["summaries"]
        for name, s in summaries.items():
            cells = [fmt(s[k]) if k in s else "-" for k, _, fmt in cols]
            lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Write the merged table of the files in `argv` on stdout (`--fill` first: see above)."""
    fill = bool(argv) and argv[0] == "--fill"
    files = argv[1:] if fill else argv
    sys.stdout.write(merged_markdown([Path(a) for a in files], fill) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
