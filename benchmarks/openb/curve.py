"""Allocation curves: per-run rows binned by whole percent of arrived GPU request, averaged.

As in the paper's analysis (`merge_alloc_discrete`): x is rounded to a whole percent and
each row's y to two decimals of a percent (Python's `round`, as pandas applies it there),
the y of all rows with the same x are averaged; a percent with no row takes the rows within
one point of it. The value "at 130%" is the curve at x = 130.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from benchmarks.openb.online import RunResult

FloatArray = npt.NDArray[np.float64]
MAX_PCT = 130


def binned(result: RunResult, max_pct: int = MAX_PCT) -> FloatArray:
    """Allocation (percent) at each whole percent 0..max_pct of arrived request; NaN = none."""
    xr = np.round(result.x * 100.0)
    y = np.array([round(v, 2) for v in (result.y * 100.0).tolist()])
    out = np.full(max_pct + 1, np.nan)
    for v in range(max_pct + 1):
        rows = y[xr == v]
        if not len(rows):
            rows = y[(xr >= v - 1) & (xr <= v + 1)]
        if len(rows):
            out[v] = rows.mean()
    return out


def value_at(result: RunResult, pct: int) -> float:
    """The curve at `pct` percent of arrived request (NaN when the run never got there)."""
    return float(binned(result, max(pct, MAX_PCT))[pct])


def write_curve_csv(results: Sequence[RunResult], path: Path) -> None:
    """One row per (policy, seed, x percent): the binned allocation in percent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "seed", "arrived_pct", "alloc_pct"])
        for r in results:
            for x, y in enumerate(binned(r)):
                if not np.isnan(y):
                    w.writerow([r.policy, r.seed, x, f"{y:.4f}"])


def plot_curves(results: Sequence[RunResult], path: Path, title: str) -> None:
    """The mean curve over seeds of every policy, as a PNG (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_policy: dict[str, list[FloatArray]] = {}
    for r in results:
        by_policy.setdefault(r.policy, []).append(binned(r))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = np.arange(MAX_PCT + 1)
    for name, curves in by_policy.items():
        stacked = np.vstack(curves)
        seen = ~np.isnan(stacked)
        # mean over the seeds that reached each percent (NaN where none did)
        mean = np.where(seen.any(axis=0), np.where(seen, stacked, 0.0).sum(axis=0)
                        / np.maximum(seen.sum(axis=0), 1), np.nan)
        ax.plot(xs, mean, label=f"{name} ({mean[-1]:.2f}% at 130%)")
    ax.plot(xs, np.minimum(xs, 100), color="grey", linestyle=":", label="ideal")
    ax.set_xlabel("arrived GPU request / capacity (%)")
    ax.set_ylabel("GPU allocation (%)")
    ax.set_xlim(60, MAX_PCT)
    ax.set_ylim(60, 101)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
