"""The response side of the wire contract: Plan, Assignment, Unplaced, MigChange, stats."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
)

from models.request import MigInstance, Placement

#: Decimals kept of a plan's objective value, bound and gap (1e-9).
FIGURE_DECIMALS = 9

#: Placement keys left out of a plan's JSON when they are null.
_OPTIONAL_PLACEMENT_KEYS = ("mig", "fraction")

_M = TypeVar("_M", bound=BaseModel)

_set = object.__setattr__


def _trusted_many(cls: type[_M], rows: Iterable[dict[str, Any]]) -> list[_M]:
    """Instances of `cls`, one holding each `values` of `rows` (every field, in field
    order) as they are.

    It is what `model_construct` builds for a model without aliases, extras, private
    attributes or post-init hook, without its loop over the fields: a plan of 20,000 jobs
    holds as many assignments and reasons, and `model_construct` cost more than the rest
    of dressing one. Each slot of every instance is set in one C-level pass (`map` of the
    slot's setter; `any` drains it, the setter answering None), not in a Python loop
    over the instances, which costs a quarter more. Nothing is checked: the values must
    already be of the fields' types (tests/solver/test_build_fast.py holds the instances
    equal to validated ones, so a pydantic release that stores a model differently fails
    there)."""
    rows = rows if isinstance(rows, list) else list(rows)
    n = len(rows)
    out = list(map(cls.__new__, repeat(cls, n)))
    any(map(_set, out, repeat("__dict__"), rows))
    # each instance its own set of the fields set (pydantic adds to it on assignment)
    any(map(_SET_FIELDS_SET, out, map(set, repeat(frozenset(cls.model_fields), n))))
    any(map(_SET_EXTRA, out, repeat(None, n)))
    any(map(_SET_PRIVATE, out, repeat(None, n)))
    return out


#: The setters of BaseModel's slots (`_trusted_many`).
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__


PlanStatus = Literal["optimal", "feasible", "heuristic", "infeasible"]

#: Reason codes for unplaced jobs. The first five are the contract's; `preempted` marks a
#: running job the plan stops, `priority_order` a job held back by `priority_fifo` and
#: `invalid_current` a running job whose current placement is itself inconsistent.
UnplacedReason = Literal[
    "no_eligible_gpu",
    "insufficient_capacity",
    "gang_too_large",
    "infeasible_constraints",
    "time_limit",
    "preempted",
    "priority_order",
]


class Assignment(BaseModel):
    """Where a placed job runs: one placement per GPU (a gang of N has N).

    A placement is written without the `mig` / `fraction` it does not have (a whole GPU is
    `{"node": ..., "gpu": ...}`); reading accepts them present, null or absent alike.
    """

    model_config = ConfigDict(extra="forbid")

    job: str
    placements: list[Placement]

    @field_serializer("placements", mode="wrap")
    def _omit_absent_kind(
        self, placements: list[Placement], handler: SerializerFunctionWrapHandler
    ):  # no return annotation, so the JSON schema keeps list[Placement]
        out = handler(placements)
        for item in out:
            for key in _OPTIONAL_PLACEMENT_KEYS:
                if item.get(key, 0) is None:
                    del item[key]
        return out

    @classmethod
    def of(cls, job: str, placements: list[Placement]) -> Assignment:
        """The assignment of `job` to `placements`, built from checked parts (a str and
        Placement models) without validating them again (`_trusted_many`)."""
        return cls.many(({"job": job, "placements": placements},))[0]

    @classmethod
    def many(cls, rows: Iterable[dict[str, Any]]) -> list[Assignment]:
        """`Assignment.of(job, placements)` for each `{"job": job, "placements":
        placements}` of `rows` (the dicts become the assignments' own)."""
        return _trusted_many(cls, rows)


class Unplaced(BaseModel):
    """A job the plan does not place, with a reason code and a human explanation."""

    model_config = ConfigDict(extra="forbid")

    job: str
    reason: str = Field(description="One of the reason codes, e.g. insufficient_capacity.")
    detail: str = ""

    @classmethod
    def of(cls, job: str, reason: str, detail: str) -> Unplaced:
        """`job` left out for `reason` with `detail` (three str), not validated again
        (`_trusted_many`)."""
        return cls.many(({"job": job, "reason": reason, "detail": detail},))[0]

    @classmethod
    def many(cls, rows: Iterable[dict[str, Any]]) -> list[Unplaced]:
        """`Unplaced.of(job, reason, detail)` for each `{"job": job, "reason": reason,
        "detail": detail}` of `rows` (three str; the dicts become the reasons' own)."""
        return _trusted_many(cls, rows)


class MigChange(BaseModel):
    """MIG instances to destroy and create on one GPU (destroys apply first)."""

    model_config = ConfigDict(extra="forbid")

    node: str
    gpu: int
    destroy: list[MigInstance] = Field(default_factory=list)
    create: list[MigInstance] = Field(default_factory=list)


class PlanStats(BaseModel):
    """Summary figures of a plan. Extra figures are allowed and documented in README."""

    model_config = ConfigDict(extra="allow")

    gpus_total: int = 0
    gpus_allocated: float = 0.0
    utilization: float = 0.0


class Plan(BaseModel):
    """An allocation plan answering a PlanRequest.

    `objective_value`, `best_bound` and `gap` are rounded to `FIGURE_DECIMALS` decimals when
    a plan is built or read, so float noise does not show (an optimal plan's value and bound
    read the same); the validator compares them with a tolerance far above that.
    """

    model_config = ConfigDict(extra="forbid")

    status: PlanStatus
    solver: str
    objective_value: float
    best_bound: float | None = None
    gap: float | None = None
    solve_time_s: float = 0.0
    assignments: list[Assignment] = Field(default_factory=list)
    unplaced: list[Unplaced] = Field(default_factory=list)
    preempted: list[str] = Field(default_factory=list)
    migrated: list[str] = Field(default_factory=list)
    mig_changes: list[MigChange] = Field(default_factory=list)
    stats: PlanStats = Field(default_factory=PlanStats)
    explanation: list[str] = Field(
        default_factory=list,
        description="Optional human-readable notes on how the plan was reached.",
    )

    @field_validator("objective_value", "best_bound", "gap")
    @classmethod
    def _round_figure(cls, value: float | None) -> float | None:
        return None if value is None else round(value, FIGURE_DECIMALS)
