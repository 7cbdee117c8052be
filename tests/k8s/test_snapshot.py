"""Snapshot import: kubectl JSON of a GPU Operator cluster -> PlanRequest + issues."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.k8s import SnapshotError, build_snapshot
from api.k8s.mig import layouts_for_counts
from api.k8s.names import parse_product, resolve_model
from models import BUILTIN_CATALOG, PlanRequest, is_valid_layout, valid_layouts


def _snap(nodes: dict[str, Any], pods: dict[str, Any]) -> Any:
    return build_snapshot(nodes, pods)


def _node(req: PlanRequest, name: str) -> Any:
    return next(n for n in req.cluster.nodes if n.name == name)


def _job(req: PlanRequest, name: str) -> Any:
    return next(j for j in req.jobs if j.name == name)


def _issue(snap: Any, obj: str) -> Any:
    return next(i for i in snap.issues if i.object == obj)


def test_nodes_models_and_state(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    snap = _snap(nodes_json, pods_json)
    req = snap.request
    names = {n.name for n in req.cluster.nodes}
    # CPU-only node ignored; unknown product and unlabelled GPU node reported and left out.
    assert names == {"gpu-a100-mixed-1", "gpu-a100-single-1", "gpu-h100-1", "gpu-v100-1",
                     "gpu-t4-1", "gpu-l40s-1"}
    assert _issue(snap, "node/gpu-rtx-1").skipped
    assert "alias" in _issue(snap, "node/gpu-rtx-1").message
    assert _issue(snap, "node/gpu-nolabels-1").skipped
    assert not any(i.object == "node/cpu-1" for i in snap.issues)
    h100 = _node(req, "gpu-h100-1")
    assert {g.model for g in h100.gpus} == {"H100-SXM5-80GB"}
    assert len(h100.gpus) == 8 and h100.schedulable
    assert h100.cpu_millicores == 191500 and h100.topology_domain == "nvswitch-rack-7"
    # capacity 8, allocatable 7: one GPU unhealthy, the highest free one.
    assert [g.index for g in h100.gpus if not g.healthy] == [7]
    v100 = _node(req, "gpu-v100-1")
    assert not v100.schedulable and v100.gpus[0].model == "V100-32GB"
    assert v100.cpu_millicores == 63500
    assert v100.memory_gib == pytest.approx(515807104 / 2**20)
    assert not _node(req, "gpu-t4-1").schedulable
    l40s = _node(req, "gpu-l40s-1")
    assert l40s.cpu_millicores is None and not _issue(snap, "node/gpu-l40s-1").skipped


def test_mixed_strategy_layout_matches_capacity(nodes_json: dict[str, Any],
                                                pods_json: dict[str, Any]) -> None:
    req = _snap(nodes_json, pods_json).request
    node = _node(req, "gpu-a100-mixed-1")
    mig = [g for g in node.gpus if g.mig_enabled]
    assert [g.index for g in mig] == [0, 1, 2, 3]
    assert len(node.gpus) == 8
    counts = Counter(m.profile for g in mig for m in g.mig_instances)
    assert counts == {"1g.10gb": 11, "2g.20gb": 2, "3g.40gb": 4}
    model = BUILTIN_CATALOG["A100-SXM4-80GB"]
    assert all(is_valid_layout(model, [m.key() for m in g.mig_instances]) for g in mig)


def test_single_strategy(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    req = _snap(nodes_json, pods_json).request
    node = _node(req, "gpu-a100-single-1")
    assert len(node.gpus) == 8 and all(g.mig_enabled for g in node.gpus)
    assert all(len(g.mig_instances) == 7 for g in node.gpus)
    model = node.gpus[0].model
    assert model == "A100-SXM4-40GB/single-1g.5gb"
    # Its own model knows only the node's profile, so plans never mix profiles there.
    assert [p.name for p in req.cluster.gpu_models[model].mig_profiles] == ["1g.5gb"]
    embed = _job(req, "serving/embed-0")
    assert embed.mig_profile == "1g.5gb" and embed.allowed_models == [model]
    # A pod asking for nvidia.com/mig-1g.10gb cannot use single-strategy devices.
    notebook = _job(req, "team-b/notebook-x")
    assert model not in (notebook.allowed_models or [])
    assert "A100-SXM4-80GB" in (notebook.allowed_models or [])


def test_running_pods_get_current(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    snap = _snap(nodes_json, pods_json)
    req = snap.request
    pretrain = _job(req, "team-a/pretrain-0")
    assert [(p.node, p.gpu) for p in pretrain.current] == [("gpu-h100-1", i) for i in range(4)]
    eval7 = _job(req, "team-b/eval-7")
    assert [(p.node, p.gpu) for p in eval7.current] == [("gpu-h100-1", 6)]
    assert eval7.preemptible is False
    infer = _job(req, "serving/llm-infer-5f7d8")
    assert infer.kind == "inference" and infer.mig_profile == "3g.40gb"
    (p,) = infer.current
    gpu = next(g for g in _node(req, p.node).gpus if g.index == p.gpu)
    assert p.mig in gpu.mig_instances
    # Running on an unknown node: reported, not guessed.
    assert _issue(snap, "pod/team-c/ghost").skipped
    assert not any(j.name == "team-c/ghost" for j in req.jobs)


def test_pending_pods_and_gangs(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    snap = _snap(nodes_json, pods_json)
    req = snap.request
    ft = _job(req, "team-a/finetune-1")
    assert ft.gpus == 2 and ft.weight == 2 and ft.tenant == "team-a"
    assert ft.throughput == {"H100-SXM5-80GB": 2.5, "A100-SXM4-80GB": 1.0}
    assert ft.cpu_millicores == 16000 and ft.host_memory_gib == 128 and ft.current is None
    kueue = _job(req, "team-a/group:llm-ws")
    assert kueue.gpus == 8 and kueue.single_node and kueue.weight == 3
    assert [p.name for p in snap.job_pods[kueue.name]] == ["llm-ws-0", "llm-ws-1"]
    volcano = _job(req, "team-c/group:mpi-8c1d2")
    assert volcano.gpus == 3 and not volcano.single_node
    share = _job(req, "team-b/tiny-infer")
    assert share.gpu_share == 0.5 and share.gpu_memory_gib == 10
    init = _job(req, "team-b/init-heavy")
    assert init.gpus == 1 and init.cpu_millicores == 100
    for bad in ("both-kinds", "bad-weight", "bad-quantity", "two-migs"):
        assert _issue(snap, f"pod/team-c/{bad}").skipped
        assert not any(j.name == f"team-c/{bad}" for j in req.jobs)
    names = {j.name for j in req.jobs}
    assert "team-a/done" not in names and not any("coredns" in n for n in names)


def test_incomplete_group_is_reported(nodes: dict[str, Any], pods: dict[str, Any]) -> None:
    for p in pods["items"]:
        if p["metadata"]["name"].startswith("llm-ws-"):
            p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "3"
    snap = build_snapshot(nodes, pods)
    issue = _issue(snap, "group/team-a/group:llm-ws")
    assert not issue.skipped and "2 of 3" in issue.message
    assert _job(snap.request, "team-a/group:llm-ws").gpus == 8


def test_mig_gang_is_skipped(nodes: dict[str, Any], pods: dict[str, Any]) -> None:
    notebook = next(p for p in pods["items"] if p["metadata"]["name"] == "notebook-x")
    for i in range(2):
        p = {**notebook, "metadata": {**notebook["metadata"], "name": f"mig-gang-{i}",
                                      "labels": {"kueue.x-k8s.io/pod-group-name": "mg"}}}
        pods["items"].append(p)
    snap = build_snapshot(nodes, pods)
    issue = _issue(snap, "group/team-b/group:mg")
    assert issue.skipped and "whole-GPU" in issue.message


def test_annotated_gpu_indices_conflict(nodes: dict[str, Any], pods: dict[str, Any]) -> None:
    pre = next(p for p in pods["items"] if p["metadata"]["name"] == "pretrain-0")
    pre["metadata"]["annotations"] = {"gpuplan.io/gpu-indices": "5,6,7,8"}
    snap = build_snapshot(nodes, pods)
    assert _issue(snap, "pod/team-a/pretrain-0").skipped


def test_aliases_extend_the_table(nodes: dict[str, Any], pods: dict[str, Any]) -> None:
    snap = build_snapshot(nodes, pods, aliases={"NVIDIA-GeForce-RTX-4090": "L40S-48GB"})
    assert any(n.name == "gpu-rtx-1" for n in snap.request.cluster.nodes)
    # Its running pod is now accounted for.
    assert any(j.name == "team-c/ghost" for j in snap.request.jobs)


@pytest.mark.parametrize(("nodes_obj", "pods_obj", "loc"), [
    ([], {"kind": "List", "items": []}, ("nodes",)),
    ({"items": "x"}, {"kind": "List", "items": []}, ("nodes",)),
    ({"kind": "List", "items": []}, {"kind": "List", "items": [{"kind": "Node"}]},
     ("pods", "items", 0, "kind")),
])
def test_malformed_lists(nodes_obj: object, pods_obj: object, loc: tuple[Any, ...]) -> None:
    with pytest.raises(SnapshotError) as e:
        build_snapshot(nodes_obj, pods_obj)
    assert e.value.loc == loc


def test_malformed_objects_are_reported(nodes: dict[str, Any], pods: dict[str, Any]) -> None:
    nodes["items"].append("not a node")
    nodes["items"].append({"kind": "Node", "metadata": {"labels": {
        "nvidia.com/gpu.product": "NVIDIA-A30"}}})
    pods["items"].append({"kind": "Pod", "metadata": {"name": "nospec", "namespace": "x"}})
    snap = build_snapshot(nodes, pods)
    objs = {i.object for i in snap.issues if i.skipped}
    assert {"node/#9", "node/#10", "pod/x/nospec"} <= objs


@pytest.mark.parametrize(("label", "model"), [
    ("NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-SXM4-40GB"),
    ("Tesla-V100-SXM2-32GB", "V100-32GB"),
    ("NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB"),
    ("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "H100-SXM5-80GB"),
    ("Tesla-T4-SHARED", "T4-16GB"),
    ("NVIDIA-A30", "A30-24GB"),
    ("A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("NVIDIA-GeForce-RTX-4090", None),
])
def test_product_aliases(label: str, model: str | None) -> None:
    assert resolve_model(parse_product(label).base, BUILTIN_CATALOG) == model


@settings(max_examples=40, deadline=None)
@given(model_name=st.sampled_from(["A100-SXM4-80GB", "A30-24GB", "H200-141GB"]),
       picks=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=4))
def test_counts_split_into_valid_layouts(model_name: str, picks: list[int]) -> None:
    model = BUILTIN_CATALOG[model_name]
    layouts = valid_layouts(model)
    chosen = [layouts[p % len(layouts)] for p in picks]
    counts = Counter(i.profile for lay in chosen for i in lay)
    split = layouts_for_counts(model, counts, len(chosen))
    assert split is not None and len(split) == len(chosen)
    assert Counter(i.profile for lay in split for i in lay) == counts
    assert all(is_valid_layout(model, lay) for lay in split)


def test_counts_that_do_not_fit() -> None:
    model = BUILTIN_CATALOG["A100-SXM4-80GB"]
    assert layouts_for_counts(model, {"7g.80gb": 2}, 1) is None
    assert layouts_for_counts(model, {"1g.10gb": 8}, 1) is None
    assert layouts_for_counts(model, {"9g.1gb": 1}, 1) is None
