"""Offline batch solving: many requests (and what-if variants of them) to plan files.

`run_batch(files, options, solve=..., backend=...)` is the engine behind `gpuplan batch`;
backends (`local`, `ray`) are in `api.batch.backends`. See docs/batch.md.
"""

from api.batch.backends import BACKENDS, Backend, BackendConfig, make_backend
from api.batch.inputs import InputError, Source, expand, iter_sources
from api.batch.runner import BatchOptions, default_threads, output_name, run_batch
from api.batch.summary import FAILED, CsvSink, Row, Summary
from api.batch.sweep import BASE, SweepError, Variant, build_variants
from api.batch.task import SolveFn, SolveOutcome, SolveTask

__all__ = [
    "BACKENDS",
    "BASE",
    "FAILED",
    "Backend",
    "BackendConfig",
    "BatchOptions",
    "CsvSink",
    "InputError",
    "Row",
    "SolveFn",
    "SolveOutcome",
    "SolveTask",
    "Source",
    "Summary",
    "SweepError",
    "Variant",
    "build_variants",
    "default_threads",
    "expand",
    "iter_sources",
    "make_backend",
    "output_name",
    "run_batch",
]
