"""CPU contention for benchmarks: busy processes pinned to the cores for a whole run.

`contended(n)` starts `n` processes that spin (a tight arithmetic loop, no I/O) before the
body runs and stops them after it, so a benchmark measures the solver on a degraded CPU
rather than guessing. Contender `i` is pinned to core `i mod cores` of this process's
affinity set (`os.sched_setaffinity`, round robin), so `n = 2 * cores` puts two busy
processes on every core. Contenders are killed when the body ends or raises, and each
also exits on its own when its parent is gone, so no busy process outlives the run.
`host_load()` reads the load the host carried before a run (other users of the cores),
so that a "quiet" measurement says how quiet it was.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess


def _spin(core: int | None, lifeline: Connection) -> None:
    """Busy loop pinned to `core` until the parent closes `lifeline` (or is gone)."""
    if core is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {core})
    x = 0
    while not lifeline.poll(0):
        for _ in range(200_000):  # ~10 ms of pure arithmetic between checks
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def host_load() -> float | None:
    """The host's load average over the last minute (runnable processes, the run's own
    contenders included), or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def cores() -> list[int]:
    """The cores this process may run on, in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


@contextlib.contextmanager
def contended(n: int) -> Iterator[list[int]]:
    """Run the body with `n` busy processes pinned round robin to the cores; yields their
    pids (empty when `n` is 0). They are stopped and reaped when the body ends."""
    if n <= 0:
        yield []
        return
    ctx = mp.get_context("spawn")
    avail = cores()
    pinnable = hasattr(os, "sched_setaffinity")
    procs: list[BaseProcess] = []
    ends: list[Connection] = []
    try:
        for i in range(n):
            reader, writer = ctx.Pipe(duplex=False)
            core = avail[i % len(avail)] if pinnable else None
            spinner = ctx.Process(target=_spin, args=(core, reader), daemon=True,
                                  name=f"gpuplan-contender-{i}")
            spinner.start()
            reader.close()
            procs.append(spinner)
            ends.append(writer)
        yield [p.pid for p in procs if p.pid is not None]
    finally:
        for w in ends:
            # a closed pipe reads as ready in the child (EOF): it leaves its loop
            w.close()
        for proc in procs:
            proc.join(2)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
