"""The local backend: solves in this process (`jobs == 1`) or in a pool of processes.

Workers are spawned (not forked: the parent may run threads) and ignore SIGINT, so Ctrl-C
reaches only the parent, which then terminates the workers and joins the pool (the queued
solves are dropped).
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

from api.batch.backends import in_flight_limit, top_up
from api.batch.task import SolveFn, SolveOutcome, SolveTask, solve_one


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(pool: ProcessPoolExecutor, workers: set[multiprocessing.process.BaseProcess]
          ) -> None:
    """Stop an interrupted pool now: terminate its workers, then join its manager thread.

    The join matters: a manager thread still closing its wake-up pipe when the interpreter
    exits races with `concurrent.futures`' exit hook, which writes to that pipe and prints
    an OSError traceback (the unlocked wake-up of CPython gh-125451, still in 3.11). With
    the workers gone, the manager finds the pool broken, fails the queued futures and ends
    at once.
    """
    for proc in workers:
        proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)
    for proc in workers:
        proc.join(timeout=5)


def _outcome(fut: Future[SolveOutcome], key: int) -> SolveOutcome:
    try:
        return fut.result()
    except Exception as e:  # a worker died or a result could not be pickled
        return SolveOutcome(key, None, f"worker failed: {type(e).__name__}: {e}")


@dataclass
class LocalBackend:
    """Solve on this machine with `jobs` concurrent solves."""

    jobs: int

    def solve_all(self, tasks: Iterable[SolveTask], solve: SolveFn) -> Iterator[SolveOutcome]:
        """Yield each task's outcome as it finishes; at most 2 * jobs tasks in flight."""
        if self.jobs <= 1:
            for task in tasks:
                yield solve_one(task, solve)
            return
        yield from self._pool(tasks, solve)

    def _pool(self, tasks: Iterable[SolveTask], solve: SolveFn) -> Iterator[SolveOutcome]:
        before = set(multiprocessing.active_children())
        pool = ProcessPoolExecutor(
            self.jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_ignore_sigint,
        )
        pending: dict[Future[SolveOutcome], int] = {}
        source = iter(tasks)
        limit = in_flight_limit(self.jobs)
        finished = False
        try:
            more = True
            while True:
                if more:
                    more = top_up(pending, source, limit,
                                  lambda task: pool.submit(solve_one, task, solve))
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield _outcome(fut, pending.pop(fut))
            finished = True
        finally:
            if finished:
                pool.shutdown(wait=True)
            else:
                _stop(pool, set(multiprocessing.active_children()) - before)
