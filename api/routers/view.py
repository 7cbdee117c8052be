"""The plan view over HTTP: `GET /v1/solves/{id}/view` and `POST /v1/view`.

Both answer a self-contained HTML page (`api.view.render`): the first draws an async
solve's plan (the final one, or the best so far while it runs) on the request it answers,
the second a request and plan sent in the body.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.openapi.models import Example
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from api.errors import NotFound, error_responses
from api.examples import mig_puzzle_plan, mig_puzzle_request
from api.routers.body import ThreadedBodyRoute
from api.routers.deps import ServiceDep, SettingsDep, check_limits
from api.view import render
from api.view.page import CSP
from models import Plan, PlanRequest

# Bodies are parsed strictly and off the event loop, as on every other /v1 route.
router = APIRouter(tags=["view"], route_class=ThreadedBodyRoute)

#: The page is the only HTML answer: errors stay JSON (`response_class=Response` keeps
#: FastAPI from documenting them as text/html).
_HTML: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/html": {"schema": {"type": "string"}}},
          "description": "The plan view, a self-contained HTML page."},
}


class ViewBody(BaseModel):
    """A request and a plan answering it, to draw."""

    model_config = ConfigDict(extra="forbid")

    request: PlanRequest
    plan: Plan


_EXAMPLES = {"mig-puzzle": Example(summary="The MIG puzzle and a plan answering it",
                                    value={"request": mig_puzzle_request(),
                                           "plan": mig_puzzle_plan()})}


async def _page(request: PlanRequest, plan: Plan) -> HTMLResponse:
    # Drawing an M-size cluster takes a fraction of a second: keep it off the event loop.
    html = await run_in_threadpool(render, request, plan)
    return HTMLResponse(html, headers={"Content-Security-Policy": CSP})


@router.get("/solves/{solve_id}/view", response_class=Response, response_model=None,
            summary="View a solve", responses={**_HTML, **error_responses(404)})
async def view_solve(solve_id: str, service: ServiceDep) -> HTMLResponse:
    """The plan view of an async solve: its final plan, or the best so far while it runs.

    404 for an unknown id and for a solve that has no plan (yet, or at all).
    """
    rec = await service.get(solve_id)
    if rec.plan_json is None:
        raise NotFound(f"solve {solve_id!r} has no plan yet (state {rec.state.value})")
    request = await service.request_of(solve_id)
    return await _page(request, Plan.model_validate_json(rec.plan_json))


@router.post("/view", response_class=Response, response_model=None, summary="View a plan",
             responses=_HTML)
async def view_plan(body: Annotated[ViewBody, Body(openapi_examples=_EXAMPLES)],
                    settings: SettingsDep) -> HTMLResponse:
    """The plan view of a plan and the request it answers, both sent in the body.

    Open the answer in a browser (or save it): the page loads nothing from anywhere.
    """
    check_limits(body.request, settings, ("body", "request"))
    return await _page(body.request, body.plan)
