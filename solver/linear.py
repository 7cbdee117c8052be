"""A solver-neutral integer linear model: the one formulation every exact backend solves.

The formulation (the solver/formulation package) is written once against `LinearModel`; each backend
(CP-SAT, MILP via CBC or HiGHS) translates it. Both backends therefore solve the same
problem by construction, which is what lets the test-suite compare their optima.

All variables are integers with finite bounds (booleans are 0..1). Constraints are
`lo <= sum(coef * var) <= hi` with float coefficients; the CP-SAT backend scales rows to
integers (exactly when the coefficients are decimal, conservatively otherwise).

Building a model can be time-boxed without the builder knowing: inside
`with build_deadline(t):`, adding variables or rows past the `time.monotonic()` instant `t`
raises `BuildTimeout` (checked every `_CHECK_EVERY` additions).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

Terms = dict[int, float]

#: How often (in variables or rows added) the build deadline is checked.
_CHECK_EVERY = 256
_DEADLINE: ContextVar[float | None] = ContextVar("gpuplan_build_deadline", default=None)


class ModelTooLarge(RuntimeError):
    """The model grew past its `max_vars` cap (the caller then prunes or falls back)."""


class BuildTimeout(RuntimeError):
    """The model was still being built at its `build_deadline`."""


@contextmanager
def build_deadline(deadline: float | None) -> Iterator[None]:
    """Models built inside this block stop with `BuildTimeout` past `deadline`."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_deadline() -> None:
    """Raise `BuildTimeout` when the build deadline has passed (for model-building loops
    that add no variable or row for a while)."""
    _check_deadline()


def _check_deadline() -> None:
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise BuildTimeout("the model could not be built in the time left")


def add_terms(acc: Terms, terms: Mapping[int, float] | Iterable[tuple[int, float]],
              scale: float = 1.0) -> Terms:
    """acc += scale * terms, in place; returns acc."""
    items = terms.items() if isinstance(terms, Mapping) else terms
    for v, c in items:
        acc[v] = acc.get(v, 0.0) + scale * c
    return acc


@dataclass(slots=True)
class Constraint:
    """lo <= sum(terms) <= hi (either side may be None)."""

    terms: Terms
    lo: float | None
    hi: float | None
    name: str = ""


@dataclass
class LinearModel:
    """Integer variables, linear constraints, a linear objective to maximise, hints."""

    names: list[str] = field(default_factory=list)
    lbs: list[int] = field(default_factory=list)
    ubs: list[int] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    objective: Terms = field(default_factory=dict)
    objective_const: float = 0.0
    hints: dict[int, int] = field(default_factory=dict)
    max_vars: int | None = None

    @property
    def num_vars(self) -> int:
        return len(self.names)

    def new_var(self, name: str, lb: int = 0, ub: int = 1) -> int:
        """A new integer variable in [lb, ub]; returns its index."""
        if ub < lb:
            raise ValueError(f"empty domain for {name}: [{lb}, {ub}]")
        if self.max_vars is not None and len(self.names) >= self.max_vars:
            raise ModelTooLarge(f"more than {self.max_vars} variables")
        if len(self.names) % _CHECK_EVERY == 0:
            _check_deadline()
        self.names.append(name)
        self.lbs.append(int(lb))
        self.ubs.append(int(ub))
        return len(self.names) - 1

    def add(self, terms: Mapping[int, float] | Iterable[tuple[int, float]],
            lo: float | None = None, hi: float | None = None, name: str = "") -> None:
        """Add lo <= terms <= hi. Zero coefficients are dropped; an empty row is checked."""
        t: Terms = {}
        add_terms(t, terms)
        t = {v: c for v, c in t.items() if c != 0.0}
        if len(self.constraints) % _CHECK_EVERY == 0:
            _check_deadline()
        if not t:
            if (lo is not None and lo > 1e-9) or (hi is not None and hi < -1e-9):
                # An empty row that cannot hold: keep it so the model is infeasible.
                self.constraints.append(Constraint({}, lo, hi, name))
            return
        self.constraints.append(Constraint(t, lo, hi, name))

    def fix(self, var: int, value: int) -> None:
        """Fix a variable's value through its bounds."""
        self.lbs[var] = max(self.lbs[var], value)
        self.ubs[var] = min(self.ubs[var], value)

    def copy(self) -> LinearModel:
        """A copy whose constraints and bounds can be extended independently."""
        return LinearModel(
            names=list(self.names),
            lbs=list(self.lbs),
            ubs=list(self.ubs),
            constraints=list(self.constraints),
            objective=dict(self.objective),
            objective_const=self.objective_const,
            hints=dict(self.hints),
        )


SolveStatus = Literal["optimal", "feasible", "infeasible", "unknown"]


@dataclass
class Limits:
    """What a backend is allowed: wall time, threads, seed, relative gap, and optionally a
    deterministic work limit (CP-SAT's deterministic time; the wall time stays a cap)."""

    time_limit_s: float
    threads: int | None = None
    seed: int | None = None
    mip_gap: float = 1e-4
    deterministic_time: float | None = None


@dataclass
class Solution:
    """A backend's answer: status, values of every variable (when any), objective, bound."""

    status: SolveStatus
    values: list[int] | None = None
    objective: float | None = None
    bound: float | None = None
    wall_s: float = 0.0
    info: dict[str, float | int | str] = field(default_factory=dict)

    def value(self, var: int) -> int:
        assert self.values is not None
        return self.values[var]
