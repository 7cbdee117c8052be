"""`gpuplan solve`: plan one request file; the plan JSON goes to stdout or a file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Literal

import typer
from pydantic import ValidationError

from api.cli.common import fail, format_validation_error, load_request
from models import Plan, Policy
from models.request import Objective, SolverName

#: --milp-backend's choices: the values `models.request.Policy.milp_backend` accepts.
MilpBackend = Literal["cbc", "highs"]


def unplaced_summary(plan: Plan) -> str:
    """`unplaced=3 (insufficient_capacity 2, no_eligible_gpu 1)`: the count, then each reason
    with its count (most frequent first)."""
    counts = Counter(u.reason for u in plan.unplaced)
    if not counts:
        return "unplaced=0"
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return (f"unplaced={len(plan.unplaced)} ("
            + ", ".join(f"{reason} {n}" for reason, n in ranked) + ")")


def summary(plan: Plan) -> str:
    """A one-line human summary of a plan: status, objective, gap, counts (unplaced jobs by
    reason), time."""
    gap = "n/a" if plan.gap is None else f"{plan.gap:.4%}"
    bound = "n/a" if plan.best_bound is None else f"{plan.best_bound:.6g}"
    return (f"status={plan.status} solver={plan.solver} objective={plan.objective_value:.6g} "
            f"bound={bound} gap={gap} placed={len(plan.assignments)} "
            f"{unplaced_summary(plan)} migrated={len(plan.migrated)} "
            f"preempted={len(plan.preempted)} utilization={plan.stats.utilization:.1%} "
            f"time={plan.solve_time_s:.3f}s")


def solve(
    request: Annotated[Path, typer.Argument(help="PlanRequest JSON file ('-' = stdin).")],
    output: Annotated[Path | None, typer.Option("-o", "--output",
                                                help="Write the plan here.")] = None,
    solver: Annotated[SolverName | None, typer.Option(help="Override policy.solver.")] = None,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", min=0.01, help="Override policy.time_limit_s (seconds).")] = None,
    objective: Annotated[Objective | None, typer.Option(
        help="Override policy.objective.")] = None,
    milp_backend: Annotated[MilpBackend | None, typer.Option(
        help="Override policy.milp_backend (the MILP solver used by --solver milp).")] = None,
    threads: Annotated[int | None, typer.Option(
        min=1, help="Override policy.threads (solver worker threads).")] = None,
    seed: Annotated[int | None, typer.Option(
        min=0, help="Override policy.seed (random seed of the solver and heuristics).")] = None,
    html: Annotated[Path | None, typer.Option(
        "--html", metavar="FILE", help="Also write the plan view (HTML) here.")] = None,
) -> None:
    """Plan REQUEST and print the plan JSON (summary on stderr).

    Exit 0 when a plan is produced, even with unplaced jobs; 2 on bad input.
    """
    req = load_request(request)
    given = {"solver": solver, "time_limit_s": time_limit, "objective": objective,
             "milp_backend": milp_backend, "threads": threads, "seed": seed}
    updates = {field: value for field, value in given.items() if value is not None}
    if updates:
        try:  # validated like the file's own policy (bounds live in models.request.Policy)
            req.policy = Policy.model_validate({**req.policy.model_dump(), **updates})
        except ValidationError as e:
            fail(f"policy override: {format_validation_error(e)}")
    if output is not None and not output.parent.is_dir():  # say so before solving
        fail(f"cannot write {output}: no directory {output.parent}")
    from solver import plan as make_plan  # only now: reading and checking the input is fast

    result = make_plan(req)
    text = result.model_dump_json(indent=1)
    if output is None:
        typer.echo(text)
    else:
        try:
            output.write_text(text + "\n")
        except OSError as e:
            fail(f"cannot write {output}: {e.strerror or e}")
    if html is not None:
        from api.cli.view import write_view

        write_view(req, result, html)
    typer.echo(summary(result), err=True)
