"""Topology levels over real HTTP and the CLI: a bad level is a 422 with its field path
(exit 2 with one line at the CLI), the OpenAPI example plans with its levels held."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from api.cli import app
from api.examples import topology_levels_request
from tests.api.conftest import TOKEN, Server


def test_bad_levels_are_422_with_field_paths(real_server: Server) -> None:
    body = topology_levels_request()
    body["cluster"]["nodes"][1]["topology"].pop("rack")
    body["jobs"][0]["topology"]["preferred"] = "row"
    cost = topology_levels_request()
    cost["policy"]["topology_cost"] = -1
    with real_server.client(TOKEN) as c:
        r = c.post("/v1/plans", json=body)
        r_cost = c.post("/v1/plans", json=cost)
    assert r.status_code == r_cost.status_code == 422, r.text
    locs = {tuple(e["loc"]) for e in r.json()["detail"]}
    assert locs == {("body", "cluster", "nodes", 1, "topology"),
                    ("body", "jobs", 0, "topology", "preferred")}
    assert [tuple(e["loc"]) for e in r_cost.json()["detail"]] == [
        ("body", "policy", "topology_cost")]


def test_example_plans_within_its_levels(real_server: Server) -> None:
    body = topology_levels_request()
    with real_server.client(TOKEN) as c:
        r = c.post("/v1/plans", json=body)
    assert r.status_code == 200, r.text
    plan = r.json()
    racks = {n["name"]: (n["topology"]["block"], n["topology"]["rack"])
             for n in body["cluster"]["nodes"]}
    by_job = {a["job"]: {racks[p["node"]] for p in a["placements"]}
              for a in plan["assignments"]}
    assert len({b for b, _ in by_job["llm-pretrain"]}) == 1  # required block
    assert len(by_job["moe-finetune"]) == 1  # required rack


def test_cli_solve_unknown_level_exits_2(tmp_path: Path) -> None:
    body = topology_levels_request()
    body["jobs"][1]["topology"]["required"] = "pod"
    req = tmp_path / "req.json"
    req.write_text(json.dumps(body))
    res = CliRunner().invoke(app, ["solve", str(req)])
    assert res.exit_code == 2
    assert "jobs.1.topology.required" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
