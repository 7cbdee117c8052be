"""Exact backends: each translates a `LinearModel` and solves it under `Limits`.

One Protocol, one registry. `BACKENDS["cp_sat"]`, `BACKENDS["cbc"]`, `BACKENDS["highs"]`.
"""

from __future__ import annotations

from collections.abc import Callable
from threading import Event
from typing import Protocol

from solver.backends.cp_sat import CpSatBackend
from solver.backends.milp import MilpBackend
from solver.linear import Limits, LinearModel, Solution

#: Called with each improving incumbent: (values, objective).
IncumbentCallback = Callable[[list[int], float], None]


class Backend(Protocol):
    """An exact solver for a LinearModel (maximisation)."""

    name: str

    def solve(self, model: LinearModel, limits: Limits, *, cancel: Event | None = None,
              on_incumbent: IncumbentCallback | None = None) -> Solution:
        """Solve `model` within `limits`; never exceed the time limit by more than ~0.2 s."""
        ...


BACKENDS: dict[str, Backend] = {
    "cp_sat": CpSatBackend(),
    "cbc": MilpBackend("cbc"),
    "highs": MilpBackend("highs"),
}

__all__ = ["BACKENDS", "Backend", "IncumbentCallback", "Limits", "LinearModel", "Solution"]
