"""`gpuplan bench colocation`: interference-aware vs interference-blind co-location.

The workload (`workload`): small single-GPU jobs, half of them whole-GPU jobs and half
shared jobs (`gpu_share` 0.5) that may share a V100-32GB with one other; each shared job
is one of Gavel's 26 single-GPU job types (drawn uniformly) and carries it as its
`colocation_class`, with Gavel's measured factors between them (benchmarks/data/gavel.py).
The cluster (nodes of 4 V100-32GB) holds every job: `tight` has exactly one GPU per whole
job plus one per two shared jobs, so every shared job must share; `slack` has a quarter
more GPUs than that for the shared jobs.

Two plans per instance, both by `solver.plan` with the same policy:
- aware: the request as it is;
- blind: the same request without its `interference` pairs (the planner packs shares by
  capacity alone), then valued under the real factors.

Both are measured against the same reference, every job placed at factor 1 (what blind
packing promises, and what it places: the cluster holds every job): a plan's loss is that
reference minus the throughput it achieves under the real factors. For the blind plan
this is `stats.interference_loss` (Gavel's factors are all <= 1); the aware plan may also
leave out a shared job whose every co-location would cost more than it brings, and then
its loss counts that job's whole value, so the comparison is at equal placements or
stricter for the aware plan. Target (issue 15): aware plans lose at most half of what
blind ones lose.

The least loss any plan can have (`least_loss`) is computed beside, exactly, from the
workload's shape: one GPU model, every whole job on a GPU of its own (with factors at
most 1, two shares of a GPU earn at most what a whole job does) and at most two shares a
GPU, so that a plan of the shared jobs is a set of pairs and lone jobs on the GPUs the
whole jobs leave: a maximum-weight matching with a GPU budget, solved as a small MIP with
HiGHS (a column per pair). It is given twice: free (what the aware planner optimises:
a job may stay out) and with every job placed (the blind plans' placements).

`--scale M:5,L:10` also runs the scale benchmark's instances (benchmarks/generator.py)
with co-location classes on 30% of their shared jobs (`add_colocation_classes`, Gavel's
V100 factors between the classes drawn) under `auto` at the given time limits, and reports
the gap to the bound.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from benchmarks.data.gavel import classes, interference_pairs
from models import PlanRequest
from models.objective import evaluate
from models.rules import colocation_factor, interference_table, job_value
from solver.highs import OPTIMAL, HighsLp, set_integral

#: The GPU model of the co-location workload (Gavel's factors are measured on V100s).
MODEL = "V100-32GB"


def workload(small_jobs: int, slack: float, seed: int, time_limit_s: float = 5.0
             ) -> PlanRequest:
    """The co-location workload (module doc): `small_jobs` jobs, half shared; GPUs for all
    of them with the shared jobs paired, plus `slack` times the shared jobs' GPUs."""
    rng = random.Random(f"colocation-{small_jobs}-{slack}-{seed}")
    types = classes()
    n_shared = small_jobs // 2
    n_whole = small_jobs - n_shared
    gpus = n_whole + (n_shared + 1) // 2
    gpus += round(slack * (n_shared + 1) // 2)
    nodes = [{"name": f"v100-{k}", "gpus": [{"index": i, "model": MODEL}
                                           for i in range(min(4, gpus - 4 * k))]}
             for k in range((gpus + 3) // 4)]
    jobs: list[dict[str, Any]] = [{"name": f"whole-{k}", "gpus": 1} for k in range(n_whole)]
    drawn = [rng.choice(types) for _ in range(n_shared)]
    jobs += [{"name": f"shared-{k}", "gpu_share": 0.5, "colocation_class": c}
             for k, c in enumerate(drawn)]
    rng.shuffle(jobs)
    return PlanRequest.model_validate({
        "cluster": {"nodes": nodes}, "jobs": jobs,
        "interference": [p.model_dump() for p in interference_pairs(only=set(drawn))],
        "policy": {"time_limit_s": time_limit_s, "seed": seed}})


def add_colocation_classes(request: PlanRequest, fraction: float = 0.3, seed: int = 0
                           ) -> PlanRequest:
    """A copy of `request` where `fraction` of the shared jobs carry a co-location class,
    one of Gavel's single-GPU job types drawn uniformly, with Gavel's V100 factors between
    the classes drawn. Without shared jobs the copy is the request."""
    rng = random.Random(f"colocation-classes-{fraction}-{seed}")
    types = classes()
    jobs = []
    used: set[str] = set()
    for job in request.jobs:
        if job.gpu_share is not None and rng.random() < fraction:
            c = rng.choice(types)
            used.add(c)
            job = job.model_copy(update={"colocation_class": c})
        jobs.append(job)
    return PlanRequest.model_validate({
        **request.model_dump(mode="json", exclude_none=True),
        "jobs": [j.model_dump(mode="json", exclude_none=True) for j in jobs],
        "interference": [p.model_dump() for p in interference_pairs(only=used)]})


@dataclass
class Pair:
    """Aware and blind plans of one instance."""

    scenario: str
    seed: int
    jobs: int
    gpus: int
    placed_aware: int
    placed_blind: int
    plain_aware: float
    plain_blind: float
    loss_aware: float
    loss_blind: float
    wall_aware: float
    wall_blind: float
    #: the least loss of any plan, and of any plan that places every job (`least_loss`)
    least: float | None = None
    least_all: float | None = None

    @property
    def ratio(self) -> float | None:
        """Aware loss over blind loss (None when blind loses nothing)."""
        return self.loss_aware / self.loss_blind if self.loss_blind > 0 else None


def compare(request: PlanRequest, scenario: str, seed: int) -> Pair:
    """Plan `request` aware and blind (module doc) and value both under its factors."""
    from solver import plan

    t0 = time.perf_counter()
    aware = plan(request)
    t1 = time.perf_counter()
    blind_req = request.model_copy(update={"interference": []})
    blind = plan(blind_req)
    t2 = time.perf_counter()
    catalog = request.cluster.catalog()
    reference = sum(job_value(j, MODEL, catalog) for j in request.jobs)
    out = []
    for p in (aware, blind):
        placements = {a.job: a.placements for a in p.assignments}
        ev = evaluate(request, placements)
        out.append((len(placements), ev.throughput + ev.interference_loss,
                    reference - ev.throughput))
    return Pair(scenario, seed, len(request.jobs),
                sum(len(n.gpus) for n in request.cluster.nodes), out[0][0], out[1][0],
                out[0][1], out[1][1], out[0][2], out[1][2], t1 - t0, t2 - t1,
                least_loss(request), least_loss(request, place_all=True))


def least_loss(request: PlanRequest, place_all: bool = False) -> float | None:
    """The least loss (module doc: the reference minus the throughput) of any plan of a
    co-location `workload` request, exactly; with `place_all`, of any plan that places
    every job. None when no such plan exists."""
    table = interference_table(request.interference)
    catalog = request.cluster.catalog()
    shared = [j for j in request.jobs if j.gpu_share is not None]
    whole = [j for j in request.jobs if j.gpu_share is None]
    if any((j.gpu_share or 0.0) < 0.5 for j in shared) or any(j.gpus != 1 for j in whole):
        raise ValueError("least_loss needs the co-location workload's shape (module doc)")
    value = [job_value(j, MODEL, catalog) for j in shared]
    reference = sum(job_value(j, MODEL, catalog) for j in request.jobs)
    lp = HighsLp()
    for k in range(len(shared)):
        lp.add_row("job", k, lo=1.0 if place_all else 0.0, hi=1.0)
    gpus = sum(len(n.gpus) for n in request.cluster.nodes) - len(whole)
    lp.add_row("gpus", 0, hi=float(gpus))
    for k, v in enumerate(value):   # a job alone on a GPU
        col = lp.add_col(-v, hi=1.0)
        lp.entry("job", k, col, 1.0)
        lp.entry("gpus", 0, col, 1.0)
    for a in range(len(shared)):
        for b in range(a + 1, len(shared)):
            ca, cb = shared[a].colocation_class, shared[b].colocation_class
            pair = (value[a] * colocation_factor(ca, [cb], table)
                    + value[b] * colocation_factor(cb, [ca], table))
            col = lp.add_col(-pair, hi=1.0)
            lp.entry("job", a, col, 1.0)
            lp.entry("job", b, col, 1.0)
            lp.entry("gpus", 0, col, 1.0)
    h = lp.to_highs()
    set_integral(h, list(range(lp.num_cols)))
    h.setOptionValue("mip_rel_gap", 0.0)
    h.run()
    if h.getModelStatus() != OPTIMAL:
        return None
    best = -h.getInfo().objective_function_value + sum(
        job_value(j, MODEL, catalog) for j in whole)
    return reference - best


def format_pairs(rows: list[Pair]) -> str:
    """The comparison as a Markdown table, with the totals per scenario."""
    head = ("| scenario | seed | jobs | GPUs | placed aware / blind | value at factor 1 "
            "aware / blind | lost aware | lost blind | aware / blind loss | least loss "
            "(all placed) | least / blind (all placed) | wall s aware / blind |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]

    def num(x: float | None, digits: int = 3) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    def per(x: float | None, lb: float) -> str:
        return "-" if x is None or lb <= 0 else f"{x / lb:.2f}"

    for r in rows:
        lines.append(f"| {r.scenario} | {r.seed} | {r.jobs} | {r.gpus} | {r.placed_aware} / "
                     f"{r.placed_blind} | {r.plain_aware:.3f} / {r.plain_blind:.3f} | "
                     f"{r.loss_aware:.3f} | {r.loss_blind:.3f} | {num(r.ratio, 2)} | "
                     f"{num(r.least)} ({num(r.least_all)}) | {per(r.least, r.loss_blind)} "
                     f"({per(r.least_all, r.loss_blind)}) | "
                     f"{r.wall_aware:.1f} / {r.wall_blind:.1f} |")
    for scen in sorted({r.scenario for r in rows}):
        sel = [r for r in rows if r.scenario == scen]
        la, lb = sum(r.loss_aware for r in sel), sum(r.loss_blind for r in sel)
        least = sum(r.least for r in sel if r.least is not None)
        least_all = sum(r.least_all for r in sel if r.least_all is not None)
        ratio = f"{la / lb:.2f}" if lb > 0 else "-"
        lines.append(f"| **{scen} total** | | | | | | {la:.3f} | {lb:.3f} | **{ratio}** | "
                     f"{least:.3f} ({least_all:.3f}) | {per(least, lb)} "
                     f"({per(least_all, lb)}) | |")
    return "\n".join(lines)


def scale_rows(spec: str, seed: int) -> list[str]:
    """The scale instances with co-location classes under `auto` (module doc), as table
    lines."""
    from benchmarks.generator import generate
    from solver import plan

    lines = ["| size | time limit s | shared jobs | with a class | status | objective | "
             "bound | gap | wall s | loss |", "|---|---|---|---|---|---|---|---|---|---|"]
    for item in spec.split(","):
        size, _, limit = item.partition(":")
        req = add_colocation_classes(generate(size.strip().upper(), seed), 0.3, seed)
        req.policy.time_limit_s = float(limit or 10)
        t0 = time.perf_counter()
        p = plan(req)
        wall = time.perf_counter() - t0
        shared = sum(1 for j in req.jobs if j.gpu_share is not None)
        classed = sum(1 for j in req.jobs if j.colocation_class is not None)
        gap = "-" if p.gap is None else f"{100 * p.gap:.2f}%"
        bound = "-" if p.best_bound is None else f"{p.best_bound:,.1f}"
        loss = getattr(p.stats, "interference_loss", 0.0)
        lines.append(f"| {size.upper()} | {limit} | {shared} | {classed} | {p.status} | "
                     f"{p.objective_value:,.1f} | {bound} | {gap} | {wall:.1f} | "
                     f"{loss:.2f} |")
        typer.echo(lines[-1], err=True)
    return lines


def colocation_command(
    small_jobs: Annotated[int, typer.Option(help="Small jobs per instance (half shared).")]
        = 96,
    seeds: Annotated[int, typer.Option(help="Instances per scenario (seeds 0..N-1).")] = 3,
    time_limit: Annotated[float, typer.Option(
        "--time-limit", help="policy.time_limit_s of each plan (s).")] = 5.0,
    scale: Annotated[str, typer.Option(
        help="Also run these scale sizes with classes, SIZE:SECONDS comma-separated "
             "(e.g. M:5,L:10); empty: none.")] = "",
    out: Annotated[Path | None, typer.Option(help="Also write the tables to this file.")]
        = None,
) -> None:
    """Interference-aware vs blind packing on the co-location workload (module doc)."""
    rows: list[Pair] = []
    for scenario, slack in (("tight", 0.0), ("slack", 0.25)):
        for seed in range(seeds):
            req = workload(small_jobs, slack, seed, time_limit)
            rows.append(compare(req, scenario, seed))
            typer.echo(format_pairs(rows[-1:]).splitlines()[2], err=True)
    command = (f"gpuplan bench colocation --small-jobs {small_jobs} --seeds {seeds} "
               f"--time-limit {time_limit:g}" + (f" --scale {scale}" if scale else ""))
    parts = [f"Command: `{command}`", "", format_pairs(rows)]
    if scale:
        parts += ["", *scale_rows(scale, 0)]
    text = "\n".join(parts)
    typer.echo(text)
    if out is not None:
        out.write_text(text + "\n")
