"""The Ray backend: the same solves as Ray tasks, on a local or an existing Ray cluster.

Install with `pip install 'gpuplan[ray]'`. With no address (and no `RAY_ADDRESS` in the
environment) a private local Ray runtime is started and shut down afterwards; with one
(`auto`, `ray://head:10001`, or the `RAY_ADDRESS` that `ray job submit` sets) the tasks go to
that cluster, whose workers must be able to import gpuplan (a `working_dir` or an image).
Results stream back with `ray.wait` as they finish; at most 2 * jobs tasks are in flight.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from api.batch.backends import in_flight_limit, top_up
from api.batch.task import SolveFn, SolveOutcome, SolveTask, solve_one

#: Object store of a private local runtime: small, results are small and collected at once.
LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2


class RayUnavailable(RuntimeError):
    """Ray is not installed (the `gpuplan[ray]` extra) or the cluster cannot be reached."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise RayUnavailable(
            "the ray backend needs Ray: pip install 'gpuplan[ray]'"
        ) from e
    return ray


@dataclass
class RayBackend:
    """Solve as Ray tasks, each reserving `threads` CPUs, `jobs` at a time (twice queued)."""

    jobs: int
    threads: int
    address: str | None = None

    def _connect(self, ray: Any) -> bool:
        """Initialise Ray unless it already is; True when this call started it."""
        if ray.is_initialized():
            return False
        local = self.address is None and not os.environ.get("RAY_ADDRESS")
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                   "logging_level": "warning"}
        if local:
            options["num_cpus"] = self.jobs * self.threads
            options["object_store_memory"] = LOCAL_OBJECT_STORE_BYTES
        try:
            ray.init(address=self.address, **options)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise RayUnavailable(f"cannot start or reach Ray at {self.address}: {e}") from e
        return True

    def solve_all(self, tasks: Iterable[SolveTask], solve: SolveFn) -> Iterator[SolveOutcome]:
        """Yield each task's outcome as its Ray task finishes."""
        ray = _import_ray()
        started = self._connect(ray)
        cpus = min(self.threads, max(1, int(ray.cluster_resources().get("CPU", 1))))
        remote = ray.remote(solve_one).options(num_cpus=cpus, max_retries=1)
        solve_ref = ray.put(solve)
        pending: dict[Any, int] = {}
        source = iter(tasks)
        limit = in_flight_limit(self.jobs)
        try:
            more = True
            while True:
                if more:
                    more = top_up(pending, source, limit,
                                  lambda task: remote.remote(task, solve_ref))
                if not pending:
                    break
                ready, _ = ray.wait(list(pending), num_returns=1)
                ref = ready[0]
                yield _outcome(ray, ref, pending.pop(ref))
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if started:
                ray.shutdown()


def _outcome(ray: Any, ref: Any, key: int) -> SolveOutcome:
    try:
        outcome: SolveOutcome = ray.get(ref)
    except Exception as e:  # the task's worker died or Ray lost it
        return SolveOutcome(key, None, f"ray task failed: {type(e).__name__}: {e}")
    return outcome
