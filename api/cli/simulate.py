"""`gpuplan simulate`: replay a trace against several scheduling policies and compare.

    gpuplan simulate --trace ../shared/data/itp/cluster07.csv --cluster hetero-160-nomig \\
        --policies fifo_firstfit,tiresias_las,gavel_maxmin,gpuplan --jobs 1000 --out out/

prints the comparison table, writes `summary.json` (every figure, per-job JCTs, time
series) and `jct_cdf.png` / `timeline.png` into `--out`. A trace with several tenants
(the Philly trace: its virtual clusters) gets quotas proportional to each tenant's demand
(`benchmarks/sim/tenants.py`; `--borrow-factor` sets the limits) and a `tenants.csv`.
See benchmarks/SIMULATION.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api.cli.common import fail
from benchmarks.sim.cluster import ClusterSpecError, describe, largest_pool, load_cluster
from benchmarks.sim.engine import InvariantError, SimConfig
from benchmarks.sim.policies import POLICIES
from benchmarks.sim.runner import compare, table, write_outputs
from benchmarks.sim.tenants import demand_quotas, tenants, with_quotas
from benchmarks.sim.workloads import TraceError, load_trace
from models.request import SolverName

log = logging.getLogger(__name__)


def simulate(
    trace: Annotated[str, typer.Option(help="ITP or PAI CSV file, or 'synthetic'.")],
    cluster: Annotated[str, typer.Option(
        help="Cluster spec JSON (a bare name is looked up in benchmarks/clusters).")],
    policies: Annotated[str, typer.Option(
        help=f"Comma-separated policy names (default: {', '.join(POLICIES)}).",
        show_default=False)] = ",".join(POLICIES),
    jobs: Annotated[int | None, typer.Option(min=1, help="Replay the first N jobs.")] = None,
    skip: Annotated[int, typer.Option(
        min=0, help="Philly: skip the first N jobs (start of the window).")] = 0,
    borrow_factor: Annotated[float | None, typer.Option(
        min=1.0, help="Multi-tenant traces: limit = guarantee x this (default: "
                      "unlimited borrowing).", show_default=False)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the job-type draw.")] = 0,
    round_s: Annotated[float, typer.Option("--round", min=1.0,
                                           help="Scheduling round (s).")] = 300.0,
    restart_overhead: Annotated[float, typer.Option(
        min=0.0, help="Progress lost per migration or preemption (s).")] = 30.0,
    mig_delay: Annotated[float, typer.Option(
        min=0.0, help="Delay of a MIG reconfiguration on a node (s).")] = 60.0,
    arrival_scale: Annotated[float, typer.Option(
        min=1e-4, help="Multiply inter-arrival times (<1 = heavier load).")] = 1.0,
    time_limit: Annotated[float, typer.Option(
        min=0.05, help="gpuplan: solver time limit per round (s).")] = 0.5,
    solver: Annotated[SolverName, typer.Option(
        help="gpuplan: policy.solver of each round.")] = "heuristic",
    sessions: Annotated[bool, typer.Option(
        "--sessions", help="gpuplan: drive the rounds through one planning session "
                           "(events between rounds) instead of a snapshot each.")] = False,
    deterministic: Annotated[bool, typer.Option(
        "--deterministic", help="gpuplan: policy.deterministic (work limits instead of the "
                                "wall clock: the same plans on a loaded machine).")] = False,
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("sim_out"),
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Replay a trace on a cluster under several policies and compare JCT, queueing,
    utilization, fairness, preemptions and planner time."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        fail(f"unknown policy {', '.join(unknown) or '(none)'}; "
             f"choose from {', '.join(POLICIES)}")
    try:
        spec = load_cluster(cluster)
        node_gpus = max(len(n.gpus) for n in spec.nodes)
        trace_jobs = load_trace(trace, limit=jobs, seed=seed, max_gang=largest_pool(spec),
                                gpus_per_node=node_gpus, arrival_scale=arrival_scale,
                                skip=skip)
    except (ClusterSpecError, TraceError) as e:
        fail(str(e))
    except (ValueError, KeyError) as e:
        fail(f"{trace}: cannot read the trace: {e}")
    if not trace_jobs:
        fail(f"{trace}: no job to replay")
    if len(tenants(trace_jobs)) > 1:
        spec = with_quotas(spec, demand_quotas(trace_jobs, spec, borrow_factor))
    config = SimConfig(round_s=round_s, restart_overhead_s=restart_overhead,
                       mig_reconfig_s=mig_delay)
    overrides = {"gpuplan": {"time_limit_s": time_limit, "solver": solver,
                             "sessions": sessions, "deterministic": deterministic}}
    console = Console(width=max(Console().width, 190))
    title = (f"{Path(trace).name if trace != 'synthetic' else 'synthetic'}: "
             f"{len(trace_jobs)} jobs on {describe(spec)}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not progress,
                  transient=True) as bar:
        tasks = {n: bar.add_task(n, total=len(trace_jobs)) for n in names}

        def tick(name: str, done: int, total: int) -> None:
            bar.update(tasks[name], completed=done, total=total)

        try:
            cmp = compare(spec, trace_jobs, names, config, overrides=overrides,
                          progress=tick)
        except InvariantError as e:
            fail(f"simulation invariant broken: {e}", code=1)
    console.print(table(cmp, title))
    meta = {"title": title, "trace": trace, "cluster": cluster, "jobs": len(trace_jobs),
            "skip": skip, "borrow_factor": borrow_factor,
            "quotas": {k: q.model_dump() for k, q in spec.quotas.items()}, "seed": seed,
            "round_s": round_s, "restart_overhead_s": restart_overhead,
            "mig_reconfig_s": mig_delay, "arrival_scale": arrival_scale,
            "gpuplan_time_limit_s": time_limit, "gpuplan_solver": solver,
            "gpuplan_sessions": sessions, "gpuplan_deterministic": deterministic,
            "policies": names}
    paths = write_outputs(cmp, out, meta)
    typer.echo(f"wrote {', '.join(str(p) for p in paths.values())}")
