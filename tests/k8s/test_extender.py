"""Extender decisions on the fixture cluster (no HTTP)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from api.k8s import ExtenderArgs, K8sSettings, K8sState, extender_filter, extender_prioritize


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
