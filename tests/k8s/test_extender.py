"""Extender decisions on the fixture cluster (no HTTP)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.k8s import ExtenderArgs, K8sSettings, K8sState, extender_filter, extender_prioritize
from api.k8s.extender import Verdict, scores


def _pod(pods: dict[str, Any], name: str) -> dict[str, Any]:
    return copy.deepcopy(next(p for p in pods["items"] if p["metadata"]["name"] == name))


def test_no_view_passes_with_a_warning_by_default(pods_json: dict[str, Any],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    args = ExtenderArgs(Pod=_pod(pods_json, "finetune-1"), NodeNames=["gpu-h100-1", "x"])
    with caplog.at_level(logging.WARNING, "gpuplan.k8s"):
        res = extender_filter(args, K8sState())
    assert res.Error == "" and res.NodeNames == ["gpu-h100-1", "x"]
    assert "no cluster view yet" in caplog.text
    scores = extender_prioritize(args, K8sState())
    assert [(h.Host, h.Score) for h in scores] == [("gpu-h100-1", 0), ("x", 0)]


def test_no_view_is_an_error_when_configured(pods_json: dict[str, Any]) -> None:
    args = ExtenderArgs(Pod=_pod(pods_json, "finetune-1"), NodeNames=["gpu-h100-1"])
    res = extender_filter(args, K8sState(K8sSettings(no_state="error")))
    assert "no cluster view" in res.Error and not res.NodeNames
    scores = extender_prioritize(args, K8sState(K8sSettings(no_state="error")))
    assert [(h.Host, h.Score) for h in scores] == [("gpu-h100-1", 0)]


def test_single_strategy_gpu_pod(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    state = K8sState()
    state.update(nodes_json, pods_json)
    pod = _pod(pods_json, "embed-0")
    pod["spec"].pop("nodeName")
    pod["metadata"]["name"] = "embed-1"
    pod["metadata"]["annotations"] = {"gpuplan.io/mig-profile": "1g.5gb"}
    res = extender_filter(ExtenderArgs(Pod=pod, NodeNames=[
        "gpu-a100-single-1", "gpu-a100-mixed-1"]), state)
    assert res.NodeNames == ["gpu-a100-single-1"]
    assert "another resource name" in res.FailedAndUnresolvableNodes["gpu-a100-mixed-1"]


def test_pod_without_gpus_passes(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    state = K8sState()
    state.update(nodes_json, pods_json)
    pod = _pod(pods_json, "coredns-76f75df574-abcde")
    names = ["gpu-h100-1", "cpu-1"]
    assert extender_filter(ExtenderArgs(Pod=pod, NodeNames=names), state).NodeNames == names
    scores = extender_prioritize(ExtenderArgs(Pod=pod, NodeNames=names), state)
    assert [(h.Host, h.Score) for h in scores] == [(n, 0) for n in names]


def test_share_pod_and_full_node(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    state = K8sState()
    state.update(nodes_json, pods_json)
    pod = _pod(pods_json, "tiny-infer")
    res = extender_filter(ExtenderArgs(Pod=pod, NodeNames=["gpu-h100-1", "gpu-v100-1"]), state)
    assert res.NodeNames == ["gpu-h100-1"]
    assert "cordoned" in res.FailedNodes["gpu-v100-1"]
    big = _pod(pods_json, "finetune-1")
    big["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "3"
    # The share pod passed on one node only, so it is assumed there: it took a free GPU.
    assert state.assumed["team-b/tiny-infer"].node == "gpu-h100-1"
    res = extender_filter(ExtenderArgs(Pod=big, NodeNames=["gpu-h100-1"]), state)
    assert res.FailedNodes == {"gpu-h100-1": "needs 3 free GPUs, 1 free"}
    state.forget("team-b/tiny-infer")
    res = extender_filter(ExtenderArgs(Pod=big, NodeNames=["gpu-h100-1"]), state)
    assert res.FailedNodes == {"gpu-h100-1": "needs 3 free GPUs, 2 free"}


def test_nodes_the_view_does_not_hold(nodes_json: dict[str, Any], pods_json: dict[str, Any],
                                      caplog: pytest.LogCaptureFixture) -> None:
    state = K8sState()
    state.update(nodes_json, pods_json)
    names = ["gpu-h100-1", "cpu-1", "gpu-rtx-1", "brand-new-1"]
    args = ExtenderArgs(Pod=_pod(pods_json, "finetune-1"), NodeNames=names)
    with caplog.at_level(logging.WARNING, "gpuplan.k8s"):
        res = extender_filter(args, state)
    # Unknown to the view (joined since the snapshot): passed, and the log says why.
    assert res.NodeNames == ["gpu-h100-1", "brand-new-1"]
    assert "brand-new-1" in caplog.text and "not in the view" in caplog.text
    assert res.FailedAndUnresolvableNodes["cpu-1"].startswith("no NVIDIA GPUs")
    assert res.FailedAndUnresolvableNodes["gpu-rtx-1"].startswith("GPU node not imported: ")
    scores = {h.Host: h.Score for h in extender_prioritize(args, state)}
    assert scores["brand-new-1"] == 0 and scores["gpu-h100-1"] == 10


def test_failed_nodes_only_for_old_schedulers(nodes_json: dict[str, Any],
                                              pods_json: dict[str, Any]) -> None:
    state = K8sState(K8sSettings(failed_nodes_only=True))
    state.update(nodes_json, pods_json)
    names = ["gpu-h100-1", "gpu-v100-1", "cpu-1"]
    res = extender_filter(ExtenderArgs(Pod=_pod(pods_json, "finetune-1"), NodeNames=names),
                          state)
    assert res.FailedAndUnresolvableNodes == {}
    assert set(res.FailedNodes) == {"gpu-v100-1", "cpu-1"}
    assert "not eligible" in res.FailedNodes["gpu-v100-1"]


def test_host_cpu_and_memory_count(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    state = K8sState()
    state.update(nodes_json, pods_json)
    pod = _pod(pods_json, "finetune-1")
    # gpu-h100-1 has 191.5 cores allocatable, 32 + 8 of them requested by running pods.
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "152"
    res = extender_filter(ExtenderArgs(Pod=pod, NodeNames=["gpu-h100-1"]), state)
    assert "host CPU/memory" in res.FailedNodes["gpu-h100-1"]
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "151"
    res = extender_filter(ExtenderArgs(Pod=pod, NodeNames=["gpu-h100-1"]), state)
    assert res.NodeNames == ["gpu-h100-1"]


def test_shares_count_gpu_memory(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    state = K8sState()
    state.update(nodes_json, pods_json)
    pod = _pod(pods_json, "tiny-infer")
    placed = []
    for i in range(3):
        pod["metadata"]["name"] = f"share-{i}"
        pod["metadata"]["annotations"] = {"gpuplan.io/gpu-share": "0.3",
                                          "gpuplan.io/gpu-memory-gib": "60"}
        res = extender_filter(ExtenderArgs(Pod=pod, NodeNames=["gpu-h100-1"]), state)
        placed.append(res.NodeNames)
        if res.NodeNames:
            placed[-1] = [p.gpu for p in state.assumed[f"team-b/share-{i}"].job.current or []]
    # 0.3 + 0.3 of a GPU would fit, 60 + 60 GiB of an 80 GiB GPU does not: the second
    # share takes the other free GPU and the third finds none.
    assert len(set(placed[0]) | set(placed[1])) == 2
    assert res.FailedNodes == {"gpu-h100-1": "no GPU with room for a 0.3 share and 60 GiB"}


def test_node_objects_without_pods(nodes_json: dict[str, Any], pods_json: dict[str, Any],
                                   caplog: pytest.LogCaptureFixture) -> None:
    args = ExtenderArgs(Pod=_pod(pods_json, "finetune-1"), Nodes=nodes_json)
    with caplog.at_level(logging.WARNING, "gpuplan.k8s"):
        res = extender_filter(args, K8sState())
    assert "no pods known yet" in caplog.text
    passed = [n["metadata"]["name"] for n in (res.Nodes or {})["items"]]
    # Models and MIG layouts are judged from the objects; occupancy is not known.
    assert passed == ["gpu-a100-mixed-1", "gpu-h100-1"]
    assert "not eligible" in res.FailedAndUnresolvableNodes["gpu-v100-1"]
    res = extender_filter(args, K8sState(K8sSettings(no_state="error")))
    assert "no cluster view" in res.Error


def _verdict(fits: bool, speed: float = 1.0, packing: float = 0.0) -> Verdict:
    return Verdict(fits, "" if fits else "full", speed=speed, packing=packing)


def test_scores_use_the_whole_range() -> None:
    verdicts = [("full", _verdict(False)), ("slow-empty", _verdict(True, 1.0, 0.125)),
                ("fast-empty-b", _verdict(True, 2.5, 0.125)),
                ("fast-empty-a", _verdict(True, 2.5, 0.125)),
                ("fast-half", _verdict(True, 2.5, 0.5))]
    out = scores(verdicts, set())
    assert out == {"full": 0, "slow-empty": 1, "fast-half": 10,
                   # q 0.5625 of the range 0.2625..0.75 -> 1 + round(8 * 0.615) = 6
                   "fast-empty-a": 6, "fast-empty-b": 6}
    # Equal quality: the fuller node wins, then the first name; the others get 9.
    tie = [("b", _verdict(True, 1.0, 0.5)), ("a", _verdict(True, 1.0, 0.5))]
    assert scores(tie, set()) == {"a": 10, "b": 9}
    # The node of the cached plan wins over a better-looking one.
    assert scores(verdicts, {"slow-empty"})["slow-empty"] == 10
    assert scores(verdicts, {"slow-empty"})["fast-half"] == 9


@given(st.lists(st.tuples(st.booleans(), st.floats(0.01, 10), st.floats(0, 1)),
                min_size=1, max_size=12))
def test_scores_properties(raw: list[tuple[bool, float, float]]) -> None:
    verdicts = [(f"n{i}", _verdict(f, s, p)) for i, (f, s, p) in enumerate(raw)]
    out = scores(verdicts, set())
    fitting = [(n, v) for n, v in verdicts if v.fits]
    assert all(out[n] == 0 for n, v in verdicts if not v.fits)
    assert all(1 <= out[n] <= 10 for n, _ in fitting)
    assert sum(1 for s in out.values() if s == 10) == (1 if fitting else 0)
    best = max((v.speed for _, v in fitting), default=1.0)
    q = {n: v.speed / best + v.packing for n, v in fitting}
    for a, _ in fitting:
        for b, _ in fitting:
            if q[a] > q[b] + 1e-6:
                assert out[a] >= out[b]
