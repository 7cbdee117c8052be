"""The docs and the plan view in a real browser, against a real uvicorn and the real solver.

- `/docs`: "Try it out" on `POST /v1/plans` with each example, Execute, read the plan.
- `/redoc`: renders the API (and asks nothing of its vendor's CDN).
- the plan view of async solves (small-mixed, mig-puzzle, an M-size plan of 1,024 GPUs):
  one cell per GPU, the plan's status, no horizontal scrolling at 1,400 px.
Every test fails on any request that leaves the loopback (see conftest).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.examples import plan_request_examples
from benchmarks.generator import generate
from models import Plan, PlanRequest
from tests.api.conftest import Server
from tests.browser.conftest import DOCS_IMAGES, REPO, Recorder, is_loopback

SOLVED = ("optimal", "feasible", "heuristic")


def test_loopback_check_tells_apart() -> None:
    assert is_loopback("http://127.0.0.1:8000/docs")
    assert is_loopback("blob:http://127.0.0.1:8000/0b8f")
    assert is_loopback("http://[::1]:80/x") and is_loopback("data:image/png;base64,AA")
    assert not is_loopback("https://cdn.redoc.ly/redoc/logo-mini.svg")
    assert not is_loopback("http://10.0.0.1/") and not is_loopback("blob:https://a.b/c")


def _accounted(plan: dict[str, Any], request: dict[str, Any]) -> None:
    jobs = {j["name"] for j in request["jobs"]}
    placed = {a["job"] for a in plan["assignments"]}
    unplaced = {u["job"] for u in plan["unplaced"]}
    assert placed | unplaced == jobs and not placed & unplaced


def test_docs_try_it_out_each_example(server: Server, page: tuple[Any, Recorder],
                                      artifacts: Path) -> None:
    pg, _ = page
    pg.goto(server.url + "/docs")
    op = pg.locator("#operations-plans-create_plan_v1_plans_post")
    op.locator(".opblock-summary").click()
    op.locator("button.try-out__btn").click()
    examples = plan_request_examples()
    select = op.locator("select.examples-select-element").first
    labels = [o.strip() for o in select.locator("option").all_inner_texts()]
    assert labels == [e["summary"] for e in examples.values()]
    for name, example in examples.items():
        select.select_option(value=name)
        body = json.loads(op.locator("textarea.body-param__text").input_value())
        assert body == example["value"], f"{name}: the editor holds another body"
        op.locator("button.execute").click()
        status = op.locator(".live-responses-table tr.response .response-col_status").first
        status.wait_for(timeout=60_000)
        assert status.inner_text().strip() == "200", name
        text = op.locator(".live-responses-table tr.response .response-col_description "
                          "pre.microlight").first
        plan = json.loads(text.inner_text())
        Plan.model_validate(plan)
        assert plan["status"] in SOLVED, (name, plan["status"])
        _accounted(plan, example["value"])
        pg.screenshot(path=str(artifacts / f"docs-try-{name}.png"))
        op.locator("button.btn-clear").click()


def test_redoc_renders_offline(server: Server, page: tuple[Any, Recorder],
                               artifacts: Path) -> None:
    pg, recorder = page
    pg.goto(server.url + "/redoc")
    pg.locator("h2", has_text="Plan synchronously").first.wait_for(timeout=30_000)
    pg.get_by_text("API docs by Redocly").wait_for()
    pg.screenshot(path=str(artifacts / "redoc.png"))
    assert any(u.endswith("/openapi.json") for u in recorder.urls)
    assert not [u for u in recorder.urls if "redoc.ly" in u]


def _solve(server: Server, request: dict[str, Any]) -> str:
    """Run an async solve to its end; its id."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        ref = c.post("/v1/solves", json=request)
        assert ref.status_code == 202, ref.text
        url = ref.json()["url"]
        end = time.monotonic() + 120
        while time.monotonic() < end:
            state = c.get(url).json()["state"]
            if state not in ("queued", "running"):
                assert state == "done", state
                return str(ref.json()["id"])
            time.sleep(0.2)
    raise AssertionError("the solve did not finish in 120 s")


def _m_request() -> dict[str, Any]:
    req = generate("M", seed=0)
    req.policy = req.policy.model_copy(update={"solver": "heuristic", "time_limit_s": 10})
    return req.model_dump(mode="json", exclude_none=True)


def _example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REPO / "examples" / f"{name}.request.json").read_text())
    data["policy"]["time_limit_s"] = min(5, data["policy"].get("time_limit_s", 5))
    return data


VIEWS = {"small-mixed": lambda: _example("small-mixed"),
         "mig-puzzle": lambda: _example("mig-puzzle"),
         "m-size": _m_request}


@pytest.mark.parametrize("name", list(VIEWS))
def test_plan_view_of_a_solve(name: str, server: Server, page: tuple[Any, Recorder],
                              artifacts: Path) -> None:
    pg, _ = page
    request = VIEWS[name]()
    solve_id = _solve(server, request)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        plan = Plan.model_validate(c.get(f"/v1/solves/{solve_id}").json()["plan"])
    answer = pg.goto(f"{server.url}/v1/solves/{solve_id}/view")
    assert answer is not None and answer.status == 200
    gpus = sum(len(n["gpus"]) for n in request["cluster"]["nodes"])
    assert pg.locator("g.gpu").count() == gpus
    assert pg.locator(".badge").first.inner_text() == plan.status
    moved = len(plan.migrated) + len(plan.preempted)
    if moved:
        assert pg.get_by_text(f"Running jobs the plan disturbs ({moved})").count() == 1
    width = pg.evaluate("document.documentElement.scrollWidth")
    assert width <= 1400, f"the view scrolls sideways at 1,400 px: {width} px wide"
    if name == "mig-puzzle":
        tips = " ".join(pg.locator("g.gpu > title").all_text_contents())
        for a in plan.assignments:
            assert f"{a.job} ({a.placements[0].mig.profile}@" in tips  # type: ignore[union-attr]
    shot = artifacts / f"view-{name}.png"
    pg.screenshot(path=str(shot), full_page=True)
    if _update_docs():
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOCS_IMAGES / shot.name)
    PlanRequest.model_validate(request)


def _update_docs() -> bool:
    return os.environ.get("GPUPLAN_UPDATE_SCREENSHOTS") == "1"
