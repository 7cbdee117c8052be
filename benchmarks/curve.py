"""`gpuplan bench curve`: the gap against the time limit, quiet and under contention.

For each size, each contention level (`--contend 0,4`: that many busy processes pinned to
the cores, benchmarks/contend.py) and each time limit, one `auto` run of the scale
benchmark (benchmarks/scale.py, a fresh process per run) measures the gap to the plan's
own bound and how far `solve_time_s` went past the limit. The rows print as the scale
benchmark's Markdown table, go to a CSV file, and are drawn as one PNG: the gap (log
scale) against the time limit, one line per size and contention level, and the overrun
beside it. A run that crashed or timed out has no gap and leaves a gap in its line.
Each row's last column ends with the host's one-minute load average before the run
(benchmarks/contend.py: host_load), the run's own contenders included: on a shared host,
"quiet" is only as quiet as that.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Annotated

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import typer

from benchmarks.contend import contended, host_load
from benchmarks.scale import Row, format_table, run_isolated

#: The gap drawn for a plan that met its bound (log axis: zero cannot be drawn).
FLOOR_GAP = 1e-5


def _floats(text: str, what: str) -> list[float]:
    """Comma-separated positive numbers; a bad one is a usage error."""
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"not a number list: {text!r}", param_hint=what) from None
    if not out or any(x <= 0 for x in out):
        raise typer.BadParameter(f"need positive numbers: {text!r}", param_hint=what)
    return out


def measure(sizes: Sequence[str], limits: Sequence[float], contends: Sequence[int],
            seed: int) -> list[Row]:
    """One `auto` run per size, contention level and limit (in that nesting)."""
    rows: list[Row] = []
    for n in contends:
        with contended(n):
            for size in sizes:
                for limit in limits:
                    load = host_load()
                    row = run_isolated(size, "auto", limit, seed, limit * 3 + 120)
                    if load is not None:   # how quiet "quiet" was (module doc)
                        row.note = f"{row.note}; host load {load:.1f}".lstrip("; ")
                    row.contend = n
                    row.limit_s = limit
                    rows.append(row)
                    typer.echo(format_table([row]).splitlines()[-1], err=True)
    return rows


def write_csv(rows: Sequence[Row], path: Path) -> Path:
    """The rows as CSV, one column per `Row` field."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[f.name for f in fields(Row)])
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))
    return path


def plot(rows: Sequence[Row], path: Path, title: str) -> Path:
    """Gap (%, log scale) and overrun (s) against the time limit, a line per size and
    contention level."""
    fig, (gap_ax, over_ax) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=90)
    series: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        series.setdefault((row.instance.split(" ")[0], row.contend), []).append(row)
    for (size, n), runs in series.items():
        runs = sorted(runs, key=lambda r: r.limit_s or 0.0)
        label = f"{size}, " + ("quiet" if n == 0 else f"--contend {n}")
        style = "-" if n == 0 else "--"
        x = [r.limit_s for r in runs]
        gaps = [None if r.gap is None else max(100 * r.gap, 100 * FLOOR_GAP) for r in runs]
        gap_ax.plot(x, [float("nan") if g is None else g for g in gaps], style, marker="o",
                    label=label, lw=1.3)
        over = [float("nan") if r.solve_s is None or r.limit_s is None
                else r.solve_s - r.limit_s for r in runs]
        over_ax.plot(x, over, style, marker="o", label=label, lw=1.3)
    gap_ax.set_xscale("log")
    gap_ax.set_yscale("log")
    gap_ax.set_xlabel("time limit (s)")
    gap_ax.set_ylabel("gap to the bound (%)")
    over_ax.set_xscale("log")
    over_ax.axhline(0.1, color="grey", lw=0.8, ls=":")
    over_ax.set_xlabel("time limit (s)")
    over_ax.set_ylabel("solve_time_s - limit (s)")
    for ax in (gap_ax, over_ax):
        ax.grid(alpha=0.3)
    gap_ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def curve_command(
    sizes: Annotated[str, typer.Option(help="Comma-separated sizes: S, M, L, XL.")] = "M,L",
    time_limits: Annotated[str, typer.Option(
        help="Comma-separated time limits (s).")] = "0.5,1,2,3,5,10",
    contend: Annotated[str, typer.Option(
        help="Comma-separated contention levels: busy processes pinned to the cores "
             "(0: quiet).")] = "0,4",
    seed: Annotated[int, typer.Option(help="Instance and solver seed.")] = 0,
    out: Annotated[Path, typer.Option(
        help="Output prefix: writes PREFIX.csv, PREFIX.png and PREFIX.md.")] =
        Path("gap_curve"),
) -> None:
    """Gap and overrun against the time limit, quiet and contended; table, CSV and plot."""
    from benchmarks.generator import SIZES

    size_list = [s.strip().upper() for s in sizes.split(",") if s.strip()]
    unknown = [s for s in size_list if s not in SIZES]
    if unknown or not size_list:
        raise typer.BadParameter(f"unknown size: {', '.join(unknown) or sizes!r}",
                                 param_hint="--sizes")
    limits = _floats(time_limits, "--time-limits")
    try:
        levels = [int(x) for x in contend.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"not an integer list: {contend!r}",
                                 param_hint="--contend") from None
    if not levels or any(n < 0 or n > 256 for n in levels):
        raise typer.BadParameter("contention levels are 0 to 256", param_hint="--contend")
    rows = measure(size_list, limits, levels, seed)
    command = (f"gpuplan bench curve --sizes {','.join(size_list)} --time-limits "
               f"{','.join(f'{x:g}' for x in limits)} --contend "
               f"{','.join(map(str, levels))} --seed {seed}")
    text = "\n".join([f"Command: `{command}`", "", format_table(rows)])
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.md").write_text(text + "\n")
    write_csv(rows, Path(f"{out}.csv"))
    plot(rows, Path(f"{out}.png"), command)
    typer.echo(text)
    typer.echo(f"wrote {out}.md, {out}.csv and {out}.png")
