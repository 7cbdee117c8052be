"""Workloads for the simulator: ITP traces, Alibaba PAI 2023 pods, Pollux's elastic
workloads, Microsoft Philly jobs with their tenants and a synthetic mix.

`load_trace(spec, ...)` picks the loader from the file's CSV header (ITP, PAI, Pollux or
Philly), the word `synthetic`, or `pollux:K` (Pollux's workload K, 1-8, from the shared
data); each loader documents its mapping from trace rows to jobs.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from benchmarks.sim.workloads import itp, pai, philly, pollux, synthetic
from benchmarks.sim.workloads.trace import TraceJob, rebase


class TraceError(ValueError):
    """A trace that cannot be read or recognised."""


def _header(path: Path) -> tuple[str, ...]:
    try:
        with path.open(newline="") as f:
            return tuple(next(csv.reader(f), []))
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from e


Loader = Callable[..., list[TraceJob]]

#: Recognised CSV headers (their first columns) -> loader.
LOADERS: dict[tuple[str, ...], Loader] = {itp.HEADER: itp.load_itp, pai.HEADER: pai.load_pai,
                                          pollux.HEADER: pollux.load_pollux,
                                          philly.HEADER: philly.load_philly}

#: Loaders that can skip the first jobs of a file (`skip`, the start of a window).
SKIPPING: frozenset[Loader] = frozenset({philly.load_philly})


def load_trace(spec: str, *, limit: int | None = None, seed: int = 0, max_gang: int = 64,
               gpus_per_node: int = 8, arrival_scale: float = 1.0,
               skip: int = 0) -> list[TraceJob]:
    """The jobs of `spec`: an ITP, PAI or Philly CSV file, or `synthetic` (500 jobs by
    default).

    Gangs are capped at `max_gang` GPUs; gangs of at most `gpus_per_node` stay on one node.
    `skip` drops the first jobs in arrival order (Philly traces only).
    """
    if spec == "synthetic":
        if skip:
            raise TraceError("skip applies to the Philly trace only")
        return synthetic.generate(limit or 500, seed=seed, arrival_scale=arrival_scale,
                                  max_gang=max_gang, gpus_per_node=gpus_per_node)
    path = Path(spec)
    if spec.startswith("pollux:"):
        k = spec.removeprefix("pollux:")
        if not k.isdigit() or not 1 <= int(k) <= 8:
            raise TraceError(f"{spec}: Pollux workloads are pollux:1 to pollux:8")
        path = pollux.workload_path(int(k))
    header = _header(path)
    for prefix, loader in LOADERS.items():
        if header[: len(prefix)] == prefix:
            if skip and loader not in SKIPPING:
                raise TraceError(f"{spec}: skip applies to the Philly trace only")
            extra = {"skip": skip} if loader in SKIPPING else {}
            return loader(path, limit=limit, seed=seed, max_gang=max_gang,
                          gpus_per_node=gpus_per_node, arrival_scale=arrival_scale, **extra)
    raise TraceError(f"{spec}: unrecognised trace (expected an ITP, PAI, Pollux or Philly "
                     "CSV header, 'synthetic' or 'pollux:K')")


__all__ = ["TraceError", "TraceJob", "load_trace", "rebase"]
