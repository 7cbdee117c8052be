"""The live view: the watch cache against recorded list/watch streams, and assumptions.

The Watcher runs the official client (`kubernetes.client.CoreV1Api`, `kubernetes.watch`)
against `fakeapi.FakeApiServer`, which serves recorded events over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from api.k8s import (
    ClusterCache,
    ExtenderArgs,
    ExtenderBindingArgs,
    K8sSettings,
    K8sState,
    Watcher,
    extender_bind,
    extender_filter,
    extender_prioritize,
    make_api,
)
from api.k8s.watch import NODES, PODS, BindError, WatchOptions
from tests.k8s import scenario as sc
from tests.k8s.fakeapi import FakeApiServer

WAIT_S = 30.0
NAMES = [n[0] for n in sc.NODES]


def _pod(name: str) -> dict[str, Any]:
    return next(p for p in sc.pods() if p["metadata"]["name"] == name)


# ---------------------------------------------------------------- the cache alone
def test_cache_applies_recorded_events_in_order() -> None:
    cache = ClusterCache()
    deleted: list[tuple[str, str]] = []
    cache.on_delete(lambda kind, key: deleted.append((kind, key)))
    a, b = sc.nodes()[:2]
    pod = _pod("train-a")
    cache.replace(NODES, [a], "10")
    assert not cache.synced
    cache.replace(PODS, [], "10")
    assert cache.synced
    events: list[tuple[str, str, dict[str, Any]]] = [
        (NODES, "ADDED", {**b, "metadata": {**b["metadata"], "resourceVersion": "11"}}),
        (PODS, "ADDED", {**pod, "metadata": {**pod["metadata"], "resourceVersion": "12"}}),
        (PODS, "MODIFIED", {**sc.bound(pod, "a100-1"),
                            "metadata": {**pod["metadata"], "resourceVersion": "13"}}),
        (NODES, "BOOKMARK", {"kind": "Node", "metadata": {"resourceVersion": "20"}}),
        (NODES, "DELETED", {**a, "metadata": {**a["metadata"], "resourceVersion": "21"}}),
    ]
    versions = []
    for kind, event, obj in events:
        cache.apply(kind, event, obj)
        versions.append(cache.version)
    nodes, pods, _ = cache.lists()
    assert [n["metadata"]["name"] for n in nodes["items"]] == ["a100-2"]
    assert pods["items"][0]["spec"]["nodeName"] == "a100-1"
    assert cache.resource_versions == {NODES: "21", PODS: "13"}
    # A bookmark moves the resourceVersion but changes no object.
    assert versions[3] == versions[2] and versions == sorted(versions)
    assert deleted == [(NODES, "a100-1")]
    # A relist replaces the kind: what is missing from it was deleted meanwhile.
    cache.replace(PODS, [], "30")
    assert cache.lists()[1]["items"] == []
    assert deleted[-1] == (PODS, "ml/train-a")


# ---------------------------------------------------------------- the client against a server
def _watch(server: FakeApiServer, tmp_path: Path, page_size: int = 500
           ) -> tuple[ClusterCache, Watcher]:
    cache = ClusterCache()
    api = make_api(str(server.kubeconfig(tmp_path / "kubeconfig")))
    watcher = Watcher(cache, api, WatchOptions(timeout_s=20, page_size=page_size))
    watcher.start()
    assert cache.wait(lambda c: c.synced, WAIT_S)
    return cache, watcher


@pytest.fixture
def live(apiserver: FakeApiServer, tmp_path: Path) -> Iterator[tuple[ClusterCache, Watcher]]:
    cache, watcher = _watch(apiserver, tmp_path, page_size=3)
    try:
        yield cache, watcher
    finally:
        watcher.stop(wait_s=0.0)


def _has_pod(name: str, node: str | None = None) -> Any:
    def check(cache: ClusterCache) -> bool:
        pod = cache.get(PODS, f"{sc.NAMESPACE}/{name}")
        return pod is not None and (node is None or pod["spec"].get("nodeName") == node)
    return check


def test_list_pages_then_watch_events(apiserver: FakeApiServer,
                                      live: tuple[ClusterCache, Watcher]) -> None:
    cache, _ = live
    nodes, _, _ = cache.lists()
    assert sorted(n["metadata"]["name"] for n in nodes["items"]) == NAMES
    # 4 nodes in pages of 3: the second page was asked for with the continue token.
    assert any("continue=" in r for r in apiserver.requests if r.startswith("/api/v1/nodes"))
    pod = _pod("train-a")
    apiserver.add("pods", pod)
    assert cache.wait(_has_pod("train-a"), WAIT_S)
    rv = apiserver.modify("pods", sc.bound(pod, "h100-1"))
    assert cache.wait(_has_pod("train-a", "h100-1"), WAIT_S)
    assert cache.resource_versions[PODS] == str(rv)
    apiserver.delete("pods", f"{sc.NAMESPACE}/train-a")
    assert cache.wait(lambda c: c.get(PODS, "ml/train-a") is None, WAIT_S)
    node = copy.deepcopy(sc.nodes()[0])
    node["spec"]["unschedulable"] = True
    apiserver.modify("nodes", node)
    assert cache.wait(lambda c: (c.get(NODES, "a100-1") or {})["spec"].get("unschedulable")
                      is True, WAIT_S)


def test_watch_resumes_from_the_last_version(apiserver: FakeApiServer,
                                            live: tuple[ClusterCache, Watcher]) -> None:
    cache, _ = live
    lists = apiserver.count("/api/v1/pods", watch=False)
    rv = apiserver.add("pods", _pod("train-a"))
    assert cache.wait(_has_pod("train-a"), WAIT_S)
    with apiserver.held():
        apiserver.drop_watches()  # the server's watch timeout
        apiserver.add("pods", _pod("train-b"))
    assert cache.wait(_has_pod("train-b"), WAIT_S)
    assert any(r.startswith("/api/v1/pods") and f"resourceVersion={rv}" in r
               for r in apiserver.requests)
    assert apiserver.count("/api/v1/pods", watch=False) == lists


def test_410_gone_relists_and_forgets_what_was_deleted_meanwhile(
        apiserver: FakeApiServer, live: tuple[ClusterCache, Watcher]) -> None:
    cache, _ = live
    deleted: list[str] = []
    cache.on_delete(lambda kind, key: deleted.append(key))
    pod = _pod("train-a")
    apiserver.add("pods", pod)
    assert cache.wait(_has_pod("train-a"), WAIT_S)
    lists = apiserver.count("/api/v1/pods", watch=False)
    with apiserver.held():
        # While the watch is down the pod goes away, and the log is compacted past it:
        # resuming from the last version is answered 410 Gone.
        apiserver.drop_watches()
        apiserver.delete("pods", "ml/train-a")
        apiserver.add("pods", _pod("train-b"))
        apiserver.compact("pods")
    assert cache.wait(lambda c: c.get(PODS, "ml/train-a") is None
                      and c.get(PODS, "ml/train-b") is not None, WAIT_S)
    assert apiserver.count("/api/v1/pods", watch=False) == lists + 1
    assert deleted == ["ml/train-a"]
    # Watching goes on from the new list's version.
    apiserver.add("pods", _pod("tune-c"))
    assert cache.wait(_has_pod("tune-c"), WAIT_S)


# ---------------------------------------------------------------- assumptions
class Clock:
    """A hand-moved monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _schedule(state: K8sState, name: str) -> str:
    """Filter + prioritize one pod over the four nodes; the node the extender prefers."""
    args = ExtenderArgs(Pod=_pod(name), NodeNames=NAMES)
    passed = extender_filter(args, state).NodeNames or []
    assert passed, f"{name} fits nowhere"
    if len(passed) == 1:
        return passed[0]
    scores = extender_prioritize(ExtenderArgs(Pod=_pod(name), NodeNames=passed), state)
    return max(scores, key=lambda h: h.Score).Host


def _posted(clock: Clock, ttl: float = 30.0) -> K8sState:
    state = K8sState(K8sSettings(assume_ttl_s=ttl), clock=clock)
    state.update(sc.node_list(sc.nodes()), sc.pod_list([]))
    return state


def test_assumption_counts_until_it_expires() -> None:
    clock = Clock()
    state = _posted(clock)
    assert _schedule(state, "train-a") == "h100-1"
    assert state.assumed["ml/train-a"].node == "h100-1"
    big = ExtenderArgs(Pod=_pod("train-j"), NodeNames=["h100-1"])
    assert extender_filter(big, state).FailedNodes == {"h100-1": "needs 8 free GPUs, 4 free"}
    clock.now += 29.0
    assert extender_filter(big, state).FailedNodes  # still assumed
    clock.now += 2.0
    res = extender_filter(big, state)
    assert res.NodeNames == ["h100-1"] and "ml/train-a" not in state.assumed


def test_assumption_confirmed_by_the_next_snapshot() -> None:
    clock = Clock()
    state = _posted(clock)
    assert _schedule(state, "train-a") == "h100-1"
    # The scheduler bound it elsewhere (another plugin outweighed the extender's score).
    state.update(sc.node_list(sc.nodes()), sc.pod_list([sc.bound(_pod("train-a"), "h100-2")]))
    state.view()
    assert "ml/train-a" not in state.assumed
    clock.now += 3600  # the real pod counts, however long it runs
    res = extender_filter(ExtenderArgs(Pod=_pod("train-j"), NodeNames=["h100-1", "h100-2"]),
                          state)
    assert res.NodeNames == ["h100-1"]
    assert res.FailedNodes == {"h100-2": "needs 8 free GPUs, 4 free"}


def test_refilter_drops_the_pods_own_assumption() -> None:
    state = _posted(Clock())
    _schedule(state, "train-j")
    node = state.assumed["ml/train-j"].node
    # Binding failed; the scheduler retries the same pod: its own GPUs are free to it.
    res = extender_filter(ExtenderArgs(Pod=_pod("train-j"), NodeNames=[node]), state)
    assert res.NodeNames == [node]


def test_assumption_confirmed_and_dropped_by_watch_events(
        apiserver: FakeApiServer, live: tuple[ClusterCache, Watcher]) -> None:
    cache, _ = live
    clock = Clock()
    state = K8sState(K8sSettings(assume_ttl_s=30.0), live=cache, clock=clock)
    for name in ("train-a", "train-b"):
        apiserver.add("pods", _pod(name))
    assert cache.wait(_has_pod("train-b"), WAIT_S)
    assert _schedule(state, "train-a") == "h100-1"
    assert _schedule(state, "train-b") == "h100-1"
    assert set(state.assumed) == {"ml/train-a", "ml/train-b"}
    apiserver.modify("pods", sc.bound(_pod("train-a"), "h100-1"))
    assert cache.wait(_has_pod("train-a", "h100-1"), WAIT_S)
    state.view()
    assert set(state.assumed) == {"ml/train-b"}  # confirmed: the bound pod counts now
    apiserver.delete("pods", "ml/train-b")  # deleted before it was bound
    assert cache.wait(lambda c: c.get(PODS, "ml/train-b") is None, WAIT_S)
    assert state.assumed == {}
    clock.now += 3600
    # train-a's 4 GPUs are taken for good, train-b's are free again.
    res = extender_filter(ExtenderArgs(Pod=_pod("train-j"), NodeNames=["h100-1"]), state)
    assert res.FailedNodes == {"h100-1": "needs 8 free GPUs, 4 free"}
    res = extender_filter(ExtenderArgs(Pod=_pod("train-i"), NodeNames=["h100-1"]), state)
    assert res.NodeNames == ["h100-1"]


def test_bind_verb_knows_where_the_pod_went() -> None:
    clock = Clock()
    cache = ClusterCache()
    cache.replace(NODES, sc.nodes(), "1")
    cache.replace(PODS, [_pod("train-a"), _pod("train-b"), _pod("tune-c")], "1")
    state = K8sState(K8sSettings(assume_ttl_s=30.0), live=cache, clock=clock)

    def bind_args(name: str, node: str) -> ExtenderBindingArgs:
        return ExtenderBindingArgs(PodName=name, PodNamespace=sc.NAMESPACE, Node=node)

    assert "needs API access" in extender_bind(bind_args("train-a", "h100-1"), state).Error
    calls: list[tuple[str, str, str | None, str]] = []
    state.binder = lambda ns, name, uid, node: calls.append((ns, name, uid, node))
    assert _schedule(state, "train-a") == "h100-1"
    assert extender_bind(bind_args("train-a", "h100-1"), state).Error == ""
    assert calls == [("ml", "train-a", None, "h100-1")]
    assert state.assumed["ml/train-a"].bound
    # The scheduler bound train-b elsewhere than gpuplan preferred: it counts there.
    assert _schedule(state, "train-b") == "h100-1"
    assert extender_bind(bind_args("train-b", "a100-2"), state).Error == ""
    assert state.assumed["ml/train-b"].node == "a100-2" and state.assumed["ml/train-b"].bound
    clock.now += 300  # far past the TTL of a guess: bound pods stay known
    res = extender_filter(ExtenderArgs(Pod=_pod("train-j"), NodeNames=NAMES), state)
    assert res.FailedNodes == {"h100-1": "needs 8 free GPUs, 4 free",
                               "a100-2": "needs 8 free GPUs, 4 free"}

    def refuse(ns: str, name: str, uid: str | None, node: str) -> None:
        raise BindError("409 Conflict: already assigned")

    state.binder = refuse
    assert _schedule(state, "tune-c") == "h100-1"
    res_bind = extender_bind(bind_args("tune-c", "h100-1"), state)
    assert "409 Conflict" in res_bind.Error and "ml/tune-c" not in state.assumed


class FlakyApi:
    """The real CoreV1Api with failures injected into node lists (the client boundary)."""

    def __init__(self, real: Any, fail: Callable[[dict[str, Any]], Exception | None]) -> None:
        self.real = real
        self.fail = fail

    def list_node(self, **kwargs: Any) -> Any:
        """Like CoreV1Api.list_node.

        :return: V1NodeList
        """
        error = None if kwargs.get("watch") else self.fail(kwargs)
        if error is not None:
            raise error
        return self.real.list_node(**kwargs)

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        """Like CoreV1Api.list_pod_for_all_namespaces.

        :return: V1PodList
        """
        return self.real.list_pod_for_all_namespaces(**kwargs)


def _flaky_watch(apiserver: FakeApiServer, tmp_path: Path,
                 fail: Callable[[dict[str, Any]], Exception | None]
                 ) -> tuple[ClusterCache, Watcher]:
    api = FlakyApi(make_api(str(apiserver.kubeconfig(tmp_path / "kubeconfig"))), fail)
    cache = ClusterCache()
    watcher = Watcher(cache, api, WatchOptions(timeout_s=20, page_size=3))
    watcher.start()
    return cache, watcher


def test_list_errors_back_off_and_list_again(apiserver: FakeApiServer, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    errors = [ApiException(status=500, reason="Internal Server Error")]
    with caplog.at_level(logging.WARNING, "gpuplan.k8s.watch"):
        cache, watcher = _flaky_watch(apiserver, tmp_path,
                                      lambda kw: errors.pop() if errors else None)
        try:
            assert cache.wait(lambda c: c.synced, WAIT_S)
        finally:
            watcher.stop(wait_s=0.0)
    assert "nodes: list/watch failed" in caplog.text and "retrying in 1 s" in caplog.text
    assert len(cache.lists()[0]["items"]) == 4


def test_expired_continue_token_lists_from_the_start(apiserver: FakeApiServer,
                                                     tmp_path: Path) -> None:
    gone = [ApiException(status=410, reason="Gone")]
    cache, watcher = _flaky_watch(
        apiserver, tmp_path, lambda kw: gone.pop() if gone and kw.get("_continue") else None)
    try:
        assert cache.wait(lambda c: c.synced, WAIT_S)
    finally:
        watcher.stop(wait_s=0.0)
    # First page, then (410 on the second page) both pages again.
    assert apiserver.count("/api/v1/nodes", watch=False) == 3
    assert len(cache.lists()[0]["items"]) == 4
