"""The service boundary under hostile input (issue 17's reproductions), over real HTTP.

Every case of the bad-input corpus (api/robustness.py) against the real-solver server with
and without its token; bounds that are generous enough to solve at; unknown model names;
auth before parsing; Allow on 405; the Kubernetes routes through the solve service; and a
prompt SIGTERM with solves running.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request

from api.errors import _validation_error, wire_safe
from api.robustness import Case, check_answer, http_corpus, k8s_cluster, tiny_request
from models.request import (
    MAX_COST,
    MAX_GPU_INDEX,
    MAX_GPU_MEMORY_GIB,
    MAX_HOST_MEMORY_GIB,
    MAX_MILLICORES,
    MAX_REMAINING_WORK_S,
    MAX_SPEED,
    MAX_SUBMITTED_AT_S,
    MAX_WEIGHT,
)
from tests.api.conftest import TOKEN, Server, wait_for

CORPUS = http_corpus()


def _send(c: httpx.Client, case: Case) -> httpx.Response:
    return c.request(case.method, case.path, content=case.body,
                     headers={"Content-Type": case.content_type})


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_case_with_token(real_server: Server, case: Case) -> None:
    """Each hostile body is its documented 4xx with the field path, never a 500."""
    with real_server.client(TOKEN) as c:
        r = _send(c, case)
    assert check_answer(case, r) is None, check_answer(case, r)
    json.loads(r.content.decode("utf-8"))  # the answer is valid UTF-8 JSON


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_case_without_token_is_401(real_server: Server, case: Case) -> None:
    """Without a token the answer is 401 before the body is looked at (malformed or not)."""
    with real_server.client() as c:
        r = _send(c, case)
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"


def test_big_body_without_token_is_401_and_with_token_413(real_server: Server) -> None:
    """A 40 MB body (over the 32 MB limit) is 401 without a token, 413 with one."""
    junk = b"[" + b"1," * (20 * 1024 * 1024) + b"1]"
    with real_server.client() as anon:
        assert anon.post("/v1/plans", content=junk,
                         headers={"Content-Type": "application/json"}).status_code == 401
    with real_server.client(TOKEN) as c:
        assert c.post("/v1/plans", content=junk,
                      headers={"Content-Type": "application/json"}).status_code == 413


def test_validation_answer_always_encodes() -> None:
    """The 422 handler makes any input encodable: NaN, infinities, lone surrogates, long
    strings, objects (left out) and exceptions in ctx."""
    exc = RequestValidationError([
        {"type": "x", "loc": ("body", "a\ud800"), "msg": "bad \udcff", "input": math.nan},
        {"type": "y", "loc": ("body", 1), "msg": "m", "input": "\ud800" * 500},
        {"type": "z", "loc": ("body",), "msg": "m", "input": {"k": math.inf},
         "ctx": {"error": ValueError("boom \ud800"), "limit": -math.inf}},
    ])
    request = Request({"type": "http", "method": "POST", "path": "/", "headers": []})
    import asyncio

    response = asyncio.run(_validation_error(request, exc))
    assert response.status_code == 422
    body = json.loads(bytes(response.body).decode("utf-8"))
    first, second, third = body["detail"]
    assert first == {"type": "x", "loc": ["body", "a\\ud800"], "msg": "bad \\udcff",
                     "input": "nan"}
    assert second["input"].endswith("...") and len(second["input"]) <= 203
    assert "input" not in third
    assert third["ctx"] == {"error": "boom \\ud800", "limit": "-inf"}
    assert wire_safe([1, 2.5, None, True, ("a",)]) == [1, 2.5, None, True, ["a"]]


def _at_the_bounds() -> dict[str, Any]:
    """Every bounded field at (or within a hair of) its maximum, on a 3-node cluster."""
    nodes = [{"name": f"n{i}", "cpu_millicores": MAX_MILLICORES,
              "memory_gib": MAX_HOST_MEMORY_GIB,
              "gpus": [{"index": MAX_GPU_INDEX - g, "model": "A100-SXM4-80GB"}
                       for g in range(2)]} for i in range(2)]
    nodes.append({"name": "m", "gpus": [{"index": 0, "model": "A100-SXM4-80GB",
                                          "mig_enabled": True}]})
    jobs: list[dict[str, Any]] = [
        {"name": f"j{j}", "gpus": 1 + j % 2, "weight": MAX_WEIGHT * (0.3 + j / 10),
         "throughput": {"A100-SXM4-80GB": MAX_SPEED * 0.77},
         "cpu_millicores": MAX_MILLICORES / 3, "host_memory_gib": MAX_HOST_MEMORY_GIB / 3.3,
         "remaining_work": MAX_REMAINING_WORK_S * (j + 1) / 7,
         "submitted_at": MAX_SUBMITTED_AT_S / (j + 1)} for j in range(5)]
    jobs[0]["current"] = [{"node": "n0", "gpu": MAX_GPU_INDEX}]
    jobs.append({"name": "s", "gpu_share": 0.3333, "weight": MAX_WEIGHT,
                 "gpu_memory_gib": 10.5, "remaining_work": MAX_REMAINING_WORK_S})
    jobs.append({"name": "mg", "mig": {"compute_slices": 1, "memory_gib": MAX_GPU_MEMORY_GIB},
                 "weight": MAX_WEIGHT})
    jobs.append({"name": "tiny", "gpus": 1, "weight": 1e-300, "remaining_work": 1e-300,
                 "throughput": {"A100-SXM4-80GB": 1e-300}})
    return {"cluster": {"nodes": nodes}, "jobs": jobs,
            "policy": {"time_limit_s": 2, "migration_cost": MAX_COST,
                       "preemption_cost": MAX_COST}}


@pytest.mark.parametrize("objective", ["throughput", "makespan", "jct", "fairness",
                                       "priority_fifo"])
def test_values_at_the_bounds_are_planned(real_server: Server, objective: str) -> None:
    """The bounds are not only refused above: at them, the real planner answers a plan
    that the validator accepts (no overflow anywhere in between)."""
    body = _at_the_bounds()
    body["policy"]["objective"] = objective
    with real_server.client(TOKEN) as c:
        r = c.post("/v1/plans", json=body)
        assert r.status_code == 200, r.text
        plan = r.json()
        v = c.post("/v1/validate", json={"request": body, "plan": plan})
    assert v.status_code == 200, v.text
    assert v.json() == {"valid": True, "violations": []}
    assert {a["job"] for a in plan["assignments"]} | {u["job"] for u in plan["unplaced"]} == {
        j["name"] for j in body["jobs"]}


def test_models_from_cluster_gpu_models_and_catalog_are_accepted(real_server: Server) -> None:
    """A model named only in cluster.gpu_models, or in the catalog but absent from the
    cluster, is a valid throughput / allowed_models entry (contract sections 1 and 4)."""
    body = tiny_request(throughput={"MyGPU-1": 2.0, "H100-SXM5-80GB": 3.0},
                        allowed_models=["MyGPU-1", "T4-16GB"])
    body["cluster"]["gpu_models"] = {"MyGPU-1": {"memory_gib": 48, "relative_speed": 1.5}}
    body["cluster"]["nodes"][0]["gpus"][0]["model"] = "MyGPU-1"
    with real_server.client(TOKEN) as c:
        r = c.post("/v1/plans", json=body)
    assert r.status_code == 200, r.text
    assert [a["job"] for a in r.json()["assignments"]] == ["j0"]


def test_unknown_models_name_each_field_and_suggest(real_server: Server) -> None:
    """Every unknown name is its own 422 entry, at its own path, with close known names."""
    body = tiny_request(throughput={"B200": 1.0, "A100-SXM4-80GB": 1.0},
                        allowed_models=["A100-SXM4-80GB", "h100"])
    body["cluster"]["nodes"][0]["gpus"][1]["model"] = "A100-80GB"
    with real_server.client(TOKEN) as c:
        r = c.post("/v1/plans", json=body)
    assert r.status_code == 422
    by_loc = {tuple(e["loc"]): e["msg"] for e in r.json()["detail"]}
    assert set(by_loc) == {("body", "jobs", 0, "throughput", "B200"),
                           ("body", "jobs", 0, "allowed_models", 1),
                           ("body", "cluster", "nodes", 0, "gpus", 1, "model")}
    assert "'H100-SXM5-80GB'" in by_loc[("body", "jobs", 0, "allowed_models", 1)]
    assert "'A100-SXM4-80GB'" in by_loc[("body", "cluster", "nodes", 0, "gpus", 1, "model")]


@pytest.mark.parametrize(("path", "methods"), [
    ("/v1/solves", {"GET", "POST"}),
    ("/v1/solves/abc", {"GET", "DELETE"}),
    ("/v1/k8s/plan", {"POST", "PUT"}),
    ("/v1/plans", {"POST"}),
])
def test_405_lists_every_method_of_the_path(real_server: Server, path: str,
                                            methods: set[str]) -> None:
    with real_server.client(TOKEN) as c:
        r = c.request("PATCH", path)
        o = c.request("OPTIONS", path)
    for answer in (r, o):
        assert answer.status_code == 405
        allowed = {m.strip() for m in answer.headers["allow"].split(",")} - {"HEAD"}
        assert allowed == methods


def test_openapi_matches_the_validators(real_server: Server) -> None:
    """Bounds appear as maxima; the k8s plan routes document their 422."""
    with real_server.client() as c:
        spec = c.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    job = schemas.get("Job-Input", schemas.get("Job"))
    weight = job["properties"]["weight"]
    assert weight["maximum"] == MAX_WEIGHT and weight["exclusiveMinimum"] == 0
    assert job["properties"]["throughput"]["anyOf"][0]["additionalProperties"]["maximum"] == \
        MAX_SPEED
    for method in ("post", "put"):
        assert "422" in spec["paths"]["/v1/k8s/plan"][method]["responses"]
    assert "422" in spec["paths"]["/v1/k8s/snapshot"]["post"]["responses"]


# ---------------------------------------------------------------- Kubernetes routes


def test_k8s_plan_goes_through_the_worker_pool(fake_server: Server) -> None:
    """The snapshot's time limit is capped (3 s on this server), the plan comes from a
    worker (the fake planner), and the solve is counted in the metrics."""
    snap = k8s_cluster(2, 4, 3)
    snap["policy"] = {"time_limit_s": 3600}
    with fake_server.client(timeout=60) as c:
        assert c.post("/v1/k8s/snapshot", json=snap).status_code == 200
        t0 = time.monotonic()
        r = c.post("/v1/k8s/plan")
        elapsed = time.monotonic() - t0
        metrics = c.get("/metrics").text
    assert r.status_code == 200, r.text
    assert r.json()["solver"] == "fake"
    assert 2.5 < elapsed < 30  # the fake spins for the capped limit, not 3600 s
    assert {u["job"] for u in r.json()["unplaced"]} == {
        "team-0/train-0", "team-1/train-1", "team-2/train-2"}
    assert 'gpuplan_solves_total{backend="fake",status="heuristic"}' in metrics


def test_k8s_plan_overrun_is_killed(fake_server: Server) -> None:
    """A k8s plan that ignores its limit is killed at limit + grace: 504, not a hang."""
    snap = k8s_cluster(1, 2, 1)
    snap["pods"]["items"][0]["metadata"]["namespace"] = "hang"  # job "hang/train-0"
    snap["policy"] = {"time_limit_s": 0.5}
    with fake_server.client(timeout=60) as c:
        assert c.post("/v1/k8s/snapshot", json=snap).status_code == 200
        r = c.post("/v1/k8s/plan")
    assert r.status_code == 504, r.text
    assert r.json()["code"] == "solve_timeout"


@pytest.mark.parametrize(("nodes", "gpus", "pods", "loc", "limit"), [
    (5, 1, 1, ["body", "nodes", "items"], "max_nodes"),
    (3, 8, 1, ["body", "nodes", "cluster", "nodes"], "max_gpus"),
    (2, 1, 11, ["body", "nodes", "jobs"], "max_jobs"),
])
def test_k8s_snapshot_size_limits(fake_server: Server, nodes: int, gpus: int, pods: int,
                                  loc: list[str], limit: str) -> None:
    """Over GPUPLAN_MAX_NODES / _GPUS / _JOBS the snapshot is a 422 naming the limit, and
    the cached snapshot stays the previous one."""
    with fake_server.client(timeout=60) as c:
        assert c.post("/v1/k8s/snapshot", json=k8s_cluster(1, 1, 1)).status_code == 200
        r = c.post("/v1/k8s/snapshot", json=k8s_cluster(nodes, gpus, pods))
        assert r.status_code == 422, r.text
        err = r.json()["detail"][0]
        assert err["loc"] == loc and err["ctx"]["limit"] == limit
        status = c.get("/v1/k8s/extender/status")
    assert status.status_code == 200
    assert status.json()["gpu_nodes"] == 1  # the refused snapshot had more


def test_k8s_plan_without_snapshot_is_documented_422(tmp_path: Path) -> None:
    server = Server(tmp_path, workers=1).start()
    try:
        with server.client() as c:
            r = c.post("/v1/k8s/plan")
            p = c.put("/v1/k8s/plan", json={"status": "heuristic", "solver": "x",
                                            "objective_value": 0.0})
    finally:
        server.stop()
    for answer in (r, p):
        assert answer.status_code == 422
        assert "no snapshot cached" in answer.json()["detail"][0]["msg"]


# ---------------------------------------------------------------- shutdown


def test_sigterm_stops_promptly_with_solves_running(tmp_path: Path) -> None:
    """SIGTERM with a sync plan and a k8s plan running (limits 60 s, kill grace 30 s): once
    the drain's grace (1 s) is over they are stopped, both requests are answered 503 and
    the server exits long before the solves would have ended."""
    server = Server(tmp_path, workers=2, queue_size=2, max_time_limit_s=60,
                    kill_grace_s=30, shutdown_grace_s=1, shutdown_delay_s=0).start()
    answers: dict[str, int] = {}
    snap = k8s_cluster(1, 2, 1)
    snap["policy"] = {"time_limit_s": 60}

    def call(name: str, method: str, path: str, body: Any = None) -> None:
        with server.client(timeout=120) as c:
            try:
                answers[name] = c.request(method, path, json=body).status_code
            except httpx.HTTPError as e:
                answers[name] = -1
                answers[f"{name}-error"] = hash(str(e))

    try:
        with server.client() as c:
            assert c.post("/v1/k8s/snapshot", json=snap).status_code == 200
        threads = [threading.Thread(target=call, args=("plans", "POST", "/v1/plans",
                                                       {**tiny_request(), "policy": {
                                                           "time_limit_s": 60}})),
                   threading.Thread(target=call, args=("k8s", "POST", "/v1/k8s/plan"))]
        for t in threads:
            t.start()
        with server.client() as c:
            wait_for(lambda: "gpuplan_solves_in_flight 2.0" in c.get("/metrics").text, 30)
        assert server.proc is not None
        proc = server.proc
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(25)
        except subprocess.TimeoutExpired:
            pytest.fail(f"server still running 25 s after SIGTERM: {server.log()}")
        stopped_after = time.monotonic() - t0
        for t in threads:
            t.join(30)
    finally:
        server.stop(signal.SIGKILL)
    assert stopped_after < 25
    assert answers["plans"] == 503 and answers["k8s"] == 503, answers
