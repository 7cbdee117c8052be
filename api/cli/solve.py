"""`gpuplan solve`: plan one request file; the plan JSON goes to stdout or a file."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from api.cli.common import fail, load_request
from models import Plan


class SolverChoice(StrEnum):
    """Backends selectable on the command line."""

    auto = "auto"
    cp_sat = "cp_sat"
    milp = "milp"
    heuristic = "heuristic"


class ObjectiveChoice(StrEnum):
    """Objectives selectable on the command line."""

    throughput = "throughput"
    fairness = "fairness"
    priority_fifo = "priority_fifo"
    makespan = "makespan"
    jct = "jct"


def summary(plan: Plan) -> str:
    """A short human summary of a plan: status, objective, gap, counts, time."""
    gap = "n/a" if plan.gap is None else f"{plan.gap:.4%}"
    bound = "n/a" if plan.best_bound is None else f"{plan.best_bound:.6g}"
    return (f"status={plan.status} solver={plan.solver} objective={plan.objective_value:.6g} "
            f"bound={bound} gap={gap} placed={len(plan.assignments)} "
            f"unplaced={len(plan.unplaced)} migrated={len(plan.migrated)} "
            f"preempted={len(plan.preempted)} utilization={plan.stats.utilization:.1%} "
            f"time={plan.solve_time_s:.3f}s")


def solve(
    request: Annotated[Path, typer.Argument(help="PlanRequest JSON file ('-' = stdin).")],
    output: Annotated[Path | None, typer.Option("-o", "--output",
                                                help="Write the plan here.")] = None,
    solver: Annotated[SolverChoice | None, typer.Option(help="Override policy.solver.")] = None,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", min=0.01, help="Override policy.time_limit_s (seconds).")] = None,
    objective: Annotated[ObjectiveChoice | None, typer.Option(
        help="Override policy.objective.")] = None,
    milp_backend: Annotated[str | None, typer.Option(help="cbc or highs.")] = None,
    threads: Annotated[int | None, typer.Option(min=1)] = None,
    seed: Annotated[int | None, typer.Option(min=0)] = None,
    html: Annotated[Path | None, typer.Option(
        "--html", metavar="FILE", help="Also write the plan view (HTML) here.")] = None,
) -> None:
    """Plan REQUEST and print the plan JSON (summary on stderr). Exit 0 when a plan is
    produced, even with unplaced jobs; 2 on bad input."""
    from solver import plan as make_plan

    req = load_request(request)
    updates: dict[str, object] = {}
    if solver is not None:
        updates["solver"] = solver.value
    if time_limit is not None:
        updates["time_limit_s"] = time_limit
    if objective is not None:
        updates["objective"] = objective.value
    if milp_backend is not None:
        if milp_backend not in ("cbc", "highs"):
            fail(f"--milp-backend must be cbc or highs, not {milp_backend!r}")
        updates["milp_backend"] = milp_backend
    if threads is not None:
        updates["threads"] = threads
    if seed is not None:
        updates["seed"] = seed
    if updates:
        req.policy = req.policy.model_copy(update=updates)
    result = make_plan(req)
    text = result.model_dump_json(indent=1)
    typer.echo(summary(result), err=True)
    if html is not None:
        from api.cli.view import write_view

        write_view(req, result, html)
    if output is None:
        typer.echo(text)
    else:
        try:
            output.write_text(text + "\n")
        except OSError as e:
            fail(f"cannot write {output}: {e.strerror or e}")


def register(app: typer.Typer) -> None:
    """Add `solve` to `app`."""
    app.command("solve")(solve)
