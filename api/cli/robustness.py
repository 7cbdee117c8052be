"""`gpuplan bench robustness`: hostile input, overload, a killed worker, schemathesis and
/healthz latency under load, against real loopback servers and the CLI (api/robustness.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def robustness_command(
    cases: Annotated[int, typer.Option(
        min=1, max=5000, help="schemathesis cases per operation (-n), auth on and off.")] = 300,
    schemathesis: Annotated[bool, typer.Option(
        "--schemathesis/--no-schemathesis", help="Run the schemathesis passes.")] = True,
    cli: Annotated[bool, typer.Option(
        "--cli/--no-cli", help="Run the corpus through the CLI.")] = True,
    load: Annotated[bool, typer.Option(
        "--load/--no-load", help="Run the /healthz latency probes.")] = True,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Also write the table as JSON.")] = None,
) -> None:
    """Bad-input corpus (HTTP and CLI), overload, kill -9, schemathesis and /healthz p99
    under load; prints one table and exits 1 when a probe fails."""
    import json
    from dataclasses import asdict

    from api.robustness import Options, format_rows, run

    rows = run(Options(schemathesis_cases=cases, cli=cli, schemathesis=schemathesis,
                       load=load))
    typer.echo(format_rows(rows))
    if output is not None:
        output.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    if not all(r.ok for r in rows):
        raise typer.Exit(1)
