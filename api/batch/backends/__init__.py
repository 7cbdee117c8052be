"""Where the solves run: this machine's processes, or a Ray cluster.

Every backend implements one method, `solve_all(tasks, solve)`: it pulls tasks lazily, keeps
at most a bounded number in flight, and yields outcomes as they finish (not in input order),
so memory stays flat however many tasks there are. Closing the generator early (Ctrl-C)
stops the running solves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from api.batch.task import SolveFn, SolveOutcome, SolveTask


@dataclass(frozen=True)
class BackendConfig:
    """What every backend may use: concurrency, threads per solve, the Ray address."""

    jobs: int
    threads: int
    ray_address: str | None = None


class Backend(Protocol):
    """Runs solves and streams their outcomes back as they finish."""

    def solve_all(self, tasks: Iterable[SolveTask], solve: SolveFn) -> Iterator[SolveOutcome]:
        """Solve every task, at most a bounded number at once, yielding outcomes when done."""
        ...


def in_flight_limit(jobs: int) -> int:
    """Tasks submitted but not yet collected: enough to keep every worker busy, no more."""
    return 2 * jobs


Handle = TypeVar("Handle")


def top_up(pending: dict[Handle, int], source: Iterator[SolveTask], limit: int,
           submit: Callable[[SolveTask], Handle]) -> bool:
    """Submit tasks from `source` until `limit` are pending (handle -> task key); False
    once `source` is exhausted."""
    while len(pending) < limit:
        task = next(source, None)
        if task is None:
            return False
        pending[submit(task)] = task.key
    return True


def _local(config: BackendConfig) -> Backend:
    from api.batch.backends.local import LocalBackend

    return LocalBackend(config.jobs)


def _ray(config: BackendConfig) -> Backend:
    from api.batch.backends.ray_backend import RayBackend

    return RayBackend(config.jobs, config.threads, config.ray_address)


#: Backend name -> factory. Imports are deferred so that Ray is only loaded when asked for.
BACKENDS: dict[str, Callable[[BackendConfig], Backend]] = {"local": _local, "ray": _ray}


def make_backend(name: str, config: BackendConfig) -> Backend:
    """The backend registered as `name` (KeyError for an unknown name)."""
    return BACKENDS[name](config)
