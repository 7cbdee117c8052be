"""Merge `summary.json` files of `gpuplan simulate` runs into one markdown table.

    python -m benchmarks.sim.report OUT_DIR/summary.json OTHER/summary.json

(policies run as separate processes, e.g. in parallel, are compared in one table). A
figure a file lacks (written before that figure existed, e.g. the ideal JCT) shows as `-`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.sim.runner import COLUMNS


def merged_markdown(paths: Sequence[Path]) -> str:
    """One markdown row per policy over every summary file, in file order."""
    heads = ["policy", *(h for _, h, _ in COLUMNS)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for p in paths:
        for name, s in json.loads(p.read_text())["summaries"].items():
            cells = [fmt(s[k]) if k in s else "-" for k, _, fmt in COLUMNS]
            lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Write the merged table of the files in `argv` on stdout."""
    sys.stdout.write(merged_markdown([Path(a) for a in argv]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
