"""What a plan looks like on the wire, from the CLI and over HTTP: placements without the
`mig` / `fraction` they do not have, and objective, bound and gap without float noise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from api.app import create_app
from api.settings import Settings
from models import Assignment, Placement, Plan
from models.request import PlanRequest
from solver.validate import validate_plan
from tests.api.conftest import TOKEN, Server

REPO = Path(__file__).resolve().parents[2]
REQUEST = REPO / "examples" / "small-mixed.request.json"


def placement_kinds(plan: dict[str, Any]) -> set[tuple[str, ...]]:
    """The key sets of every placement of a plan's JSON."""
    return {tuple(sorted(p)) for a in plan["assignments"] for p in a["placements"]}


def test_model_omits_absent_kinds_and_reads_every_spelling() -> None:
    plan = Plan(status="feasible", solver="x", objective_value=1.0, assignments=[
        Assignment(job="a", placements=[Placement(node="n", gpu=0),
                                        Placement(node="n", gpu=1, fraction=0.5)])])
    data = json.loads(plan.model_dump_json())
    assert data["assignments"][0]["placements"] == [{"node": "n", "gpu": 0},
                                                   {"node": "n", "gpu": 1, "fraction": 0.5}]
    assert plan.model_dump()["assignments"][0]["placements"][0] == {"node": "n", "gpu": 0}
    assert Plan.model_validate(data) == plan
    spelled_out = json.loads(plan.model_dump_json())
    spelled_out["assignments"][0]["placements"][0].update(mig=None, fraction=None)
    assert Plan.model_validate(spelled_out) == plan


def test_figures_are_rounded_so_an_optimal_plan_shows_value_equal_to_bound() -> None:
    plan = Plan(status="optimal", solver="x", objective_value=0.9999999999999998,
                best_bound=1, gap=2.220446049250313e-16)
    data = json.loads(plan.model_dump_json())
    assert (data["objective_value"], data["best_bound"], data["gap"]) == (1.0, 1.0, 0.0)
    kept = Plan(status="feasible", solver="x", objective_value=12.3456789012345, gap=None)
    assert kept.objective_value == 12.345678901 and kept.gap is None


def test_cli_plan_has_no_null_kinds_and_passes_the_validator(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    res = subprocess.run([sys.executable, "-m", "api.cli", "solve", str(REQUEST), "-o", str(out),
                          "--time-limit", "5"], cwd=REPO, text=True, capture_output=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert '"mig": null' not in text and '"fraction": null' not in text
    plan = json.loads(text)
    # the example has whole, MIG and shared jobs: each keeps exactly its own keys
    assert placement_kinds(plan) == {("gpu", "node"), ("gpu", "mig", "node"),
                                     ("fraction", "gpu", "node")}
    if plan["status"] == "optimal":
        assert plan["objective_value"] == plan["best_bound"] and plan["gap"] == 0
    request = PlanRequest.model_validate_json(REQUEST.read_text())
    assert validate_plan(request, Plan.model_validate(plan)) == []
    check = subprocess.run([sys.executable, "-m", "api.cli", "validate", str(REQUEST), str(out)],
                           cwd=REPO, text=True, capture_output=True, timeout=300, check=False)
    assert check.returncode == 0 and check.stdout.strip() == "valid", check


def test_http_plan_has_no_null_kinds_and_validates(real_server: Server) -> None:
    body = json.loads(REQUEST.read_text())
    with real_server.client(TOKEN) as c:
        r = c.post("/v1/plans", json=body)
        assert r.status_code == 200, r.text
        plan = r.json()
        assert placement_kinds(plan) <= {("gpu", "node"), ("gpu", "mig", "node"),
                                         ("fraction", "gpu", "node")}
        assert ("gpu", "node") in placement_kinds(plan)
        checked = c.post("/v1/validate", json={"request": body, "plan": plan}).json()
        assert checked == {"valid": True, "violations": []}


def test_openapi_still_describes_placements_fully() -> None:
    spec = create_app(Settings(workers=1)).openapi()
    schemas = spec["components"]["schemas"]
    assignment = next(v for k, v in schemas.items() if k.startswith("Assignment"))
    assert assignment["properties"]["placements"]["items"]["$ref"].split("/")[-1] \
        .startswith("Placement")
    placement = next(v for k, v in schemas.items() if k.startswith("Placement"))
    assert {"node", "gpu", "mig", "fraction"} <= set(placement["properties"])
    assert set(placement.get("required", [])) == {"node", "gpu"}
