"""The robustness check: hostile input and load against a real server and the CLI.

`gpuplan bench robustness` (api/cli/robustness.py) runs every probe below against real
`uvicorn --factory api.app:create_app` processes on free 127.0.0.1 ports (each with a
throw-away database; `benchmarks.load.local_server` starts them) and prints one table.
Every request loop is bounded in count and time; nothing leaves the loopback interface.

Probes:
- `corpus`: the bad-input corpus (`http_corpus()`: NaN, Infinity, lone surrogates, huge
  finite numbers, unknown model names, nesting 10,000 deep, wrong JSON types, malformed
  JSON) on every body route, with the right token (each must be its documented 4xx with
  the field path) and without one (each must be 401).
- `cli`: the same request bodies as files through `gpuplan solve`, `validate` and `batch`
  (each must exit non-zero with a one-line message and no traceback).
- `overload`: concurrent solves beyond workers + queue: the surplus gets 429 with
  Retry-After, none fails.
- `kill -9`: SIGKILL of the worker running an async solve fails that solve only; the
  worker is replaced and the next solve succeeds.
- `schemathesis`: examples, coverage and fuzzing phases with `-n cases` per operation,
  every check, with auth on and off: no 500, no schema or status-code mismatch, negative
  data rejected, Allow as documented.
- `healthz`: /healthz latency (p50 / p99) while 40 clients post ~650 KB requests, and
  while 5 Kubernetes plans run.

The counts and latencies depend on the machine and its load; the pass / fail verdicts do not.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.load import LocalServer, local_server, percentile, require_loopback

log = logging.getLogger("gpuplan.robustness")

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKEN = "robustness-token"
NAN = math.nan
INF = math.inf

Loc = tuple[str | int, ...]


# ---------------------------------------------------------------- request bodies


def tiny_request(**job: Any) -> dict[str, Any]:
    """A one-node, one-job request; `job` overrides or adds job fields."""
    return {
        "cluster": {"nodes": [{"name": "n0", "cpu_millicores": 64000, "memory_gib": 512,
                               "gpus": [{"index": 0, "model": "A100-SXM4-80GB"},
                                        {"index": 1, "model": "A100-SXM4-80GB"}]}]},
        "jobs": [{"name": "j0", "gpus": 1, **job}],
        "policy": {"time_limit_s": 1},
    }


def tiny_plan() -> dict[str, Any]:
    """A plan that leaves the job of `tiny_request()` unplaced."""
    return {"status": "heuristic", "solver": "robustness", "objective_value": 0.0,
            "unplaced": [{"job": "j0", "reason": "insufficient_capacity"}]}


def k8s_cluster(nodes: int, gpus_per_node: int, pods: int) -> dict[str, Any]:
    """A `POST /v1/k8s/snapshot` body: kubectl-shaped GPU Operator nodes (A100 80 GB) and
    pending pods that each ask for 1 to 4 whole GPUs."""
    node_items = [{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": f"gpu-{i}", "labels": {
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(gpus_per_node),
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
            "gpuplan.io/topology-domain": f"rack-{i // 4}"}},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus_per_node), "cpu": "128",
                                "memory": "1024Gi"},
                   "allocatable": {"nvidia.com/gpu": str(gpus_per_node), "cpu": "128",
                                   "memory": "1024Gi"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    } for i in range(nodes)]
    pod_items = [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"train-{j}", "namespace": f"team-{j % 3}",
                     "creationTimestamp": "2024-05-02T10:05:00Z",
                     "annotations": {"gpuplan.io/weight": str(1 + j % 4)}},
        "spec": {"containers": [{"name": "main", "resources": {
            "requests": {"cpu": "4", "memory": "32Gi"},
            "limits": {"nvidia.com/gpu": str(1 + j % 4)}}}]},
        "status": {"phase": "Pending"},
    } for j in range(pods)]
    return {"nodes": {"apiVersion": "v1", "kind": "List", "items": node_items},
            "pods": {"apiVersion": "v1", "kind": "List", "items": pod_items}}


def nested(depth: int) -> bytes:
    """A JSON body nested `depth` arrays deep inside a request's `jobs`."""
    return b'{"cluster": {"nodes": []}, "jobs": ' + b"[" * depth + b"]" * depth + b"}"


def long_request(time_limit_s: float, seed: int = 0) -> dict[str, Any]:
    """An M-sized generated request for CP-SAT alone: it uses its whole time limit."""
    from benchmarks.generator import generate

    body = generate("M", seed).model_dump(mode="json", exclude_none=True)
    body["policy"].update(time_limit_s=time_limit_s, solver="cp_sat")
    return body


def _dumps(obj: Any) -> bytes:
    """JSON as Python writes it: NaN and Infinity as bare words, surrogates escaped."""
    return json.dumps(obj, allow_nan=True).encode()


# ---------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Case:
    """One hostile request: what to send and what must come back (with a valid token)."""

    name: str
    method: str
    path: str
    body: bytes
    status: int = 422
    loc: Loc | None = None
    msg: str | None = None
    content_type: str = "application/json"


def http_corpus() -> list[Case]:
    """The bad-input corpus of issue 17 and beyond, for every route that takes a body."""
    t, p = tiny_request, tiny_plan
    snap = k8s_cluster(1, 2, 1)
    snap_nan = json.loads(json.dumps(snap))
    snap_nan["nodes"]["items"][0]["metadata"]["labels"]["x"] = NAN
    snap_sur = json.loads(json.dumps(snap))
    snap_sur["pods"]["items"][0]["metadata"]["name"] = "\ud800"
    plans = "/v1/plans"
    big = {"cpu_millicores": 1e308}
    return [
        Case("plans: weight NaN", "POST", plans, _dumps(t(weight=NAN)),
             loc=("body", "jobs", 0, "weight")),
        Case("plans: time limit Infinity", "POST", plans,
             _dumps({**t(), "policy": {"time_limit_s": INF}}),
             loc=("body", "policy", "time_limit_s")),
        Case("plans: 1e400 (infinite)", "POST", plans, _dumps(t()).replace(
            b'"gpus": 1', b'"gpus": 1, "gpu_memory_gib": 1e400'),
             loc=("body", "jobs", 0, "gpu_memory_gib")),
        Case("plans: lone surrogate name", "POST", plans, _dumps(t(name="\ud800")),
             loc=("body", "jobs", 0, "name")),
        Case("solves: weight -Infinity", "POST", "/v1/solves", _dumps(t(weight=-INF)),
             loc=("body", "jobs", 0, "weight")),
        Case("solves: lone surrogate tenant", "POST", "/v1/solves",
             _dumps(t(tenant="a\udfffb")), loc=("body", "jobs", 0, "tenant")),
        Case("validate: objective NaN", "POST", "/v1/validate",
             _dumps({"request": t(), "plan": {**p(), "objective_value": NAN}}),
             loc=("body", "plan", "objective_value")),
        Case("validate: surrogate key", "POST", "/v1/validate",
             _dumps({"request": t(throughput={"\udc00": 1.0}), "plan": p()}),
             loc=("body", "request", "jobs", 0, "throughput", "\\udc00")),
        Case("plans: node cpu 1e308", "POST", plans,
             _dumps({**t(), "cluster": {"nodes": [{"name": "n0", **big, "gpus": [
                 {"index": 0, "model": "A100-SXM4-80GB"}]}]}}),
             loc=("body", "cluster", "nodes", 0, "cpu_millicores")),
        Case("plans: job cpu 1e308", "POST", plans, _dumps(t(**big)),
             loc=("body", "jobs", 0, "cpu_millicores")),
        Case("plans: weight 1e308", "POST", plans, _dumps(t(weight=1e308)),
             loc=("body", "jobs", 0, "weight")),
        Case("plans: remaining_work 1e308, makespan", "POST", plans,
             _dumps({**t(remaining_work=1e308), "policy": {"objective": "makespan"}}),
             loc=("body", "jobs", 0, "remaining_work")),
        Case("solves: throughput 1e300", "POST", "/v1/solves",
             _dumps(t(throughput={"A100-SXM4-80GB": 1e300})),
             loc=("body", "jobs", 0, "throughput", "A100-SXM4-80GB")),
        Case("plans: GPU index 2**70", "POST", plans,
             _dumps({**t(), "cluster": {"nodes": [{"name": "n0", "gpus": [
                 {"index": 2**70, "model": "A100-SXM4-80GB"}]}]}}),
             loc=("body", "cluster", "nodes", 0, "gpus", 0, "index")),
        Case("plans: unknown node model", "POST", plans,
             _dumps({**t(), "cluster": {"nodes": [{"name": "n0", "gpus": [
                 {"index": 0, "model": "H200"}]}]}}),
             loc=("body", "cluster", "nodes", 0, "gpus", 0, "model"), msg="H200-141GB"),
        Case("plans: unknown throughput model", "POST", plans,
             _dumps(t(throughput={"B200": 1.0})),
             loc=("body", "jobs", 0, "throughput", "B200"), msg="did you mean"),
        Case("solves: unknown allowed model", "POST", "/v1/solves",
             _dumps(t(allowed_models=["a100-sxm4-80gb"])),
             loc=("body", "jobs", 0, "allowed_models", 0), msg="A100-SXM4-80GB"),
        Case("plans: boolean as string", "POST", plans,
             _dumps({**t(), "policy": {"allow_preemption": "yes"}}),
             loc=("body", "policy", "allow_preemption")),
        Case("plans: integer as string", "POST", plans, _dumps(t(gpus="2")),
             loc=("body", "jobs", 0, "gpus")),
        Case("plans: nested 10,000 deep", "POST", plans, nested(10_000), loc=("body",)),
        Case("validate: nested 10,000 deep", "POST", "/v1/validate", nested(10_000),
             loc=("body",)),
        Case("plans: malformed JSON", "POST", plans, b'{"cluster": ', loc=("body", 12)),
        Case("plans: not UTF-8", "POST", plans, b'{"cluster": "\xff\xfe"}', loc=("body",)),
        Case("k8s snapshot: NaN label", "POST", "/v1/k8s/snapshot", _dumps(snap_nan),
             loc=("body", "nodes", "items", 0, "metadata", "labels", "x")),
        Case("k8s snapshot: surrogate pod name", "POST", "/v1/k8s/snapshot",
             _dumps(snap_sur), loc=("body", "pods", "items", 0, "metadata", "name")),
        Case("k8s snapshot: nested", "POST", "/v1/k8s/snapshot",
             b'{"nodes": {"items": ' + b"[" * 10_000 + b"]" * 10_000 + b'}, "pods": {}}',
             loc=("body",)),
        Case("k8s nodes: Infinity", "POST", "/v1/k8s/nodes",
             _dumps({"nodes": {"kind": "List", "items": [], "x": INF}}),
             loc=("body", "nodes", "x")),
        Case("k8s filter: NaN in pod", "POST", "/v1/k8s/extender/filter",
             _dumps({"Pod": {"metadata": {"name": "p", "x": NAN}}, "NodeNames": []}),
             loc=("body", "Pod", "metadata", "x")),
        Case("k8s export: surrogate job", "POST", "/v1/k8s/export",
             _dumps({"plan": {**p(), "unplaced": [
                 {"job": "\ud834", "reason": "insufficient_capacity"}]}}),
             loc=("body", "plan", "unplaced", 0, "job")),
        Case("k8s plan PUT: NaN objective", "PUT", "/v1/k8s/plan",
             _dumps({**p(), "objective_value": NAN}), loc=("body", "objective_value")),
    ]


def check_answer(case: Case, response: httpx.Response) -> str | None:
    """Why `response` is not what `case` expects with a valid token (None when it is)."""
    if response.status_code != case.status:
        return f"status {response.status_code}, expected {case.status}: {response.text[:200]}"
    if case.status != 422:
        return None
    try:
        detail = response.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return f"422 body is not the documented JSON: {response.text[:200]}"
    locs = [tuple(e["loc"]) for e in detail]
    if case.loc is not None and tuple(case.loc) not in locs:
        return f"no error at {list(case.loc)}; got {[list(x) for x in locs]}"
    if case.msg is not None and not any(case.msg in e["msg"] for e in detail):
        return f"no message mentions {case.msg!r}: {[e['msg'] for e in detail]}"
    return None


# ---------------------------------------------------------------- probes


@dataclass
class Row:
    """One line of the table: a probe, how many requests, how many 500s, the verdict."""

    probe: str
    requests: int
    errors_500: int
    ok: bool
    figure: str = ""
    problems: list[str] = field(default_factory=list)


def probe_corpus(server: LocalServer) -> Row:
    """Every corpus case with the token (its expected answer) and without (401)."""
    problems: list[str] = []
    sent = fives = 0
    with server.client() as authed, server.client(auth=False) as anon:
        for case in http_corpus():
            headers = {"Content-Type": case.content_type}
            for client, want_401 in ((authed, False), (anon, True)):
                r = client.request(case.method, case.path, content=case.body,
                                   headers=headers)
                sent += 1
                fives += r.status_code == 500
                why = (None if r.status_code == 401 else f"status {r.status_code}, not 401"
                       ) if want_401 else check_answer(case, r)
                if why:
                    problems.append(f"{case.name}{' (no token)' if want_401 else ''}: {why}")
    return Row("bad-input corpus (HTTP, token / none)", sent, fives, not problems,
               f"{len(http_corpus())} cases", problems)


def cli_cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(name, gpuplan arguments) of the corpus through the CLI; files written to `tmp`."""
    plan = tmp / "plan.json"
    plan.write_text(json.dumps(tiny_plan()))
    cases: list[tuple[str, list[str]]] = []
    for i, case in enumerate(c for c in http_corpus() if c.path in ("/v1/plans", "/v1/solves")):
        path = tmp / f"case-{i}.json"
        path.write_bytes(case.body)
        cases.append((f"solve: {case.name}", ["solve", str(path), "--time-limit", "1"]))
        cases.append((f"validate: {case.name}", ["validate", str(path), str(plan)]))
        out = tmp / f"out-{i}"
        cases.append((f"batch: {case.name}", ["batch", str(path), "-o", str(out), "-j", "1"]))
    return cases


def probe_cli(timeout_s: float = 120.0) -> Row:
    """The corpus through `gpuplan solve / validate / batch`: never a traceback, a hang or
    a failure without a message. Cases the CLI accepts (it validates less strictly than
    the service) are listed in the figure, not failed."""
    problems: list[str] = []
    accepted: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpuplan-robustness-cli-") as tmp:
        cases = cli_cases(Path(tmp))
        for name, args in cases:
            try:
                done = subprocess.run([sys.executable, "-m", "api.cli", *args], cwd=REPO_ROOT,
                                      capture_output=True, text=True, timeout=timeout_s,
                                      check=False, errors="backslashreplace")
            except subprocess.TimeoutExpired:
                problems.append(f"{name}: no answer within {timeout_s:g} s")
                continue
            if "Traceback" in done.stderr or "Traceback" in done.stdout:
                last = done.stderr.strip().splitlines()[-1:] or [""]
                problems.append(f"{name}: traceback ({last[0][:120]})")
            elif done.returncode == 0:
                accepted.append(name)
            elif not done.stderr.strip():
                problems.append(f"{name}: exit {done.returncode} without a message")
    figure = f"{len(cases) - len(accepted) - len(problems)}/{len(cases)} refused, " \
             f"{sum('traceback' in p for p in problems)} tracebacks"
    if accepted:
        figure += f"; accepted: {'; '.join(accepted)}"
    return Row("bad-input corpus (CLI)", len(cases), 0, not problems, figure, problems)


async def _post_many(url: str, path: str, bodies: Sequence[bytes], headers: dict[str, str],
                     timeout_s: float) -> list[httpx.Response | Exception]:
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                                 timeout=timeout_s) as c:
        async def one(body: bytes) -> httpx.Response | Exception:
            try:
                return await c.post(path, content=body,
                                    headers={"Content-Type": "application/json"})
            except httpx.HTTPError as e:
                return e
        return list(await asyncio.gather(*(one(b) for b in bodies)))


def probe_overload(server: LocalServer, workers: int, queue: int, clients: int = 40,
                   time_limit_s: float = 3.0) -> Row:
    """`clients` solves at once: the surplus over workers + queue gets 429 + Retry-After."""
    body = _dumps(long_request(time_limit_s))
    headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
    answers = asyncio.run(_post_many(server.url, "/v1/plans", [body] * clients, headers,
                                     timeout_s=clients * time_limit_s + 60))
    codes = [a.status_code if isinstance(a, httpx.Response) else -1 for a in answers]
    rejected = [a for a in answers if isinstance(a, httpx.Response) and a.status_code == 429]
    # 504: a solve overran its limit and was stopped (documented; the planner's deadline).
    problems = [f"{codes.count(c)} answers {c}" for c in sorted(set(codes))
                if c not in (200, 429, 504)]
    if any("retry-after" not in a.headers for a in rejected):
        problems.append("a 429 without Retry-After")
    if not rejected:
        problems.append(f"no 429 for {clients} solves (capacity {workers} + {queue})")
    return Row("overload (concurrent solves)", clients, codes.count(500), not problems,
               f"{len(rejected)} x 429 with Retry-After, {codes.count(200)} solved, "
               f"{codes.count(504)} x 504 (capacity {workers} + {queue})", problems)


def probe_kill9(server: LocalServer, time_limit_s: float = 20.0) -> Row:
    """SIGKILL the worker of a running async solve: that solve fails, the next succeeds."""
    problems: list[str] = []
    sent = 0
    body = long_request(time_limit_s)
    with server.client() as c:
        r = c.post("/v1/solves", json=body)
        sent += 1
        solve_id = r.json()["id"]
        state = _wait_state(c, solve_id, {"running"}, 30)
        sent += 1
        pids = server.worker_pids()
        if state != "running" or not pids:
            return Row("kill -9 of a worker", sent, 0, False, "",
                       [f"solve {state}, workers {pids}"])
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        state = _wait_state(c, solve_id, {"failed", "done", "cancelled"}, 30)
        if state != "failed":
            problems.append(f"the killed solve ended {state}, not failed")
        end = time.monotonic() + 60
        while c.get("/readyz").status_code != 200 and time.monotonic() < end:
            time.sleep(0.2)
        after = c.post("/v1/plans", json=tiny_request())
        sent += 2
        if after.status_code != 200:
            problems.append(f"the next solve answered {after.status_code}")
        if set(server.worker_pids()) & set(pids):
            problems.append("a killed worker is still listed")
    return Row("kill -9 of a worker", sent, int(after.status_code == 500), not problems,
               f"{len(pids)} killed, replaced", problems)


def _wait_state(c: httpx.Client, solve_id: str, states: set[str], seconds: float) -> str:
    end = time.monotonic() + seconds
    state = ""
    while time.monotonic() < end:
        state = c.get(f"/v1/solves/{solve_id}").json()["state"]
        if state in states:
            return state
        time.sleep(0.1)
    return state


#: Every check on. JSON Schema cannot say that names are unique, that a model name is in
#: the catalog or in `cluster.gpu_models`, that `current` names GPUs that exist, that a
#: request is within the server's size limits or that a snapshot is cached: schema-valid
#: data may be refused for those rules, with 422 at the field path (documented on every
#: operation), so 422 is an expected answer to positive data.
SCHEMATHESIS_CONFIG = """
[checks]
enabled = false
not_a_server_error.enabled = true
status_code_conformance.enabled = true
content_type_conformance.enabled = true
response_headers_conformance.enabled = true
response_schema_conformance.enabled = true
negative_data_rejection.enabled = true
positive_data_acceptance.enabled = true
positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422", "429"]
missing_required_header.enabled = true
unsupported_method.enabled = true
allow_header_conformance.enabled = true
ignored_auth.enabled = true

[phases.coverage]
unexpected-methods = ["get", "put", "post", "delete", "options", "patch"]
"""


def probe_schemathesis(server: LocalServer, cases: int, *, auth: bool,
                       timeout_s: float = 3000.0) -> Row:
    """schemathesis (examples, coverage, fuzzing; every check) against the live schema."""
    with tempfile.TemporaryDirectory(prefix="gpuplan-schemathesis-") as tmp:
        config = Path(tmp) / "schemathesis.toml"
        config.write_text(SCHEMATHESIS_CONFIG)
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
               f"{server.url}/openapi.json", "--phases", "examples,coverage,fuzzing",
               "-n", str(cases), "--seed", "20240601", "--workers", "1",
               "--request-timeout", "30", "--generation-database", "none", "--no-color",
               "--report", "json", "--report-json-path", str(report)]
        if auth and server.token:
            cmd[6:6] = ["-H", f"Authorization: Bearer {server.token}"]
        try:
            done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return Row(f"schemathesis (auth {'on' if auth else 'off'})", 0, 0, False, "",
                       [f"did not finish within {timeout_s:g} s"])
        if not report.exists():
            return Row(f"schemathesis (auth {'on' if auth else 'off'})", 0, 0, False, "",
                       [done.stdout[-2000:] + done.stderr[-2000:]])
        result = json.loads(report.read_text())
    return _schemathesis_row(result, auth, cases)


def _schemathesis_row(result: dict[str, Any], auth: bool, cases: int) -> Row:
    """The table row of one schemathesis run (`cases` = its -n, per operation and phase)."""
    generated = result.get("test_cases", {}).get("generated", 0)
    failures = result.get("failures") or []
    problems = [json.dumps(f)[:300] for f in failures]
    problems += [json.dumps(e)[:300] for e in result.get("errors") or []]
    tested = result.get("operations", {}).get("tested", 0)
    if not tested:
        problems.append("no operation tested")
    fives = sum("server_error" in json.dumps(f).lower() for f in failures)
    return Row(f"schemathesis (auth {'on' if auth else 'off'})", generated, fives,
               not problems, f"{generated} cases on {tested} operations (-n {cases})",
               problems)


def load_main(spec_path: str) -> None:
    """Entry point of the load process: post as `spec_path` (JSON) says, then write the
    status codes (-1 = no answer) as JSON on stdout."""
    spec = json.loads(Path(spec_path).read_text())
    body = Path(spec["body"]).read_bytes()
    codes: list[int] = []
    for _ in range(spec["rounds"]):
        answers = asyncio.run(_post_many(spec["url"], spec["path"], [body] * spec["clients"],
                                         spec["headers"], spec["timeout_s"]))
        codes += [a.status_code if isinstance(a, httpx.Response) else -1 for a in answers]
    sys.stdout.write(json.dumps(codes))


def _healthz_during(url: str, path: str, body: bytes, clients: int, rounds: int,
                    headers: dict[str, str], timeout_s: float, interval_s: float = 0.02
                    ) -> tuple[list[float], list[int]]:
    """/healthz latencies (ms), sampled every `interval_s` while another process posts
    `body` to `path` `rounds` times from `clients` concurrent clients; and the load's
    status codes. The load has a process of its own so that the sampler measures the
    server only."""
    samples: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpuplan-load-") as tmp:
        (Path(tmp) / "body").write_bytes(body)
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"url": url, "path": path, "body": str(Path(tmp) / "body"),
                                    "clients": clients, "rounds": rounds,
                                    "headers": headers, "timeout_s": timeout_s}))
        with (Path(tmp) / "codes.json").open("w+") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from api.robustness import load_main; "
                 "load_main(sys.argv[1])", str(spec)], cwd=REPO_ROOT, stdout=out)
            end = time.monotonic() + rounds * timeout_s + 60
            with httpx.Client(base_url=url, timeout=30) as c:
                while proc.poll() is None and time.monotonic() < end:
                    t0 = time.perf_counter()
                    ok = c.get("/healthz").status_code == 200
                    samples.append((time.perf_counter() - t0) * 1000 if ok else math.inf)
                    time.sleep(interval_s)
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
            out.seek(0)
            text = out.read()
    return samples, json.loads(text) if text else []


def probe_healthz_big_bodies(server: LocalServer, clients: int = 40, rounds: int = 3,
                             p99_ms: float = 100.0) -> Row:
    """/healthz while `clients` clients each post an M-sized request (~650 KB) `rounds`
    times."""
    body = _dumps(long_request(1.0))
    headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
    samples, codes = _healthz_during(server.url, "/v1/plans", body, clients, rounds,
                                     headers, 300.0)
    return _healthz_row(f"/healthz, {clients} x {len(body) // 1000} KB posts", samples,
                        codes, p99_ms, ok_codes={200, 429, 504})


def probe_healthz_k8s(server: LocalServer, plans: int = 5, time_limit_s: float = 5.0,
                      p99_ms: float = 100.0) -> Row:
    """/healthz while `plans` Kubernetes plans of a 64-node snapshot run at once."""
    snap = k8s_cluster(64, 8, 300)
    snap["policy"] = {"time_limit_s": time_limit_s}
    headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
    with server.client() as c:
        r = c.post("/v1/k8s/snapshot", json=snap)
        if r.status_code != 200:
            return Row(f"/healthz, {plans} k8s plans", 1, int(r.status_code == 500), False,
                       "", [f"snapshot answered {r.status_code}: {r.text[:200]}"])
    samples, codes = _healthz_during(server.url, "/v1/k8s/plan", b"", plans, 1, headers,
                                     plans * time_limit_s + 120)
    return _healthz_row(f"/healthz, {plans} k8s plans", samples, codes, p99_ms,
                        ok_codes={200})


def _healthz_row(name: str, samples: list[float], codes: list[int], p99_ms: float,
                 ok_codes: set[int]) -> Row:
    problems = [f"{codes.count(c)} load answers {c}" for c in sorted(set(codes))
                if c not in ok_codes]
    p50, p99 = percentile(samples, 50), percentile(samples, 99)
    if not samples or p99 >= p99_ms:
        problems.append(f"/healthz p99 {p99:.1f} ms (target < {p99_ms:g} ms)")
    answered = ", ".join(f"{codes.count(c)} x {c}" for c in sorted(set(codes)))
    return Row(name, len(codes) + len(samples), codes.count(500), not problems,
               f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(samples, default=0):.1f} ms "
               f"({len(samples)} samples; load: {answered})", problems)


# ---------------------------------------------------------------- the whole check


@dataclass(frozen=True)
class Options:
    """What `run` does: which probes and how hard."""

    schemathesis_cases: int = 300
    cli: bool = True
    schemathesis: bool = True
    load: bool = True


def run(options: Options = Options()) -> list[Row]:
    """Every probe, each on a fresh loopback server; returns the table's rows."""
    rows: list[Row] = []
    with local_server(token=TOKEN, workers=2, queue_size=4, max_time_limit_s=5, kill_grace_s=5,
                      max_nodes=300, max_gpus=4096, max_jobs=20000) as server:
        require_loopback(server.url)
        rows.append(probe_corpus(server))
        rows.append(probe_overload(server, workers=2, queue=4))
        rows.append(probe_kill9(server))
        if options.load:
            rows.append(probe_healthz_big_bodies(server))
            rows.append(probe_healthz_k8s(server))
    if options.cli:
        rows.append(probe_cli())
    if options.schemathesis:
        for auth in (True, False):
            with local_server(token=TOKEN if auth else None, workers=1, queue_size=4,
                              max_time_limit_s=1, kill_grace_s=3, max_nodes=16, max_gpus=64,
                              max_jobs=32) as server:
                rows.append(probe_schemathesis(server, options.schemathesis_cases, auth=auth))
    return rows


def format_rows(rows: Sequence[Row], problems: int = 3) -> str:
    """The rows as one aligned table, then the first `problems` problems of each failure."""
    width = max(len(r.probe) for r in rows)
    lines = [f"{'probe':<{width}}  {'requests':>8}  {'500s':>4}  {'result':<6}  figure",
             "-" * (width + 40)]
    for r in rows:
        lines.append(f"{r.probe:<{width}}  {r.requests:>8}  {r.errors_500:>4}  "
                     f"{'ok' if r.ok else 'FAIL':<6}  {r.figure}")
    for r in rows:
        lines.extend(f"  {r.probe}: {p}" for p in r.problems[:problems])
    return "\n".join(lines)
