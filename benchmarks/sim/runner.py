"""Run several policies on one trace and cluster; tabulate, plot and save the figures.

On a cluster with quotas the table gains the quota columns (`QUOTA_COLUMNS`) and the
outputs a `tenants.csv`: one row per policy and tenant (`metrics.tenant_figures`)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks.sim.engine import SchedulingPolicy, SimConfig, SimResult, Simulator
from benchmarks.sim.metrics import jcts, series, summarize
from benchmarks.sim.plots import plot_jct_cdf, plot_timeline
from benchmarks.sim.policies import POLICIES
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster

Progress = Callable[[str, int, int], None]


@dataclass
class Comparison:
    """The runs of a comparison, by policy name, and their summaries."""

    results: dict[str, SimResult] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)


def make_policy(name: str, overrides: Mapping[str, Any] | None = None) -> SchedulingPolicy:
    """A fresh policy by registry name; `overrides` set its dataclass fields."""
    policy = POLICIES[name]()
    for k, v in (overrides or {}).items():
        setattr(policy, k, v)
    return policy


def compare(cluster: Cluster, trace: Sequence[TraceJob], policies: Sequence[str],
            config: SimConfig | None = None, *,
            overrides: Mapping[str, Mapping[str, Any]] | None = None,
            progress: Progress | None = None) -> Comparison:
    """Simulate `trace` on `cluster` once per policy (in the order given)."""
    out = Comparison()
    for name in policies:
        def tick(done: int, total: int, _name: str = name) -> None:
            if progress is not None:
                progress(_name, done, total)
        sim = Simulator(cluster, trace, make_policy(name, (overrides or {}).get(name)),
                        config, on_progress=tick)
        res = sim.run()
        out.results[name] = res
        out.summaries[name] = summarize(res, cluster)
        used = getattr(sim.policy, "backend_used", None)
        if used:
            out.summaries[name]["backends"] = dict(used)
        if getattr(sim.policy, "deterministic", False):
            out.summaries[name]["wall_cuts"] = sim.policy.wall_cuts  # type: ignore[attr-defined]
    return out


#: Table columns: (summary key, header, formatter).
COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("avg_jct_s", "avg JCT h", lambda v: f"{v / 3600:.2f}"),
    ("median_jct_s", "med JCT h", lambda v: f"{v / 3600:.2f}"),
    ("p95_jct_s", "p95 JCT h", lambda v: f"{v / 3600:.2f}"),
    ("avg_queueing_s", "avg queue h", lambda v: f"{v / 3600:.2f}"),
    ("makespan_s", "makespan h", lambda v: f"{v / 3600:.1f}"),
    ("utilization", "util", lambda v: f"{v:.3f}"),
    ("util_busy", "util busy", lambda v: f"{v:.3f}"),
    ("work_per_gpu_hour", "work/GPU-h", lambda v: f"{v:.3f}"),
    ("ideal_avg_jct_s", "ideal JCT h", lambda v: f"{v / 3600:.2f}"),
    ("jct_over_ideal", "JCT/ideal", lambda v: f"{v:.2f}"),
    ("ftf_rho_mean", "FTF ρ avg", lambda v: f"{v:.2f}"),
    ("ftf_rho_max", "FTF ρ max", lambda v: f"{v:.1f}"),
    ("preemptions", "preempt", str),
    ("migrations", "migr", str),
    ("resizes", "resize", str),
    ("planner_p50_s", "plan p50 ms", lambda v: f"{v * 1000:.1f}"),
    ("planner_p99_s", "plan p99 ms", lambda v: f"{v * 1000:.1f}"),
    ("wall_s", "wall s", lambda v: f"{v:.1f}"),
)


#: The quota columns, shown when the cluster has quotas (`metrics.tenant_summary`).
QUOTA_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("guar_served_avg", "guar served avg", lambda v: f"{v:.3f}"),
    ("guar_served_min", "guar served min", lambda v: f"{v:.3f}"),
    ("quota_wait_rounds", "wait<G rounds", lambda v: f"{v:.0f}"),
    ("quota_wait_s", "wait<G h", lambda v: f"{v / 3600:.2f}"),
    ("quota_wait_streak", "wait<G streak", lambda v: f"{v:.0f}"),
    ("quota_wait_longest_s", "wait<G longest s", lambda v: f"{v:.0f}"),
    ("quota_wait_longest_rounds", "wait<G longest rounds", lambda v: f"{v:.2f}"),
)

#: Columns of `tenants.csv`, after `policy` and `tenant`.
TENANT_FIELDS = ("jobs", "avg_jct_s", "guaranteed", "guar_served", "quota_wait_rounds",
                 "quota_wait_s", "quota_wait_streak", "quota_wait_longest_s",
                 "quota_wait_longest_rounds")


def columns(summaries: Mapping[str, Mapping[str, Any]]
            ) -> tuple[tuple[str, str, Callable[[Any], str]], ...]:
    """COLUMNS, plus QUOTA_COLUMNS when some summary has the quota figures."""
    quota = any("quota_wait_rounds" in s for s in summaries.values())
    return COLUMNS + QUOTA_COLUMNS if quota else COLUMNS


def table(cmp: Comparison, title: str = "") -> Table:
    """A rich table of the summaries, one row per policy."""
    cols = columns(cmp.summaries)
    t = Table(title=title or None)
    t.add_column("policy", no_wrap=True)
    for _, head, _ in cols:
        t.add_column(head, justify="right")
    for name, s in cmp.summaries.items():
        t.add_row(name, *(fmt(s[key]) if key in s else "-" for key, _, fmt in cols))
    return t


def markdown(cmp: Comparison) -> str:
    """The same table as GitHub markdown."""
    cols = columns(cmp.summaries)
    heads = ["policy", *(h for _, h, _ in cols)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for name, s in cmp.summaries.items():
        cells = [fmt(s[k]) if k in s else "-" for k, _, fmt in cols]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def write_tenants_csv(summaries: Mapping[str, Mapping[str, Any]], path: Path) -> bool:
    """One row per policy and tenant (TENANT_FIELDS); False (nothing written) when no
    summary has tenant figures."""
    rows = [{"policy": p, "tenant": k, **{f: fig[f] for f in TENANT_FIELDS}}
            for p, s in summaries.items() for k, fig in s.get("tenants", {}).items()]
    if not rows:
        return False
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["policy", "tenant", *TENANT_FIELDS])
        w.writeheader()
        w.writerows(rows)
    return True


def write_outputs(cmp: Comparison, out_dir: Path, meta: Mapping[str, Any],
                  prefix: str = "") -> dict[str, Path]:
    """`<prefix>summary.json` (meta, summaries, per-job JCTs, time series) and the PNGs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    title = str(meta.get("title", ""))
    gpus = next(iter(cmp.results.values())).gpus_total if cmp.results else 0
    paths = {
        "json": out_dir / f"{prefix}summary.json",
        "jct_cdf": plot_jct_cdf({n: jcts(r) for n, r in cmp.results.items()},
                                out_dir / f"{prefix}jct_cdf.png", title),
        "timeline": plot_timeline({n: series(r) for n, r in cmp.results.items()}, gpus,
                                  out_dir / f"{prefix}timeline.png", title),
    }
    doc = {"meta": dict(meta), "summaries": cmp.summaries,
           "jct_s": {n: jcts(r) for n, r in cmp.results.items()},
           "series": {n: series(r) for n, r in cmp.results.items()}}
    paths["json"].write_text(json.dumps(doc, indent=1, default=float) + "\n")
    if write_tenants_csv(cmp.summaries, out_dir / f"{prefix}tenants.csv"):
        paths["tenants"] = out_dir / f"{prefix}tenants.csv"
    return paths
