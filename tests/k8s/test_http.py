"""The /v1/k8s routes and the extender over real HTTP (uvicorn, create_app)."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from models import Plan, PlanRequest
from solver.validate import recompute_objective, validate_plan
from tests.k8s import v11


def _pod(pods: dict[str, Any], name: str) -> dict[str, Any]:
    return copy.deepcopy(next(p for p in pods["items"] if p["metadata"]["name"] == name))


@pytest.fixture(scope="module")
def client(server_url: str) -> Any:
    with httpx.Client(base_url=server_url, timeout=60) as c:
        yield c


@pytest.fixture
def cached(client: httpx.Client, nodes_json: dict[str, Any],
           pods_json: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/k8s/snapshot", json={"nodes": nodes_json, "pods": pods_json})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_snapshot_route(cached: dict[str, Any]) -> None:
    jobs = {j["name"] for j in cached["request"]["jobs"]}
    assert "team-a/group:llm-ws" in jobs and "team-a/pretrain-0" in jobs
    skipped = {w["object"] for w in cached["warnings"] if w["skipped"]}
    assert {"node/gpu-rtx-1", "pod/team-c/both-kinds"} <= skipped


@pytest.mark.parametrize(("body", "loc"), [
    ({"nodes": {"kind": "List"}}, ["body", "pods"]),
    ({"nodes": {"items": 3}, "pods": {"items": []}}, ["body", "nodes"]),
    ({"nodes": {"items": []}, "pods": {"items": []}, "extra": 1}, ["body", "extra"]),
])
def test_snapshot_422(client: httpx.Client, body: dict[str, Any], loc: list[str]) -> None:
    r = client.post("/v1/k8s/snapshot", json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == loc


def test_filter_with_node_names(client: httpx.Client, cached: dict[str, Any],
                                pods_json: dict[str, Any]) -> None:
    pod = _pod(pods_json, "finetune-1")  # 2 whole GPUs; throughput lists H100 and A100-80GB
    names = ["gpu-h100-1", "gpu-a100-mixed-1", "gpu-v100-1", "gpu-a100-single-1",
             "gpu-l40s-1", "cpu-1"]
    r = client.post("/v1/k8s/extender/filter",
                    json={"Pod": pod, "Nodes": None, "NodeNames": names})
    assert r.status_code == 200, r.text
    res = r.json()
    assert set(res) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                        "Error"}
    assert res["Error"] == "" and res["Nodes"] is None
    # H100: 8 GPUs, 4+1 held by running pods, 1 unhealthy -> 2 free; A100 mixed: 4 whole.
    assert res["NodeNames"] == ["gpu-h100-1", "gpu-a100-mixed-1"]
    unresolvable = res["FailedAndUnresolvableNodes"]
    assert {"gpu-v100-1", "gpu-l40s-1", "cpu-1", "gpu-a100-single-1"} <= set(unresolvable)
    assert "not eligible" in unresolvable["gpu-v100-1"]


def test_filter_mig_pod_and_full_node_objects(client: httpx.Client, cached: dict[str, Any],
                                              nodes_json: dict[str, Any],
                                              pods_json: dict[str, Any]) -> None:
    pod = _pod(pods_json, "notebook-x")  # nvidia.com/mig-1g.10gb
    r = client.post("/v1/k8s/extender/filter",
                    json={"Pod": pod, "Nodes": nodes_json, "NodeNames": None})
    res = r.json()
    assert res["NodeNames"] is None
    passed = [n["metadata"]["name"] for n in res["Nodes"]["items"]]
    assert passed == ["gpu-a100-mixed-1"]
    assert res["Nodes"]["kind"] == "List"
    assert "gpu-a100-single-1" in res["FailedAndUnresolvableNodes"]
    # A 7g.80gb device exists nowhere: resolvable by a MIG reconfiguration.
    big = copy.deepcopy(pod)
    big["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-7g.80gb": "1"}
    r = client.post("/v1/k8s/extender/filter",
                    json={"Pod": big, "NodeNames": ["gpu-a100-mixed-1"]})
    assert "reconfiguration" in r.json()["FailedNodes"]["gpu-a100-mixed-1"]


def test_prioritize(client: httpx.Client, cached: dict[str, Any],
                    pods_json: dict[str, Any]) -> None:
    pod = _pod(pods_json, "finetune-1")
    args = {"Pod": pod, "NodeNames": ["gpu-h100-1", "gpu-a100-mixed-1", "gpu-v100-1"]}
    r = client.post("/v1/k8s/extender/prioritize", json=args)
    assert r.status_code == 200
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert all(0 <= s <= 10 for s in scores.values())
    assert scores["gpu-v100-1"] == 0
    # 2.5x faster on the H100 and the H100 is fuller after placement.
    assert scores["gpu-h100-1"] > scores["gpu-a100-mixed-1"] > 0
    # A plan that puts the pod on the A100 node wins prioritize.
    plan = _plan_with(cached["request"], "team-a/finetune-1", [
        {"node": "gpu-a100-mixed-1", "gpu": 4}, {"node": "gpu-a100-mixed-1", "gpu": 5}])
    r = client.put("/v1/k8s/plan", json=plan)
    assert r.status_code == 200, r.text
    scores = {h["Host"]: h["Score"]
              for h in client.post("/v1/k8s/extender/prioritize", json=args).json()}
    assert scores["gpu-a100-mixed-1"] == 10 and scores["gpu-h100-1"] < 10


def _plan_with(request: dict[str, Any], job: str, placements: list[dict[str, Any]]
               ) -> dict[str, Any]:
    """A valid plan for `request`: running jobs kept, `job` placed as given, the rest
    unplaced, with the objective the validator recomputes."""
    req = PlanRequest.model_validate(request)
    plan = Plan.model_validate({
        "status": "heuristic", "solver": "test", "objective_value": 0.0,
        "assignments": [{"job": j.name, "placements": [p.model_dump() for p in j.current]}
                        for j in req.jobs if j.current] + [
                        {"job": job, "placements": placements}],
        "unplaced": [{"job": j.name, "reason": "insufficient_capacity"}
                     for j in req.jobs if not j.current and j.name != job]})
    plan.objective_value = recompute_objective(req, plan)
    assert validate_plan(req, plan) == []
    return plan.model_dump(mode="json", exclude_none=True)


def test_put_plan_is_validated(client: httpx.Client, cached: dict[str, Any]) -> None:
    """A plan that breaks the snapshot's rules is refused, naming each violation, and the
    cached plan stays as it was."""
    bad = _plan_with(cached["request"], "team-a/finetune-1", [
        {"node": "gpu-a100-mixed-1", "gpu": 4}, {"node": "gpu-a100-mixed-1", "gpu": 5}])
    bad["assignments"][-1]["placements"][1]["gpu"] = 4  # the same GPU twice
    bad["unplaced"] = bad["unplaced"][1:]  # a job left unaccounted for
    r = client.put("/v1/k8s/plan", json=bad)
    assert r.status_code == 422, r.text
    msgs = [e["msg"] for e in r.json()["detail"]]
    assert any(m.startswith("accounting:") for m in msgs), msgs
    assert all(e["loc"] == ["body"] for e in r.json()["detail"])


def test_plan_and_export_routes(client: httpx.Client, cached: dict[str, Any],
                                pods_json: dict[str, Any]) -> None:
    r = client.post("/v1/k8s/plan")
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan["status"] in ("optimal", "feasible", "heuristic")
    r = client.post("/v1/k8s/export",
                    json={"plan": plan, "request": cached["request"], "pods": pods_json})
    assert r.status_code == 200, r.text
    out = r.json()
    placed_pending = [a for a in plan["assignments"]
                      if not any(j["name"] == a["job"] and j.get("current")
                                 for j in cached["request"]["jobs"])]
    assert len(out["bindings"]) >= len(placed_pending)
    assert all(b["kind"] == "Binding" for b in out["bindings"])


def test_extender_errors(client: httpx.Client, server_url: str) -> None:
    r = client.post("/v1/k8s/extender/filter", json={"pod": {}, "NodeNames": []})
    assert r.status_code == 422
    r = client.post("/v1/k8s/extender/filter", json={"Pod": {"metadata": {}}, "NodeNames": []})
    assert r.status_code == 200 and r.json()["Error"].startswith("gpuplan:")


def test_snapshot_with_v11_objects(client: httpx.Client) -> None:
    """`objects` brings quotas, priorities and topology into the cached snapshot and its
    plan; later posts keep them until `objects: []` clears them."""
    body = {"nodes": v11.nodes(), "pods": v11.pods(), "objects": v11.objects()}
    r = client.post("/v1/k8s/snapshot", json=body)
    assert r.status_code == 200, r.text
    req = PlanRequest.model_validate(r.json()["request"])
    assert set(req.cluster.quotas) >= {"team-a-cq", "research", "lab", "vision"}
    assert req.cluster.topology_levels and any(j.priority for j in req.jobs)
    kept = client.post("/v1/k8s/snapshot", json={"nodes": v11.nodes(), "pods": v11.pods()})
    assert PlanRequest.model_validate(kept.json()["request"]).cluster.quotas == \
        req.cluster.quotas
    cleared = client.post("/v1/k8s/snapshot", json={**body, "objects": []})
    assert cleared.status_code == 200
    assert not PlanRequest.model_validate(cleared.json()["request"]).cluster.quotas
    bad = client.post("/v1/k8s/snapshot", json={**body, "objects": [
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
         "spec": {"resources": {"gpu": {"quota": "many"}}}}]})
    assert bad.status_code == 200
    assert {"object": "queue/q", "skipped": True,
            "message": "spec.resources.gpu.quota is not a number"} in bad.json()["warnings"]
    client.post("/v1/k8s/snapshot", json={**body, "objects": []})
