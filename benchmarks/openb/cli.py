"""`gpuplan bench openb`: the FGD paper's fragmentation benchmark on the Alibaba PAI 2023 trace.

For each seed: build the arrival sequence (by default the paper's simulator's: originals
shuffled, inflation copies appended in the order drawn up to 130% of the GPU capacity, node
preference drawn after them, all from Go's `math/rand`; see `inflation.py`), or replay an
external one (`--order FILE`, see `order.py`); place online with each policy, bin the curve;
optionally plan the same pods in batch with `solver.plan`. Prints the table (allocation at
100% and 130%, unallocated GPUs, wall time) and, where the paper published the seed's
figure, the per-seed difference; writes `curve.csv`, `summary.csv`, `per_seed.csv` and
`curve.png` into `--out`.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from benchmarks.openb.curve import plot_curves, value_at, write_curve_csv
from benchmarks.openb.frag import typical_shapes
from benchmarks.openb.gorand import GoRand, GoUnavailable, NumpyRand
from benchmarks.openb.inflation import Arrivals, mixed_arrivals, peer_arrivals
from benchmarks.openb.loader import MILLI, WORKLOADS, OpenbNodes, OpenbPods, load_nodes, load_pods
from benchmarks.openb.online import RunResult, run_online
from benchmarks.openb.order import read_order, write_order
from benchmarks.openb.published import Published, load_published
from benchmarks.openb.registry import POLICIES

log = logging.getLogger(__name__)

#: the paper's means over seeds 42-51 (Weng et al., ATC'23), allocation % at 130% / 100%,
#: on the `default` workload, for the summary's paper column (other workloads print -; the
#: per-seed comparison of both workloads reads `published.py`'s file).
PUBLISHED_130 = {"random": 87.47, "dotprod": 90.85, "gpuclustering": 91.88,
                 "gpupacking": 92.00, "bestfit": 93.08, "fgd": 95.39}
PUBLISHED_100 = {"bestfit": 92.86, "fgd": 95.23}
INFLATION = 1.3
#: `--arrival` rules and `--rng` generators
ARRIVALS = ("peer", "mixed")
RNGS = ("go", "numpy")


def parse_seeds(text: str) -> list[int]:
    """`42-51` or `42,44,50-51` -> the list of seeds; ValueError on bad input."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            a, b = int(lo), int(hi)
            if b < a:
                raise ValueError(f"empty seed range {part!r}")
            seeds.extend(range(a, b + 1))
        else:
            seeds.append(int(part))
    if not seeds:
        raise ValueError("no seeds given")
    return seeds


def _published(name: str, workload: str) -> float | None:
    return PUBLISHED_130.get(name) if workload == "default" else None


def _row(name: str, a100: float, a130: float, unalloc: float, wall: float,
         workload: str) -> str:
    pub = _published(name, workload)
    pub_s = f"{pub:6.2f}" if pub is not None else "     -"
    a100_s = "-" if math.isnan(a100) else f"{a100:.2f}"
    return f"{name:<12} {a100_s:>8} {a130:8.2f} {pub_s:>9} {unalloc:12.1f} {wall:9.1f}"


def openb_command(
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 42-51 or 42,43.")] = "42-51",
    policies: Annotated[str, typer.Option(
        help=f"Comma-separated online policies: {', '.join(POLICIES)}.")] = "bestfit,fgd,gpuplan",
    workload: Annotated[str, typer.Option(
        help=f"Pod list: {' | '.join(WORKLOADS)}.")] = "default",
    out: Annotated[Path, typer.Option(help="Output folder for CSV and PNG.")] = Path(
        "benchmarks/openb_results"),
    batch: Annotated[bool, typer.Option(
        "--batch/--no-batch", help="Also plan all pods at once with solver.plan.")] = False,
    batch_time_limit: Annotated[float, typer.Option(
        help="solver.plan time limit per seed (s).")] = 120.0,
    arrival: Annotated[str, typer.Option(
        help="Arrival rule: peer (the paper's simulator: originals shuffled, copies "
             "appended) | mixed (originals and copies shuffled together).")] = "peer",
    rng: Annotated[str, typer.Option(
        help="Generator of the peer rule: go (Go's math/rand, the paper's per-seed "
             "orders; needs Go) | numpy.")] = "go",
    order: Annotated[Path | None, typer.Option(
        help="Replay this arrival order (JSON or text list of pod names, copies "
             "NAME-tuned-K, optional node tie ranks) instead of building one.")] = None,
    save_orders: Annotated[Path | None, typer.Option(
        help="Write each seed's arrival order (JSON, with node ranks) into this folder.")
    ] = None,
) -> None:
    """Online placement (and optional batch) on the Alibaba PAI 2023 trace, FGD's benchmark."""
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--seeds") from None
    names = [p.strip() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise typer.BadParameter(f"unknown {', '.join(unknown) or '(none)'}; choose from "
                                 f"{', '.join(POLICIES)}", param_hint="--policies")
    if workload not in WORKLOADS:
        raise typer.BadParameter(f"{workload!r} is not one of {', '.join(WORKLOADS)}",
                                 param_hint="--workload")
    if arrival not in ARRIVALS:
        raise typer.BadParameter(f"{arrival!r} is not one of {', '.join(ARRIVALS)}",
                                 param_hint="--arrival")
    if rng not in RNGS:
        raise typer.BadParameter(f"{rng!r} is not one of {', '.join(RNGS)}",
                                 param_hint="--rng")
    try:
        nodes = load_nodes()
        pods = load_pods(workload=workload)
    except (OSError, ValueError, KeyError) as e:
        raise typer.BadParameter(f"cannot read the OpenB trace: {e}",
                                 param_hint="--workload") from None
    replay: Arrivals | None = None
    if order is not None:
        try:
            replay = read_order(order, pods, nodes)
        except (OSError, ValueError) as e:
            raise typer.BadParameter(f"{order}: {e}", param_hint="--order") from None
    shapes = typical_shapes(pods, nodes.models)
    results: list[RunResult] = []
    batch_rows: list[tuple[int, float, float, str]] = []
    for seed in seed_list:
        try:
            seq = replay or build_arrivals(pods, nodes, seed, arrival, rng)
        except GoUnavailable as e:
            raise typer.BadParameter(f"{e}; or pass --rng numpy", param_hint="--rng") from None
        if save_orders is not None:
            save_orders.mkdir(parents=True, exist_ok=True)
            write_order(seq, nodes, save_orders / f"order-{workload}-{seed}.json")
        arrivals = seq.pods
        for name in names:
            res, _ = run_online(name, POLICIES[name](shapes), nodes, arrivals, seed,
                                tie_rank=seq.tie_rank)
            results.append(res)
            typer.echo(f"seed {seed} {name:<10} pods {len(arrivals)} alloc@130 "
                       f"{value_at(res, 130):.2f}% ({res.wall_s:.1f}s)")
        if batch:
            from benchmarks.openb.batch import run_batch

            b = run_batch(nodes, arrivals, seed, batch_time_limit)
            batch_rows.append((seed, b.allocation * 100, b.wall_s, f"{b.solver}/{b.status}"))
            typer.echo(f"seed {seed} batch      alloc {b.allocation * 100:.2f}% "
                       f"({b.wall_s:.1f}s, {b.solver}/{b.status}, "
                       f"{b.unplaced_gpu_pods} GPU pods unplaced)")
    out.mkdir(parents=True, exist_ok=True)
    write_curve_csv(results, out / "curve.csv")
    plot_curves(results, out / "curve.png",
                f"OpenB {workload}, seeds {seeds}, inflation to 130%")
    summary = _summary(results, batch_rows, nodes.capacity_milli)
    _write_summary(summary, out / "summary.csv", workload)
    typer.echo("")
    typer.echo(f"{'policy':<12} {'@100%':>8} {'@130%':>8} {'paper@130':>9} "
               f"{'unalloc GPUs':>12} {'wall s':>9}")
    for name, a100, a130, unalloc, wall in summary:
        typer.echo(_row(name, a100, a130, unalloc, wall, workload))
    typer.echo(f"(mean over {len(seed_list)} seed(s); wall = mean per seed; "
               f"curve and summary in {out})")
    _per_seed(results, workload, out / "per_seed.csv")


def build_arrivals(pods: OpenbPods, nodes: OpenbNodes, seed: int, arrival: str,
                   rng: str) -> Arrivals:
    """The arrival sequence of `seed` under the `arrival` rule (GoUnavailable without Go)."""
    if arrival == "mixed":
        return mixed_arrivals(pods, nodes.capacity_milli, INFLATION, seed)
    if rng == "numpy":
        return peer_arrivals(pods, nodes, INFLATION, NumpyRand(seed))
    with GoRand(seed) as go:
        return peer_arrivals(pods, nodes, INFLATION, go)


def _per_seed(results: list[RunResult], workload: str, path: Path) -> None:
    """Write every run's figures beside the paper's for the same seed; print the differences."""
    published = load_published()
    lines: list[str] = []
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "seed", "alloc_at_100_pct", "alloc_at_130_pct",
                    "paper_at_100_pct", "paper_at_130_pct", "diff_100_pt", "diff_130_pt"])
        for r in results:
            a100, a130 = value_at(r, 100), value_at(r, 130)
            pub: Published | None = published.get((workload, r.policy, r.seed))
            row = [r.policy, r.seed, f"{a100:.4f}", f"{a130:.4f}"]
            if pub is None:
                w.writerow([*row, "", "", "", ""])
                continue
            d100, d130 = a100 - pub.at_100, a130 - pub.at_130
            w.writerow([*row, pub.at_100, pub.at_130, f"{d100:+.4f}", f"{d130:+.4f}"])
            lines.append(f"{r.policy:<12} {r.seed:>4} {a100:8.2f} {pub.at_100:8.2f} "
                         f"{d100:+7.2f} {a130:8.2f} {pub.at_130:8.2f} {d130:+7.2f}")
    if lines:
        typer.echo("")
        typer.echo(f"{'policy':<12} {'seed':>4} {'@100%':>8} {'paper':>8} {'diff':>7} "
                   f"{'@130%':>8} {'paper':>8} {'diff':>7}")
        for line in lines:
            typer.echo(line)


def _summary(results: list[RunResult], batch_rows: list[tuple[int, float, float, str]],
             capacity_milli: int) -> list[tuple[str, float, float, float, float]]:
    """Per policy: mean allocation at 100% and 130%, unallocated GPUs at 130%, wall s."""
    out: list[tuple[str, float, float, float, float]] = []
    for name in dict.fromkeys(r.policy for r in results):
        rs = [r for r in results if r.policy == name]
        a100 = float(np.mean([value_at(r, 100) for r in rs]))
        a130 = float(np.mean([value_at(r, 130) for r in rs]))
        unalloc = float(np.mean([(1 - r.final_allocation) * capacity_milli / MILLI for r in rs]))
        out.append((name, a100, a130, unalloc, float(np.mean([r.wall_s for r in rs]))))
    if batch_rows:
        alloc = float(np.mean([b[1] for b in batch_rows]))
        out.append(("batch", math.nan, alloc, (100 - alloc) / 100 * capacity_milli / MILLI,
                     float(np.mean([b[2] for b in batch_rows]))))
    return out


def _write_summary(rows: list[tuple[str, float, float, float, float]], path: Path,
                   workload: str) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "alloc_at_100_pct", "alloc_at_130_pct", "paper_at_130_pct",
                    "unallocated_gpus", "wall_s_per_seed"])
        for name, a100, a130, unalloc, wall in rows:
            a100_s = "" if math.isnan(a100) else f"{a100:.4f}"
            pub = _published(name, workload)
            w.writerow([name, a100_s, f"{a130:.4f}", "" if pub is None else pub,
                        f"{unalloc:.2f}", f"{wall:.2f}"])
