"""PNG plots of a comparison (matplotlib, Agg backend): the JCT CDF per policy, and the
GPU utilization and queue length over time (hourly means)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

_BIN_S = 3600.0


def _binned(t: Sequence[float], v: Sequence[float], end: float) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """Time-weighted mean of a step function per hour, hours on the x axis."""
    if not t:
        return np.zeros(0), np.zeros(0)
    times = np.append(np.asarray(t), end)
    vals = np.asarray(v)
    nbins = max(1, int(np.ceil((end - times[0]) / _BIN_S)))
    edges = times[0] + _BIN_S * np.arange(nbins + 1)
    acc = np.zeros(nbins)
    for a, b, x in zip(times[:-1], times[1:], vals, strict=True):
        if b <= a:
            continue
        i, j = int((a - edges[0]) // _BIN_S), int((b - edges[0]) // _BIN_S)
        for k in range(i, min(j, nbins - 1) + 1):
            lo, hi = max(a, edges[k]), min(b, edges[k + 1])
            if hi > lo:
                acc[k] += x * (hi - lo)
    return (edges[:-1] - edges[0]) / 3600.0, acc / _BIN_S


def plot_jct_cdf(jcts: Mapping[str, Sequence[float]], path: Path, title: str) -> Path:
    """The JCT CDF of every policy (log x axis, hours)."""
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=90)
    for name, vals in jcts.items():
        x = np.sort(np.asarray(vals)) / 3600.0
        ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=name, lw=1.4)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_timeline(series: Mapping[str, Mapping[str, Sequence[float]]], gpus_total: int,
                  path: Path, title: str) -> Path:
    """Utilization (top) and queue length (bottom) over time, hourly means."""
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6, 4.8), dpi=90, sharex=True)
    end = max((s["t"][-1] for s in series.values() if s["t"]), default=0.0) + 1.0
    for name, s in series.items():
        hx, util = _binned(s["t"], [a / gpus_total for a in s["allocated"]], end)
        ax1.plot(hx, util, label=name, lw=1.0)
        hx, q = _binned(s["t"], s["queued"], end)
        ax2.plot(hx, q, label=name, lw=1.0)
    ax1.set_ylabel("GPU utilization")
    ax1.set_ylim(0, 1.05)
    ax2.set_ylabel("queued jobs")
    ax2.set_xlabel("time (hours)")
    ax1.set_title(title, fontsize=9)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
