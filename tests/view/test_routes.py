"""The plan view over HTTP, against a real uvicorn and the real solver: a solve's view
(also after a server restart, from the stored request), a posted request and plan, auth,
404s and 422s with the field path."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.view.page import CSP
from tests.api.conftest import TOKEN, Server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return data


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("view-routes")


@pytest.fixture(scope="module")
def server(tmp_dir: Path) -> Iterator[Server]:
    srv = Server(tmp_dir, workers=1, planner="solver:plan", max_time_limit_s=5,
                 api_token=TOKEN, max_gpus=64)
    srv.start()
    yield srv
    srv.stop()


def _done(c: httpx.Client, url: str) -> dict[str, Any]:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        body: dict[str, Any] = c.get(url).json()
        if body["state"] not in ("queued", "running"):
            return body
        time.sleep(0.1)
    raise AssertionError("solve did not finish in 60 s")


def test_view_of_a_solve_survives_a_restart(server: Server, tmp_dir: Path) -> None:
    request = _load("mig-puzzle.request.json")
    with server.client(TOKEN) as c:
        ref = c.post("/v1/solves", json=request).json()
        status = _done(c, ref["url"])
        assert status["state"] == "done"
        page = c.get(f"{ref['url']}/view")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == CSP
    for job in request["jobs"]:
        assert job["name"] in page.text
    assert f">{status['plan']['status']}<" in page.text
    server.stop()
    server.start()
    with server.client(TOKEN) as c:
        again = c.get(f"{ref['url']}/view")
    assert again.status_code == 200 and again.text == page.text


def test_view_needs_the_token_and_a_known_solve(server: Server) -> None:
    with server.client() as c:
        assert c.get("/v1/solves/abc/view").status_code == 401
        assert c.post("/v1/view", json={}).status_code == 401
    with server.client(TOKEN) as c:
        missing = c.get("/v1/solves/nope/view")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_view_of_a_posted_plan(server: Server) -> None:
    body = {"request": _load("small-mixed.request.json"),
            "plan": _load("plans/small-mixed.valid.plan.json")}
    with server.client(TOKEN) as c:
        page = c.post("/v1/view", json=body)
        bad = c.post("/v1/view", json={"request": body["request"],
                                       "plan": {**body["plan"], "status": "great"}})
        missing = c.post("/v1/view", json={"request": body["request"]})
    assert page.status_code == 200 and "llm-finetune" in page.text
    assert page.text.count('<g class="gpu">') == 20
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "plan", "status"]
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "plan"]


def test_posted_view_obeys_the_size_limits(server: Server) -> None:
    request = _load("small-mixed.request.json")
    node = request["cluster"]["nodes"][0]
    request["cluster"]["nodes"] += [{**node, "name": f"extra-{i}"} for i in range(8)]
    plan = {"status": "heuristic", "solver": "x", "objective_value": 0,
            "unplaced": [{"job": j["name"], "reason": "time_limit"} for j in request["jobs"]]}
    with server.client(TOKEN) as c:
        r = c.post("/v1/view", json={"request": request, "plan": plan})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "request", "cluster", "nodes"]


def test_the_docs_describe_the_view(server: Server) -> None:
    with server.client() as c:
        spec = c.get("/openapi.json").json()
    assert "/v1/solves/{id}/view" in spec["info"]["description"]
    assert "text/html" in spec["paths"]["/v1/view"]["post"]["responses"]["200"]["content"]
    assert "/v1/solves/{solve_id}/view" in spec["paths"]
