"""`POST /v1/validate`: check a plan against a request (contract section 3)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from api.examples import validate_examples
from api.routers.body import ThreadedBodyRoute
from api.routers.deps import SettingsDep, check_limits
from models import Plan, PlanRequest
from solver.validate import validate_plan

router = APIRouter(tags=["validate"], route_class=ThreadedBodyRoute)


class ValidateBody(BaseModel):
    """A request and a plan that claims to answer it."""

    model_config = ConfigDict(extra="forbid")

    request: PlanRequest
    plan: Plan


class ViolationOut(BaseModel):
    """One broken invariant: the rule, a message and where."""

    model_config = ConfigDict(extra="forbid")

    rule: str = Field(description="accounting, eligibility, whole_gpu, mig, shared, "
                                  "host_resources, running or objective.")
    message: str
    job: str | None = None
    node: str | None = None
    gpu: int | None = None


class ValidateResult(BaseModel):
    """The validator's verdict."""

    model_config = ConfigDict(extra="forbid")

    valid: bool
    violations: list[ViolationOut]


@router.post(
    "/validate",
    response_model=ValidateResult,
    summary="Validate a plan",
)
async def validate(
    body: Annotated[ValidateBody, Body(openapi_examples=validate_examples())],
    settings: SettingsDep,
) -> ValidateResult:
    """Every violation of the contract's invariants by `plan` for `request` (empty = valid)."""
    check_limits(body.request, settings, ("body", "request"))
    found = await run_in_threadpool(validate_plan, body.request, body.plan)
    return ValidateResult(
        valid=not found,
        violations=[ViolationOut(rule=v.rule, message=v.message, job=v.job, node=v.node,
                                 gpu=v.gpu) for v in found],
    )
