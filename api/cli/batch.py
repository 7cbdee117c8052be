"""`gpuplan batch`: solve many requests (and what-if variants) offline, locally or on Ray.

    gpuplan batch requests/ day.jsonl --out plans/ --jobs 2
    gpuplan batch snap.json --out sweep/ --set policy.objective=throughput,fairness \
        --add-nodes h200x16.json --summary-csv sweep.csv

Exit status: 0 when every request has a plan, 1 when any failed, 2 on bad arguments,
130 after Ctrl-C (the plans already written are kept; rerun with --resume to finish).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from api.cli.common import fail

if TYPE_CHECKING:
    from api.batch import Row, SolveFn

def solve_function() -> SolveFn:
    """The function every request is solved with: `solver.plan` (tests substitute a fake)."""
    from solver import plan

    return plan


class _Display:
    """Progress on stderr: a bar with ETA on a terminal, one line per result otherwise."""

    def __init__(self, total: int) -> None:
        self.console = Console(stderr=True)
        self.total = total
        self.done = 0
        self.progress: Progress | None = None
        self.task_id: TaskID | None = None

    @contextlib.contextmanager
    def running(self) -> Iterator[_Display]:
        if not self.console.is_terminal:
            yield self
            return
        self.progress = Progress(
            TextColumn("[progress.description]{task.description}"), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=self.console,
        )
        with self.progress:
            self.task_id = self.progress.add_task("solving", total=self.total)
            yield self

    def row(self, row: Row) -> None:
        """Show one result (and always the failures, with where they came from)."""
        from api.batch import output_name

        self.done += 1
        name = output_name(row.name, row.variant)
        if row.failed:
            line = f"[{self.done}/{self.total}] {name}: FAILED {row.origin}: {row.error}"
        elif row.resumed:
            line = f"[{self.done}/{self.total}] {name}: {row.status} (kept from earlier run)"
        else:
            gap = "-" if row.gap is None else f"{row.gap:.3g}"
            line = (f"[{self.done}/{self.total}] {name}: {row.status} "
                    f"placed {row.jobs_placed} unplaced {row.jobs_unplaced} gap {gap} "
                    f"{row.wall_s or 0.0:.2f}s")
        if self.progress is None:
            typer.echo(line, err=True)
            return
        if row.failed:
            self.progress.console.print(line, markup=False, highlight=False)
        if self.task_id is not None:
            self.progress.advance(self.task_id)


def batch(
    inputs: Annotated[list[Path], typer.Argument(
        help="Request files, directories of *.json requests, or JSON Lines files (*.jsonl).",
        show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the plan files.",
                                      file_okay=False)],
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", min=1, help="Concurrent solves (default: the CPU count).")] = None,
    threads: Annotated[int | None, typer.Option(
        min=1, max=256,
        help="Threads per solve (default: CPUs // jobs; a request asking fewer keeps them).",
    )] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Skip requests whose plan file exists and is valid.")] = False,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", metavar="FIELD=V1,V2",
        help="Sweep a dotted request field over values (JSON when it parses); repeat for a "
             "grid.")] = None,
    add_nodes: Annotated[list[Path] | None, typer.Option(
        "--add-nodes", metavar="FILE",
        help="A variant with this JSON list of nodes added to the cluster (repeatable).")] = None,
    drain: Annotated[list[str] | None, typer.Option(
        "--drain", metavar="NODE",
        help="A variant with these nodes unschedulable (repeat or comma-separate).")] = None,
    baseline: Annotated[bool, typer.Option(
        "--baseline/--no-baseline",
        help="With --add-nodes/--drain, also solve the cluster as given.")] = True,
    summary_csv: Annotated[Path | None, typer.Option(
        "--summary-csv", metavar="FILE", help="Also write one CSV line per result.",
        dir_okay=False)] = None,
    backend: Annotated[str, typer.Option(
        help="Where to solve: local (processes on this machine) or ray.")] = "local",
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address",
        help="Ray cluster address (auto, ray://host:10001); default RAY_ADDRESS or a new "
             "local Ray.")] = None,
) -> None:
    """Solve many requests offline and write one plan file per request and variant."""
    from api.batch import (
        BACKENDS,
        BackendConfig,
        BatchOptions,
        CsvSink,
        InputError,
        SweepError,
        build_variants,
        expand,
        make_backend,
        run_batch,
    )
    from api.batch.backends.ray_backend import RayUnavailable
    from api.batch.inputs import count

    if backend not in BACKENDS:
        fail(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            fail("--backend ray needs Ray: pip install 'gpuplan[ray]'")
    try:
        files = expand(inputs)
        variants = build_variants(set_ or [], add_nodes or [], drain or [], baseline=baseline)
    except (InputError, SweepError) as e:
        fail(str(e))
    n_jobs = jobs or os.cpu_count() or 1
    options = BatchOptions(out_dir=out, jobs=n_jobs, threads=threads, resume=resume,
                           variants=variants)
    try:
        out.mkdir(parents=True, exist_ok=True)
        csv_handle = summary_csv.open("w", newline="") if summary_csv else None
    except OSError as e:
        fail(f"cannot write output: {e.strerror or e}: {e.filename}")
    display = _Display(count(files) * len(variants))
    sink = CsvSink(csv_handle) if csv_handle else None

    def on_row(row: Row) -> None:
        if sink is not None:
            sink.write(row)
        display.row(row)

    config = BackendConfig(jobs=n_jobs, threads=options.solve_threads, ray_address=ray_address)
    try:
        with display.running():
            summary = run_batch(files, options, solve=solve_function(),
                                backend=make_backend(backend, config), on_row=on_row)
    except RayUnavailable as e:
        fail(str(e))
    finally:
        if csv_handle is not None:
            csv_handle.close()
    console = Console()
    table = summary.table()
    if not console.is_terminal:  # a file or a log: never fold the table
        wide = console.options.update_width(10_000)
        console.width = max(80, Measurement.get(console, wide, table).maximum)
    console.print(table)
    if summary.interrupted:
        typer.echo(f"gpuplan: interrupted after {summary.total.requests} of {summary.expected};"
                   " plans written so far are kept (rerun with --resume to finish)", err=True)
    raise typer.Exit(summary.exit_code)
