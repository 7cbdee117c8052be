"""The `gpuplan` command.

Every command is one line of `COMMANDS`: its name, the `"module:attribute"` of its typer
function (or `typer.Typer` group) and the summary `gpuplan --help` lists. The module is
imported only when the command runs, so adding a command is adding its module and one line
here (sub-commands of `gpuplan bench`: one line of `api.cli.bench.BENCH_COMMANDS`).
Loading, help layout and the one-line error boundary live in `api.cli.group`.
"""

from __future__ import annotations

import logging

import typer

from api.cli.group import Lazy, LazyGroup

COMMANDS: dict[str, Lazy] = {
    "solve": Lazy("api.cli.solve:solve", "Plan one request; the plan JSON goes to stdout."),
    "validate": Lazy("api.cli.validate:validate", "Check a plan against its request."),
    "view": Lazy("api.cli.view:view", "Draw a plan as an HTML page (the plan view)."),
    "catalog": Lazy("api.cli.validate:catalog", "Show the built-in GPU models and MIG profiles."),
    "serve": Lazy("api.cli.serve:serve", "Serve the planner's HTTP API."),
    "batch": Lazy("api.cli.batch:batch", "Solve many requests and what-if variants offline."),
    "simulate": Lazy("api.cli.simulate:simulate", "Replay a job trace under several policies."),
    "bench": Lazy("api.cli.bench:bench", "Run a benchmark (scale, openb, load, exact, vbp)."),
    "k8s": Lazy("api.cli.k8s:k8s_app", "Import a Kubernetes snapshot or export a plan to it."),
    "slurm": Lazy("api.cli.slurm:slurm_app", "Plan a Slurm cluster's GPU queue and apply it."),
}


class _Commands(LazyGroup):
    lazy = COMMANDS


app = typer.Typer(
    name="gpuplan",
    cls=_Commands,
    help="Optimization-based GPU allocation planner for deep-learning clusters. "
         "Run 'gpuplan COMMAND --help' for a command's options.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Group callback: makes `app` a group even though its commands are added lazily."""


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app(prog_name="gpuplan")
