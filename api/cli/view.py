"""`gpuplan view`: draw a plan and its request as a self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from api.cli.common import fail, load_plan, load_request
from models import Plan, PlanRequest


def write_view(request: PlanRequest, plan: Plan, output: Path) -> None:
    """Render the plan view of `plan` to `output` (exit 2 with one line if it cannot)."""
    from api.view import render

    try:
        output.write_text(render(request, plan), encoding="utf-8")
    except OSError as e:
        fail(f"cannot write {output}: {e.strerror or e}")


def view(
    request: Annotated[Path, typer.Argument(metavar="REQUEST",
                                            help="PlanRequest JSON file ('-' = stdin).")],
    plan: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON file.")],
    output: Annotated[Path, typer.Option("-o", "--output", metavar="FILE",
                                         help="Where to write the HTML page.")] = Path(
        "plan.html"),
) -> None:
    """Draw PLAN on the cluster of REQUEST as an HTML page that loads nothing from anywhere
    (open it in a browser): GPUs by node and topology domain, coloured by job, with the
    jobs started, moved and preempted, the MIG changes and the unplaced jobs."""
    req = load_request(request)
    pln = load_plan(plan)
    write_view(req, pln, output)
    typer.echo(f"wrote {output}", err=True)
