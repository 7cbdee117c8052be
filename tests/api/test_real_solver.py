"""The documented examples against the real solver: "Try it out" returns a real plan."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import TOKEN, Server, wait_for


def body_examples(spec: dict[str, Any], path: str) -> dict[str, Any]:
    content = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    examples: dict[str, Any] = content["examples"]
    return examples


def test_default_example_returns_a_valid_plan(real_server: Server) -> None:
    with real_server.client(TOKEN) as c:
        spec = c.get("/openapi.json").json()
        examples = body_examples(spec, "/v1/plans")
        default = next(iter(examples.values()))["value"]
        r = c.post("/v1/plans", json=default)
        assert r.status_code == 200, r.text
        plan = r.json()
        checked = c.post("/v1/validate", json={"request": default, "plan": plan}).json()
    assert checked == {"valid": True, "violations": []}
    assert plan["status"] in ("optimal", "feasible", "heuristic")
    assert plan["solver"] != "fake"
    jobs = {j["name"] for j in default["jobs"]}
    answered = [a["job"] for a in plan["assignments"]] + [u["job"] for u in plan["unplaced"]]
    assert sorted(answered) == sorted(jobs)
    assert len(plan["assignments"]) >= len(jobs) // 2
    assert plan["objective_value"] > 0


def test_every_example_solves_and_validates(real_server: Server) -> None:
    with real_server.client(TOKEN) as c:
        spec = c.get("/openapi.json").json()
        for name, ex in body_examples(spec, "/v1/solves").items():
            ref = c.post("/v1/solves", json=ex["value"])
            assert ref.status_code == 202, (name, ref.text)
            url: str = ref.json()["url"]

            def finished(u: str = url) -> dict[str, Any] | None:
                s: dict[str, Any] = c.get(u).json()
                return s if s["state"] == "done" else None

            done = wait_for(finished)
            checked = c.post("/v1/validate", json={"request": ex["value"],
                                                   "plan": done["plan"]}).json()
            assert checked["valid"], (name, checked)
        verdicts = {name: c.post("/v1/validate", json=ex["value"]).json()["valid"]
                    for name, ex in body_examples(spec, "/v1/validate").items()}
    assert verdicts == {"valid": True, "overlap": False}
