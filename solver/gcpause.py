"""The cyclic garbage collector paused for the length of a solve.

A solve allocates many small objects (placements, index sets, plan models) but makes few
reference cycles, so CPython's generational collector finds almost nothing to free; yet
each of its older-generation passes walks every tracked object, and a large request holds
millions of them (16,384 GPUs / 20,000 jobs: the request, its compiled jobs, the occupancy
indexes). Measured on that size, collections took 15% of a greedy pass and 35-45% of
building and validating the plan (CPU time). `gc_paused` turns the collector off while
any solve of this process runs and back on (when it was on before the first) when the
last one ends; reference counting still frees everything that is not in a cycle, and the
next collection after the solve frees the rest.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()
_ACTIVE = 0            # solves running with the collector paused
_WAS_ENABLED = False   # whether the collector was on when the first of them started


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off (module doc); nests and is thread-safe:
    the collector's state before the outermost pause is restored after the last one."""
    global _ACTIVE, _WAS_ENABLED
    with _LOCK:
        if _ACTIVE == 0:
            _WAS_ENABLED = gc.isenabled()
            gc.disable()
        _ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0 and _WAS_ENABLED:
                gc.enable()


def promote_survivors() -> None:
    """Move every object the collector tracks to its oldest generation without walking
    them (`gc.freeze`, then `gc.unfreeze`, which puts the frozen objects in the oldest
    generation and counts them toward no collection), unless something of this process
    keeps objects frozen (a solver worker freezes its imports: api/pool.py), which this
    would undo. For a caller whose objects made since the pause mostly live on and hold
    few cycles: a planning session's next state and plan (16,384 GPUs / 20,000 jobs: some
    70,000 objects, no cyclic garbage; small ones: under 100 objects of closures in
    cycles), which the first collection after the pause would
    otherwise walk (0.04-0.07 s of CPU), and each later one of the older generations
    again (a full collection: 0.3-0.4 s, every few plans). Cycles among them are still
    freed by the next full collection."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
