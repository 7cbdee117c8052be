"""`gpuplan bench ...`: the benchmarks, each written beside its instances in `benchmarks/`.

One line of `BENCH_COMMANDS` per sub-command; its module is imported only when it runs.
"""

from __future__ import annotations

import typer

from api.cli.group import Lazy, LazyGroup

BENCH_COMMANDS: dict[str, Lazy] = {
    "run": Lazy("benchmarks.scale:run_command", "Scale: generated instances on each backend."),
    "curve": Lazy("benchmarks.curve:curve_command",
                  "Gap and overrun against the time limit (plot)."),
    "openb": Lazy("benchmarks.openb.cli:openb_command",
                  "Fragmentation: the OpenB trace, online and in batches."),
    "load": Lazy("benchmarks.load:load_command", "Service load: POST /v1/plans throughput."),
    "exact": Lazy("benchmarks.exact:exact_command", "Exact solves of small instances."),
    "vbp": Lazy("benchmarks.vbp:vbp_command", "Known-optimum vector bin packing instances."),
    "robustness": Lazy("api.cli.robustness:robustness_command",
                       "Hostile input, overload and /healthz probes."),
    "latency": Lazy("benchmarks.latency:latency_command", "End-to-end latency and sessions."),
    "colocation": Lazy("benchmarks.colocation:colocation_command",
                       "Co-location: interference-aware vs blind packing (Gavel factors)."),
    "elastic": Lazy("benchmarks.elastic:elastic_command",
                    "Elastic gangs on Pollux's workloads."),
}


class _BenchCommands(LazyGroup):
    lazy = BENCH_COMMANDS


bench = typer.Typer(
    name="bench",
    cls=_BenchCommands,
    help="Benchmarks: scale (run), gap against the time limit (curve), fragmentation "
         "(openb), service load (load), exact solves (exact), known-optimum packing (vbp), "
         "hostile input and overload (robustness), elastic gangs on Pollux's workloads "
         "(elastic).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@bench.callback()
def _bench_root() -> None:
    """Group callback: makes `bench` a group even though its commands are added lazily."""
