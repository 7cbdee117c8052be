"""Planning driver (being written)."""

from __future__ import annotations

from collections.abc import Callable
from threading import Event

from models import Plan, PlanRequest


class PlanningError(RuntimeError):
    """A planner produced a plan that fails validation: a bug, raised loudly."""


def plan(
    request: PlanRequest,
    *,
    cancel: Event | None = None,
    on_incumbent: Callable[[Plan], None] | None = None,
) -> Plan:
    """Solve `request` and return a validated Plan."""
    raise NotImplementedError
