"""`gpuplan bench run`: the scale benchmark over generated instances.

For each size (S, M, L, XL; benchmarks/generator.py) and backend (`auto`, `heuristic`,
`cp_sat`, `milp` through `solver.plan` with `policy.solver` set; `naive`: the naive
CP-SAT model of benchmarks/naive_cpsat.py; `pipeline`: the heuristic pipeline called
directly, without `solver.plan`: greedy, local search until 1.5 s before the limit, the LP
bound, the plan built and validated), one run in a fresh process measures status,
objective, bound, gap, wall time (generation excluded) and the peak RSS of that process
(`VmHWM` from /proc/self/status, generation included). On M, the ratio of the `auto`
objective to the naive one is reported. Results print as a Markdown table and can be
written to a file.

`--tenants-quota N --priority-classes K` add quotas on N tenants and K priority classes
(contract 5.3 / 5.4; `benchmarks.generator.with_levels`); the note then gives the
guaranteed usage served against the sum of the guarantees (its upper bound), how many
of the highest class's jobs are placed, and each level's value against its bound, a
proven bound of the lexicographic optimum's value there (`stats.levels[].bound`,
solver/level_bound.py; computed after the plan, outside its time, when the plan had no
time left for it: marked `*`), with the gap of `solver.level_report.level_gap` (relative
to the range between the bound and the level's value with none of its jobs placed, as a
class's value includes its costs and may be negative).

`--contend N` runs every measurement beside N busy processes pinned round robin to the
cores (benchmarks/contend.py), started before the first run and stopped after the last,
so that a degraded CPU is measured; the number is a column of the results.

`--elastic F` makes the fraction F of the whole-GPU jobs elastic gangs (contract 5.1;
benchmarks/generator.py); `--interference F` puts the fraction F of the shared jobs in
co-location classes, Gavel's single-GPU job types with their measured V100 factors
(contract 5.2; `benchmarks.colocation.add_colocation_classes`). The instance name says
both.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from benchmarks.contend import contended
from models import Placement, PlanRequest

#: Backends: the solver's own (policy.solver) and the naive model.
SOLVER_BACKENDS = ("auto", "heuristic", "cp_sat", "milp")
ALL_BACKENDS = (*SOLVER_BACKENDS, "naive", "pipeline")


@dataclass
class Row:
    """One measured run."""

    instance: str
    backend: str
    status: str
    objective: float | None
    bound: float | None
    gap: float | None
    wall_s: float
    peak_rss_mib: float
    note: str = ""
    contend: int = 0
    solve_s: float | None = None   # the plan's own solve_time_s (solver backends)
    limit_s: float | None = None


def _peak_rss_mib() -> float:
    """This process's peak resident set size (VmHWM), in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _levels_note(request: PlanRequest, placed: set[str], levels: object,
                 placements: Mapping[str, Sequence[Placement]]) -> str:
    """G served / sum of guarantees, the highest class's jobs placed, each level against
    its bound."""
    if not isinstance(levels, list) or not levels:
        return ""
    parts = []
    if request.cluster.quotas:
        cap = sum(g for q in request.cluster.quotas.values() for g in q.guaranteed.values())
        parts.append(f"G {levels[0]['value']:,.1f}/{cap:,.0f}")
    top = max(j.priority for j in request.jobs)
    high = [j.name for j in request.jobs if j.priority == top]
    parts.append(f"class {top}: {sum(1 for n in high if n in placed)}/{len(high)} placed")
    return "; " + ", ".join(parts) + _level_gaps(request, levels, placements)


def _level_gaps(request: PlanRequest, levels: list[dict[str, Any]],
                placements: Mapping[str, Sequence[Placement]]) -> str:
    """`; levels value/bound ...` per level (module doc)."""
    from models.objective import level_values
    from solver.level_bound import level_bounds
    from solver.level_report import level_gap

    later = ""
    bounds = [item.get("bound") for item in levels]
    if any(b is None for b in bounds):
        bounds, later = list(level_bounds(request, placements, 30.0)), "*"
    empty = [v for _, v in level_values(request, {})]
    out = []
    for item, b, e in zip(levels, bounds, empty, strict=False):
        v = float(item["value"])
        gap = "" if b is None else f" ({level_gap(v, b, e):.1%})"
        out.append(f"{item['level']} {v:,.1f}/{'-' if b is None else f'{b:,.1f}'}{gap}")
    return "; levels value/bound" + later + ": " + ", ".join(out)


def _run_one(size: str, backend: str, time_limit: float, seed: int,
             elastic: float = 0.0, topology: tuple[str, ...] = (),
             levels: tuple[int, int] = (0, 1), interference: float = 0.0) -> Row:
    """Generate the instance (with `elastic` gangs, `topology` levels, `levels` (tenants
    under quotas, priority classes) and `interference` classes, if any) and run one
    backend on it (in the calling process)."""
    from benchmarks.generator import generate
    from models.objective import evaluate

    request = generate(size, seed, elastic=elastic, topology=topology,
                       tenants_quota=levels[0], priority_classes=levels[1])
    if interference > 0:
        from benchmarks.colocation import add_colocation_classes

        request = add_colocation_classes(request, interference, seed)
    policy = request.policy.model_copy(update={"time_limit_s": time_limit, "seed": seed})
    instance = f"{size} ({sum(len(n.gpus) for n in request.cluster.nodes)} GPUs / "\
        f"{len(request.jobs)} jobs)" + (f", {elastic:.0%} elastic" if elastic else "") \
        + (f", {interference:.0%} of shares classed" if interference else "")
    if backend == "naive":
        from benchmarks.naive_cpsat import solve_naive

        req = request.model_copy(update={"policy": policy})
        t0 = time.monotonic()
        res = solve_naive(req, time_limit, seed=seed)
        wall = time.monotonic() - t0
        if res is None:
            return Row(instance, backend, "no solution", None, None, None, wall,
                       _peak_rss_mib())
        value = evaluate(req, res.placements).objective_value
        return Row(instance, backend, "feasible", value, None, None, wall, _peak_rss_mib())
    if backend == "pipeline":
        return _run_pipeline(instance, request.model_copy(update={"policy": policy}),
                             time_limit)
    from solver import plan

    req = request.model_copy(update={"policy": policy.model_copy(
        update={"solver": backend})})
    t0 = time.monotonic()
    out = plan(req)
    wall = time.monotonic() - t0
    note = out.solver + _levels_note(req, {a.job for a in out.assignments},
                                     out.stats.model_dump().get("levels"),
                                     {a.job: a.placements for a in out.assignments})
    if topology or levels != (0, 1):
        from solver.validate import validate_plan

        bad = validate_plan(req, out)
        note += f"; {len(bad)} violations" if bad else "; valid"
    return Row(instance, backend, out.status, out.objective_value, out.best_bound, out.gap,
               wall, _peak_rss_mib(), note, solve_s=out.solve_time_s,
               limit_s=time_limit)


def _run_pipeline(instance: str, request: PlanRequest, time_limit: float) -> Row:
    """Greedy + local search + bound, built and validated, outside `solver.plan`."""
    from heuristics.portfolio import plan_heuristic
    from solver.bound import upper_bound
    from solver.build import build_plan
    from solver.validate import validate_plan

    t0 = time.monotonic()
    res = plan_heuristic(request, deadline=t0 + max(0.1, time_limit - 1.5))
    bound = upper_bound(request, time_limit_s=min(5.0, max(1.0, time_limit / 4)))
    out = build_plan(request, res, status="heuristic", solver="pipeline", best_bound=bound)
    bad = validate_plan(request, out)
    wall = time.monotonic() - t0
    note = f"{len(bad)} violations" if bad else "valid"
    return Row(instance, "pipeline", out.status, out.objective_value, out.best_bound,
               out.gap, wall, _peak_rss_mib(), note)


def _child(size: str, backend: str, time_limit: float, seed: int, conn: object,
           elastic: float = 0.0, topology: tuple[str, ...] = (),
           levels: tuple[int, int] = (0, 1), interference: float = 0.0) -> None:
    row = _run_one(size, backend, time_limit, seed, elastic, topology, levels, interference)
    conn.send(asdict(row))  # type: ignore[attr-defined]
    conn.close()  # type: ignore[attr-defined]


def run_isolated(size: str, backend: str, time_limit: float, seed: int,
                 timeout: float, elastic: float = 0.0,
                 topology: tuple[str, ...] = (), levels: tuple[int, int] = (0, 1),
                 interference: float = 0.0) -> Row:
    """`_run_one` in a fresh process (so peak RSS is that run's own)."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(size, backend, time_limit, seed, child,
                                            elastic, topology, levels, interference))
    t0 = time.monotonic()
    proc.start()
    child.close()
    row: Row | None = None
    if parent.poll(timeout):
        try:
            row = Row(**parent.recv())
        except EOFError:
            row = None
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if row is None:
        row = Row(size, backend, "crashed or timed out", None, None, None,
                  time.monotonic() - t0, 0.0, f"exit code {proc.exitcode}")
    return row


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def format_table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = ["| instance | backend | contend | limit (s) | status | objective | bound | gap | "
             "wall time (s) | solve_time_s - limit | peak RSS (MiB) | solver |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        gap = "-" if r.gap is None else f"{100 * r.gap:.2f}%"
        over = ("-" if r.solve_s is None or r.limit_s is None
                else f"{r.solve_s - r.limit_s:+.2f}")
        limit = "-" if r.limit_s is None else f"{r.limit_s:g}"
        lines.append(f"| {r.instance} | {r.backend} | {r.contend} | {limit} | {r.status} | "
                     f"{_fmt(r.objective)} | "
                     f"{_fmt(r.bound)} | {gap} | {r.wall_s:.2f} | {over} | "
                     f"{r.peak_rss_mib:,.0f} | {r.note} |")
    return "\n".join(lines)


def naive_ratios(rows: list[Row]) -> list[str]:
    """'auto / naive' objective ratios per instance where both ran."""
    out = []
    by = {(r.instance, r.backend): r for r in rows}
    for inst in dict.fromkeys(r.instance for r in rows):
        a, n = by.get((inst, "auto")), by.get((inst, "naive"))
        if a and n and a.objective is not None and n.objective is not None:
            ratio = a.objective / n.objective if n.objective else float("inf")
            out.append(f"{inst}: auto / naive objective = {a.objective:,.2f} / "
                       f"{n.objective:,.2f} = {ratio:.3f}")
    return out


def run_command(
    sizes: Annotated[str, typer.Option(help="Comma-separated sizes: S, M, L, XL.")] = "S,M",
    backends: Annotated[str, typer.Option(
        help="Comma-separated backends: auto, heuristic, cp_sat, milp, naive.")] =
        "auto,heuristic,naive",
    time_limit: Annotated[float, typer.Option(
        "--time-limit", help="policy.time_limit_s of each run (s).")] = 10.0,
    seed: Annotated[int, typer.Option(help="Instance and solver seed.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Also write the table to this file.")] =
        None,
    naive_sizes: Annotated[str, typer.Option(
        help="Sizes on which the naive model runs (it is slow to build).")] = "S,M",
    contend: Annotated[int, typer.Option(
        min=0, max=256,
        help="Busy processes pinned round robin to the cores during every run.")] = 0,
    elastic: Annotated[float, typer.Option(
        min=0.0, max=1.0,
        help="Fraction of the whole-GPU jobs made elastic gangs (contract 5.1).")] = 0.0,
    interference: Annotated[float, typer.Option(
        min=0.0, max=1.0,
        help="Fraction of the shared jobs given a co-location class (Gavel's job types "
             "and V100 factors; contract 5.2).")] = 0.0,
    topology: Annotated[str, typer.Option(
        help="Topology level names, widest first (e.g. zone,block,rack): the instances "
             "get that hierarchy and gangs spanning nodes required / preferred levels; "
             "each plan is validated.")] = "",
    tenants_quota: Annotated[int, typer.Option(
        min=0, max=8, help="Tenants under quotas (contract 5.3).")] = 0,
    priority_classes: Annotated[int, typer.Option(
        min=1, max=4, help="Priority classes of the jobs (contract 5.4).")] = 1,
) -> None:
    """Generate instances and run backends on them; print a table of the results."""
    size_list = [s.strip().upper() for s in sizes.split(",") if s.strip()]
    backend_list = [b.strip() for b in backends.split(",") if b.strip()]
    from benchmarks.generator import SIZES

    bad = [s for s in size_list if s not in SIZES] + [
        b for b in backend_list if b not in ALL_BACKENDS]
    if bad:
        raise typer.BadParameter(f"unknown size or backend: {', '.join(bad)}",
                                 param_hint="--sizes/--backends")
    naive_ok = {s.strip().upper() for s in naive_sizes.split(",")}
    levels = tuple(lv.strip() for lv in topology.split(",") if lv.strip())
    rows: list[Row] = []
    with contended(contend):
        for size in size_list:
            for backend in backend_list:
                if backend == "naive" and size not in naive_ok:
                    continue
                # the naive model takes minutes to build on M
                timeout = time_limit * 3 + (900 if backend == "naive" else 120)
                row = run_isolated(size, backend, time_limit, seed, timeout, elastic, levels,
                                   (tenants_quota, priority_classes), interference)
                row.contend = contend
                rows.append(row)
                typer.echo(format_table([row]).splitlines()[-1], err=True)
    table = format_table(rows)
    ratios = naive_ratios(rows)
    command = (f"gpuplan bench run --sizes {','.join(size_list)} --backends "
               f"{','.join(backend_list)} --time-limit {time_limit:g} --seed {seed}"
               + (f" --contend {contend}" if contend else "")
               + (f" --elastic {elastic:g}" if elastic else "")
               + (f" --interference {interference:g}" if interference else "")
               + (f" --topology {','.join(levels)}" if levels else "")
               + (f" --tenants-quota {tenants_quota}" if tenants_quota else "")
               + (f" --priority-classes {priority_classes}" if priority_classes > 1 else ""))
    text = "\n".join([f"Command: `{command}`", "", table, "", *ratios])
    typer.echo(text)
    if out is not None:
        out.write_text(text + "\n")
