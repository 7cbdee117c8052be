"""One planning call as the planners see it: the request, its budget, its starting plan,
its incumbent reports and the notes that become the plan's explanation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from threading import Event

from models import Plan, PlanRequest
from solver.budget import Budget
from solver.linear import Limits
from solver.outcome import label
from solver.portfolio import Incumbents, Portfolio


@dataclass
class Context:
    """The state shared by the phases of one `solver.plan` call."""

    request: PlanRequest
    budget: Budget
    portfolio: Portfolio
    incumbents: Incumbents
    notes: list[str] = field(default_factory=list)
    compile_s: float = 0.0  # what compiling the last model cost (budget seconds)
    prune: int | None = None  # targets per job of the last model compiled (None: all)

    @classmethod
    def start(cls, request: PlanRequest, cancel: Event | None,
              on_incumbent: Callable[[Plan], None] | None) -> Context:
        """The context of a call starting now."""
        budget = Budget.of(request, cancel)
        notes: list[str] = []
        incumbents = Incumbents(request, budget, on_incumbent)
        return cls(request, budget, Portfolio(request, budget, incumbents, notes),
                   incumbents, notes)

    def limits(self, backend: str, share: float = 1.0) -> Limits:
        """What an exact solve by `backend` given `share` of the time left may use."""
        pol = self.request.policy
        return self.budget.limits(backend, pol.threads, pol.seed, pol.mip_gap, share)

    def label(self, producer: str) -> str:
        """The wire label of a plan `producer` made, as this call's policy names it."""
        return label(self.request, producer)
