"""The `gpuplan` command: one entry point for serve, solve, validate, catalog, batch, bench,
simulate and k8s. Each command lives in its own module with a `register(app)` function.
"""

from __future__ import annotations

import importlib
import logging

import typer

app = typer.Typer(
    name="gpuplan",
    help="Optimization-based GPU allocation planner for deep-learning clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: Command modules under api.cli, each exposing `register(app: typer.Typer) -> None`.
COMMAND_MODULES = ("solve", "validate", "view", "serve", "batch", "bench", "simulate", "k8s")


def _register_all() -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"api.cli.{name}")
        module.register(app)


_register_all()


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()
