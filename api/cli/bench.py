"""`gpuplan bench ...`: the scale benchmark, the OpenB fragmentation benchmark and the
service load test, each written beside its instances in `benchmarks/`."""

from __future__ import annotations

import importlib

import typer

#: bench sub-command -> "module:function" (a typer-compatible function).
BENCH_COMMANDS = {
    "run": "benchmarks.scale:run_command",
    "openb": "benchmarks.openb.cli:openb_command",
    "load": "benchmarks.load:load_command",
    "exact": "benchmarks.exact:exact_command",
    "vbp": "benchmarks.vbp:vbp_command",
    "robustness": "api.cli.robustness:robustness_command",
}


def register(app: typer.Typer) -> None:
    """Add the `bench` command group to `app`."""
    bench = typer.Typer(help="Benchmarks: scale (run), fragmentation (openb), service load "
                        "(load), exact solves (exact), known-optimum packing (vbp), "
                        "hostile input and overload (robustness).",
                        no_args_is_help=True)
    for name, target in BENCH_COMMANDS.items():
        module_name, func_name = target.split(":")
        module = importlib.import_module(module_name)
        bench.command(name)(getattr(module, func_name))
    app.add_typer(bench, name="bench")
