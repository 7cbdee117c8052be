"""The live kube-scheduler run replayed: 4 GPU nodes, 10 pods, 32 GPUs, no snapshot re-posts.

A real gpuplan server (uvicorn, `GPUPLAN_K8S_WATCH=true`) watches a fake API server
(`fakeapi.py`) through the official client. The test plays kube-scheduler: for each pod, in
order, it creates the pod, sends the extender's filter (with node names when
`nodeCacheCapable` is true, Node objects otherwise) and, when more than one node passes,
prioritize; it picks the highest extender score, breaking ties as the default scheduler's
spreading would (more free GPUs, then fewer pods), and binds the pod. The binding reaches
gpuplan only through the watch stream, right away or a few pods later (a slow API server);
or, with `bindVerb`, the scheduler asks gpuplan to bind and gpuplan writes the Binding.

Every candidate node is sent to filter, even full ones (the default scheduler's own
resource fit would drop those first): gpuplan must fail them on its own knowledge. All ten
pods must be placed, and no pod may pass on a node that is already full.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.k8s import ExtenderArgs, K8sSettings, K8sState, extender_filter, extender_prioritize
from tests.k8s import scenario as sc
from tests.k8s.conftest import serve
from tests.k8s.fakeapi import FakeApiServer

NAMES = [n[0] for n in sc.NODES]
Verb = Callable[[dict[str, Any]], Any]


@dataclass
class Truth:
    """What the cluster really holds: free GPUs and pod counts per node."""

    free: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NAMES, sc.GPUS_PER_NODE))
    pods: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NAMES, 0))
    placed: dict[str, str] = field(default_factory=dict)
    #: pods no node had room for at their turn
    refused: list[str] = field(default_factory=list)
    #: pods passed on a node without room, or refused while a node had room
    violations: list[str] = field(default_factory=list)


def _passed(res: dict[str, Any], cache_capable: bool) -> list[str]:
    if cache_capable:
        return list(res["NodeNames"] or [])
    return [n["metadata"]["name"] for n in (res["Nodes"] or {}).get("items", [])]


def replay(filter_verb: Verb, prioritize_verb: Verb, create: Callable[[dict[str, Any]], None],
           bind: Callable[[dict[str, Any], str], None], *, cache_capable: bool, lag: int,
           pods: list[dict[str, Any]] | None = None) -> Truth:
    """Schedule the pods (the ten of the scenario by default) as kube-scheduler would;
    bindings are published `lag` pods late."""
    truth = Truth()
    late: deque[tuple[dict[str, Any], str]] = deque()
    for pod in pods if pods is not None else sc.pods():
        name = pod["metadata"]["name"]
        need = int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        create(pod)
        args: dict[str, Any] = {"Pod": pod}
        if cache_capable:
            args["NodeNames"] = NAMES
        else:
            args["Nodes"] = sc.node_list(sc.nodes())
        res = filter_verb(args)
        assert res["Error"] == "", res["Error"]
        passed = _passed(res, cache_capable)
        truth.violations += [f"{name} ({need} GPUs) passed on {n}, {truth.free[n]} free"
                             for n in passed if truth.free[n] < need]
        if not passed:
            if any(free >= need for free in truth.free.values()):
                truth.violations.append(f"{name} refused with room left: {truth.free}")
            truth.refused.append(name)
            continue
        if len(passed) == 1:  # kube-scheduler does not score a single feasible node
            chosen = passed[0]
        else:
            scores = {h["Host"]: h["Score"] for h in prioritize_verb({**args, "NodeNames": (
                passed if cache_capable else None), "Nodes": None if cache_capable else {
                **args["Nodes"], "items": res["Nodes"]["items"]}})}
            top = max(scores.values())
            chosen = min((n for n in passed if scores[n] == top),
                         key=lambda n: (-truth.free[n], truth.pods[n], n))
        truth.free[chosen] -= need
        truth.pods[chosen] += 1
        truth.placed[name] = chosen
        late.append((pod, chosen))
        while len(late) > lag:
            bind(*late.popleft())
    while late:
        bind(*late.popleft())
    return truth


def _check(truth: Truth) -> None:
    assert truth.violations == []
    assert truth.refused == []
    assert len(truth.placed) == 10
    assert all(v == 0 for v in truth.free.values())
    # The jobs that run 2.5x faster on the H100 got H100s.
    assert {truth.placed[n] for n in ("train-a", "train-b", "tune-d")} <= {"h100-1", "h100-2"}


def _wait_status(client: httpx.Client, ok: Callable[[dict[str, Any]], bool]
                 ) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        status: dict[str, Any] = client.get("/v1/k8s/extender/status").json()
        if ok(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


@pytest.mark.parametrize(("cache_capable", "binding"), [
    (True, "at-once"), (False, "at-once"), (True, "3-pods-late"), (False, "3-pods-late"),
    (True, "bindVerb"),
], ids=lambda v: {True: "nodeCacheCapable", False: "nodeObjects"}.get(v, v))
def test_replay_over_http_with_the_watch(apiserver: FakeApiServer, tmp_path: Path,
                                         cache_capable: bool, binding: str) -> None:
    env = {"GPUPLAN_K8S_WATCH": "true",
           "GPUPLAN_K8S_KUBECONFIG": str(apiserver.kubeconfig(tmp_path / "kubeconfig")),
           "GPUPLAN_K8S_WATCH_TIMEOUT_S": "20"}
    with serve(tmp_path, env) as url, httpx.Client(base_url=url, timeout=60) as client:
        status = _wait_status(client, lambda s: s["synced"])
        assert status["synced"] and status["gpu_nodes"] == 4, status

        def verb(path: str) -> Verb:
            def call(args: dict[str, Any]) -> Any:
                r = client.post(f"/v1/k8s/extender/{path}", json=args)
                assert r.status_code == 200, r.text
                return r.json()
            return call

        def bind(pod: dict[str, Any], node: str) -> None:
            if binding != "bindVerb":
                apiserver.modify("pods", sc.bound(pod, node))
                return
            meta = pod["metadata"]
            res = verb("bind")({"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                "PodUID": meta["uid"], "Node": node})
            assert res == {"Error": ""}

        truth = replay(verb("filter"), verb("prioritize"),
                       lambda pod: apiserver.add("pods", pod), bind,
                       cache_capable=cache_capable, lag=3 if binding == "3-pods-late" else 0)
        _check(truth)
        if binding == "bindVerb":
            assert sum(r.startswith("POST ") for r in apiserver.requests) == 10
            again = verb("bind")({"PodName": "train-a", "PodNamespace": sc.NAMESPACE,
                                  "Node": "a100-1"})
            assert "409" in again["Error"]  # already bound: the server's answer is passed on
        # Every assumption is confirmed by the watch, none is left to expire.
        status = _wait_status(client, lambda s: not s["assumed"])
        assert status["assumed"] == {}
        assert int(status["resource_versions"]["pods"]) == apiserver.rv


def test_serve_k8s_watch_flag(apiserver: FakeApiServer, tmp_path: Path) -> None:
    """`gpuplan serve --k8s-watch` (the CLI flag, no GPUPLAN_K8S_WATCH) watches."""
    apiserver.add("pods", sc.bound(sc.pods()[0], "h100-1"))
    env = {"GPUPLAN_K8S_KUBECONFIG": str(apiserver.kubeconfig(tmp_path / "kubeconfig"))}
    with serve(tmp_path, env, ["--k8s-watch", "--workers", "1"]) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        status = _wait_status(client, lambda s: s["synced"])
        assert status["watching"] and status["synced"] and status["gpu_nodes"] == 4
        res = client.post("/v1/k8s/extender/filter", json={
            "Pod": sc.pods()[-1], "NodeNames": ["h100-1", "h100-2"]}).json()
        assert res["NodeNames"] == ["h100-2"]
        assert res["FailedNodes"] == {"h100-1": "needs 8 free GPUs, 4 free"}


def _in_process(state: K8sState, cache_capable: bool, lag: int,
                pods: list[dict[str, Any]] | None = None) -> Truth:
    def filter_verb(args: dict[str, Any]) -> Any:
        return extender_filter(ExtenderArgs(**args), state).model_dump()

    def prioritize_verb(args: dict[str, Any]) -> Any:
        return [h.model_dump() for h in extender_prioritize(ExtenderArgs(**args), state)]

    return replay(filter_verb, prioritize_verb, lambda pod: None, lambda pod, node: None,
                  cache_capable=cache_capable, lag=lag, pods=pods)


@pytest.mark.parametrize("cache_capable", [True, False])
def test_replay_with_one_snapshot_and_assumptions(cache_capable: bool) -> None:
    """No watch, one snapshot before the run: the assumptions alone carry the run."""
    state = K8sState(K8sSettings(assume_ttl_s=600))
    state.update(sc.node_list(sc.nodes()), sc.pod_list([]))
    _check(_in_process(state, cache_capable, lag=10))


def test_replay_fails_without_knowing_the_bindings() -> None:
    """The control: a view frozen at the first snapshot (assumptions expire at once) sends
    pods to full nodes, which the replay's check catches."""
    state = K8sState(K8sSettings(assume_ttl_s=1e-9))
    state.update(sc.node_list(sc.nodes()), sc.pod_list([]))
    truth = _in_process(state, True, lag=10)
    assert any("passed on" in v for v in truth.violations)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=16),
       h100=st.lists(st.booleans(), min_size=16, max_size=16),
       lag=st.integers(0, 5), cache_capable=st.booleans())
def test_no_pod_passes_on_a_full_node(sizes: list[int], h100: list[bool], lag: int,
                                      cache_capable: bool) -> None:
    """Any queue, any binding delay: while gpuplan remembers what it placed, no pod is
    passed on a node without room for it, and none is refused while a node has room."""
    pods = [sc.gpu_pod(f"pod-{i}", n, h100[i], i) for i, n in enumerate(sizes)]
    state = K8sState(K8sSettings(assume_ttl_s=600))
    state.update(sc.node_list(sc.nodes()), sc.pod_list([]))
    truth = _in_process(state, cache_capable, lag, pods)
    assert truth.violations == []
    assert len(truth.refused) + len(truth.placed) == len(sizes)
