"""`gpuplan bench elastic`: Pollux's 8 workloads on 64 GPUs, with and without elasticity.

Each workload (`pollux:K`, see `benchmarks/sim/workloads/pollux.py`) is replayed on
`pollux-64` (16 nodes x 4 T4) under each policy: by default `tiresias_las`, `afs_elastic`,
`gpuplan_fixed` (fixed sizes) and `gpuplan` (elastic). The table gives each policy's
average JCT per workload and their mean over the workloads, beside the averages the Pollux
authors published for their own simulator (`pollux/published/*-jobload-1.0-summary.json`:
Pollux, Tiresias+TunedJobs, Optimus+Oracle), and the target check of issue 15: gpuplan's
mean at least 25% below gpuplan_fixed's and below afs_elastic's and tiresias_las's.

The simulated outcome does not depend on timing when gpuplan plans in deterministic mode
(`policy.deterministic`, the default here): its budget is then counted in work units, not
wall seconds (`solver/budget.py`), so a loaded machine gets the same plans, only later.
Writes `summary.json` (per workload and policy: the summary and the per-job JCTs),
`summary.md` (the table) and `jct_cdf.png` (all jobs of all workloads, per policy).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import typer

from benchmarks.paths import data_dir

log = logging.getLogger(__name__)

#: The policies compared by default, fixed-size ones first.
DEFAULT_POLICIES = ("tiresias_las", "afs_elastic", "gpuplan_fixed", "gpuplan")

#: Published result files -> the name of the Pollux paper's policy.
PUBLISHED = {"pollux": "Pollux", "tiresias": "Tiresias+TunedJobs",
             "optimus": "Optimus+Oracle"}

#: The target: gpuplan's mean JCT at most this fraction of gpuplan_fixed's.
TARGET_RATIO = 0.75


def published_averages(folder: Path | None = None) -> dict[str, dict[str, float]]:
    """The Pollux authors' average JCT per workload (`workload-K`) and `mean`, by policy;
    empty when the files are absent."""
    root = folder or data_dir() / "pollux" / "published"
    out: dict[str, dict[str, float]] = {}
    for key, label in PUBLISHED.items():
        path = root / f"{key}-jobload-1.0-summary.json"
        if not path.is_file():
            continue
        doc = json.loads(path.read_text())
        out[label] = {**{k: float(v) for k, v in doc["avgs"].items()},
                      "mean": float(doc["mean"])}
    return out


def parse_workloads(spec: str) -> list[int]:
    """`1-8`, `1,3,5` or `2` -> workload numbers in 1..8 (ValueError otherwise)."""
    out: list[int] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    if not out or any(not 1 <= k <= 8 for k in out):
        raise ValueError(f"workloads {spec!r}: numbers from 1 to 8")
    return sorted(set(out))


Progress = Callable[[int, str, int, int], None]


def run_one(k: int, policies: Sequence[str], *, round_s: float = 60.0,
            restart_overhead_s: float = 30.0, time_limit_s: float = 2.0,
            deterministic: bool = True, limit: int | None = None,
            progress: Progress | None = None) -> Any:
    """Simulate workload k under each policy: its Comparison."""
    from benchmarks.sim.cluster import load_cluster
    from benchmarks.sim.engine import SimConfig
    from benchmarks.sim.runner import compare
    from benchmarks.sim.workloads import load_trace

    cluster = load_cluster("pollux-64")
    config = SimConfig(round_s=round_s, restart_overhead_s=restart_overhead_s)
    over = {p: {"time_limit_s": time_limit_s, "deterministic": deterministic,
                "restart_overhead_s": restart_overhead_s}
            for p in policies if p.startswith("gpuplan")}
    trace = load_trace(f"pollux:{k}", limit=limit, max_gang=64, gpus_per_node=4)

    def tick(name: str, done: int, total: int) -> None:
        if progress is not None:
            progress(k, name, done, total)

    return compare(cluster, trace, policies, config, overrides=over, progress=tick)


def run(workloads: Sequence[int], policies: Sequence[str], *, workers: int = 1,
        progress: Progress | None = None, **kw: Any) -> dict[int, Any]:
    """Simulate each workload under each policy: {K: Comparison}. With `workers` > 1 the
    workloads run in that many processes (forkserver); in deterministic mode the results
    are the same either way. `progress` is called in this process only (workers = 1)."""
    if workers <= 1 or len(workloads) <= 1:
        return {k: run_one(k, policies, progress=progress, **kw) for k in workloads}
    ctx = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {k: pool.submit(run_one, k, list(policies), **kw) for k in workloads}
        out = {}
        for k, fut in futures.items():
            out[k] = fut.result()
            log.info("workload %d done", k)
        return out


def workload_doc(cmp: Any, policies: Sequence[str]) -> dict[str, Any]:
    """One workload's figures as plain data: per policy its summary and per-job JCTs."""
    from benchmarks.sim.metrics import jcts

    return {"summaries": {p: cmp.summaries[p] for p in policies},
            "jct_s": {p: jcts(cmp.results[p]) for p in policies}}


def mean_jcts(docs: Mapping[int, Mapping[str, Any]], policies: Sequence[str]
              ) -> dict[str, float]:
    """Each policy's average JCT, averaged over the workloads (the paper's `mean`)."""
    return {p: sum(d["summaries"][p]["avg_jct_s"] for d in docs.values()) / len(docs)
            for p in policies}


def markdown_table(docs: Mapping[int, Mapping[str, Any]], policies: Sequence[str],
                   published: Mapping[str, Mapping[str, float]]) -> str:
    """Average JCT (s) per workload and policy, ours then the published ones."""
    heads = ["workload", *policies, *(f"{p} (published)" for p in published)]
    lines = ["| " + " | ".join(heads) + " |", "|---|" + "---:|" * (len(heads) - 1)]
    for k in sorted(docs):
        ours = [f"{docs[k]['summaries'][p]['avg_jct_s']:,.0f}" for p in policies]
        theirs = [f"{pub.get(f'workload-{k}', float('nan')):,.0f}" for pub in published.values()]
        lines.append(f"| {k} | " + " | ".join([*ours, *theirs]) + " |")
    means = mean_jcts(docs, policies)
    pub_means = [f"**{pub['mean']:,.0f}**" if len(docs) == 8 else
                 f"{sum(pub[f'workload-{k}'] for k in docs) / len(docs):,.0f}"
                 for pub in published.values()]
    lines.append("| **mean** | " + " | ".join(
        [*(f"**{means[p]:,.0f}**" for p in policies), *pub_means]) + " |")
    return "\n".join(lines)


def target_lines(means: Mapping[str, float]) -> list[str]:
    """The issue's target, one line per comparison (met or missed)."""
    if "gpuplan" not in means:
        return []
    g = means["gpuplan"]
    out = []
    if "gpuplan_fixed" in means:
        red = 1 - g / means["gpuplan_fixed"]
        out.append(f"gpuplan vs gpuplan_fixed: {red:.1%} lower mean JCT "
                   f"(target >= {1 - TARGET_RATIO:.0%}): "
                   f"{'met' if g <= TARGET_RATIO * means['gpuplan_fixed'] else 'MISSED'}")
    for other in ("afs_elastic", "tiresias_las"):
        if other in means:
            out.append(f"gpuplan vs {other}: {1 - g / means[other]:.1%} lower mean JCT "
                       f"(target > 0): {'met' if g < means[other] else 'MISSED'}")
    return out


def write(docs: Mapping[int, Mapping[str, Any]], policies: Sequence[str], out: Path,
          meta: Mapping[str, Any]) -> dict[str, Path]:
    """summary.json, summary.md and jct_cdf.png in `out`."""
    from benchmarks.sim.plots import plot_jct_cdf

    out.mkdir(parents=True, exist_ok=True)
    published = published_averages()
    means = mean_jcts(docs, policies)
    pooled = {p: [x for k in sorted(docs) for x in docs[k]["jct_s"][p]] for p in policies}
    paths = {"json": out / "summary.json", "md": out / "summary.md",
             "jct_cdf": plot_jct_cdf(pooled, out / "jct_cdf.png",
                                     f"Pollux workloads {', '.join(map(str, sorted(docs)))}: "
                                     "JCT CDF, 64 GPUs")}
    doc = {"meta": dict(meta), "mean_avg_jct_s": means, "published": published,
           "workloads": {str(k): docs[k] for k in sorted(docs)}}
    paths["json"].write_text(json.dumps(doc, indent=1, default=float) + "\n")
    paths["md"].write_text(markdown_table(docs, policies, published) + "\n\n"
                           + "\n".join(f"- {line}" for line in target_lines(means)) + "\n")
    return paths


def combine(paths: Sequence[Path]) -> tuple[dict[int, Any], list[str], dict[str, Any]]:
    """The workloads of several `summary.json` files of this command, merged by workload
    and by policy (later files win: one run per workload, or a rerun of some policies),
    the policies every workload has (in the order first seen), and their merged meta."""
    docs: dict[int, Any] = {}
    order: list[str] = []
    meta: dict[str, Any] = {}
    for path in paths:
        f = path / "summary.json" if path.is_dir() else path
        doc = json.loads(f.read_text())
        meta.update({k: v for k, v in doc["meta"].items() if k not in ("workloads", "policies")})
        order.extend(p for p in doc["meta"]["policies"] if p not in order)
        for k, v in doc["workloads"].items():
            d = docs.setdefault(int(k), {"summaries": {}, "jct_s": {}})
            d["summaries"].update(v["summaries"])
            d["jct_s"].update(v["jct_s"])
    policies = [p for p in order if all(p in d["summaries"] for d in docs.values())]
    meta["workloads"] = sorted(docs)
    meta["policies"] = policies
    return docs, policies, meta


def elastic_command(
    workloads: Annotated[str, typer.Option(help="Pollux workloads: 1-8, 1,3 or 2.")] = "1-8",
    policies: Annotated[str, typer.Option(help="Comma-separated simulator policies.")] =
        ",".join(DEFAULT_POLICIES),
    round_s: Annotated[float, typer.Option("--round", min=1.0,
                                           help="Scheduling round (s); Pollux's is 60.")] = 60.0,
    restart_overhead: Annotated[float, typer.Option(
        min=0.0, help="Seconds a resized, moved or restarted job makes no progress.")] = 30.0,
    time_limit: Annotated[float, typer.Option(
        min=0.05, help="gpuplan: policy.time_limit_s of each round.")] = 2.0,
    deterministic: Annotated[bool, typer.Option(
        help="gpuplan: policy.deterministic (results independent of machine load).")] = True,
    jobs: Annotated[int | None, typer.Option(min=1, help="Replay the first N jobs.")] = None,
    workers: Annotated[int, typer.Option(
        min=1, max=8, help="Workloads simulated at once, one process each.")] = 1,
    combine_from: Annotated[list[Path] | None, typer.Option(
        "--combine", help="Simulate nothing: merge the summary.json of earlier runs "
                          "(one workload each, or a rerun of some policies; later "
                          "files win) into one table and plot.")] = None,
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("elastic_out"),
) -> None:
    """Pollux's workloads on 64 GPUs: gpuplan with and without elasticity, AFS, Tiresias,
    beside the Pollux authors' published averages."""
    from rich.console import Console

    from benchmarks.sim.policies import POLICIES

    if combine_from:
        try:
            docs, names, meta = combine(combine_from)
        except (OSError, ValueError, KeyError) as e:
            raise typer.BadParameter(f"cannot merge: {e}", param_hint="--combine") from e
        paths = write(docs, names, out, meta)
        typer.echo(paths["md"].read_text())
        typer.echo(f"wrote {', '.join(str(p) for p in paths.values())}")
        return
    try:
        ks = parse_workloads(workloads)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--workloads") from e
    names = [p.strip() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise typer.BadParameter(f"unknown policy {', '.join(unknown) or '(none)'}; "
                                 f"choose from {', '.join(POLICIES)}", param_hint="--policies")
    console = Console(stderr=True)

    def tick(k: int, name: str, done: int, total: int) -> None:
        if done == total:
            console.print(f"workload {k}: {name} done ({total} jobs)")

    results = run(ks, names, round_s=round_s, restart_overhead_s=restart_overhead,
                  time_limit_s=time_limit, deterministic=deterministic, limit=jobs,
                  workers=workers, progress=tick)
    meta = {"workloads": ks, "policies": names, "round_s": round_s,
            "restart_overhead_s": restart_overhead, "gpuplan_time_limit_s": time_limit,
            "gpuplan_deterministic": deterministic, "jobs": jobs, "cluster": "pollux-64",
            "workers": workers}
    docs = {k: workload_doc(cmp, names) for k, cmp in results.items()}
    paths = write(docs, names, out, meta)
    typer.echo(paths["md"].read_text())
    typer.echo(f"wrote {', '.join(str(p) for p in paths.values())}")
