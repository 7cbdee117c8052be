"""Prometheus metrics of the service, in a registry owned by one app instance.

- `gpuplan_solves_total{backend, status}`: finished solves; status is the plan's status
  (optimal, feasible, heuristic, infeasible) or the failure (timeout, cancelled, error).
- `gpuplan_solve_duration_seconds{backend}`: wall-clock time on a worker.
- `gpuplan_solves_rejected_total`: submissions answered 429.
- `gpuplan_queue_depth`, `gpuplan_solves_in_flight`: read from the pool at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Histogram buckets (seconds) spanning heuristic answers to long exact solves.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """The service's metrics; one instance per app so tests can build several apps."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.solves = Counter("gpuplan_solves", "Finished solves by backend and status.",
                              ["backend", "status"], registry=self.registry)
        self.duration = Histogram("gpuplan_solve_duration_seconds",
                                  "Wall-clock solve time on a worker.", ["backend"],
                                  buckets=DURATION_BUCKETS, registry=self.registry)
        self.rejected = Counter("gpuplan_solves_rejected",
                                "Solves refused with 429 (queue full).", registry=self.registry)
        self.queue_depth = Gauge("gpuplan_queue_depth", "Solves waiting for a worker.",
                                 registry=self.registry)
        self.in_flight = Gauge("gpuplan_solves_in_flight", "Solves running on a worker.",
                               registry=self.registry)

    def bind_pool(self, queue_depth: Callable[[], float], in_flight: Callable[[], float]) -> None:
        """Read the two gauges from the pool at scrape time."""
        self.queue_depth.set_function(queue_depth)
        self.in_flight.set_function(in_flight)

    def observe(self, backend: str, status: str, seconds: float | None) -> None:
        """Count one finished solve and, when it ran, its duration."""
        self.solves.labels(backend=backend, status=status).inc()
        if seconds is not None:
            self.duration.labels(backend=backend).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
