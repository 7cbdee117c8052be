"""snapshot -> request -> solver.plan -> export, on the kubectl fixtures."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import yaml

from api.k8s import apply_script, bindings_yaml, build_snapshot, export_plan, mig_parted_yaml
from api.k8s.export import CONFIG_PREFIX
from models import Policy
from solver import plan
from solver.validate import validate_plan


def _mig_pod(pods: dict[str, Any], name: str, profile: str) -> dict[str, Any]:
    base = next(p for p in pods["items"] if p["metadata"]["name"] == "notebook-x")
    pod = copy.deepcopy(base)
    pod["metadata"]["name"] = name
    pod["metadata"]["annotations"] = {"gpuplan.io/weight": "4"}
    pod["spec"]["containers"][0]["resources"]["limits"] = {f"nvidia.com/mig-{profile}": "1"}
    return pod


@pytest.fixture
def planned(nodes: dict[str, Any], pods: dict[str, Any]) -> tuple[Any, Any]:
    # Two full-GPU MIG instances that no current layout offers: a reconfiguration.
    pods["items"] += [_mig_pod(pods, "big-infer-0", "7g.80gb"),
                      _mig_pod(pods, "big-infer-1", "7g.80gb")]
    snap = build_snapshot(nodes, pods, policy=Policy(solver="cp_sat", time_limit_s=10, seed=1))
    return snap, plan(snap.request)


def test_plan_is_valid_and_places_pending_pods(planned: tuple[Any, Any]) -> None:
    snap, p = planned
    assert validate_plan(snap.request, p) == []
    placed = {a.job for a in p.assignments}
    assert {"team-b/big-infer-0", "team-b/big-infer-1", "team-a/finetune-1",
            "team-c/group:mpi-8c1d2"} <= placed
    assert p.mig_changes, "7g instances need a MIG reconfiguration"


def test_export_mig_configs_are_final_layouts(planned: tuple[Any, Any]) -> None:
    snap, p = planned
    out = export_plan(p, snap.request, snap.job_pods)
    doc = yaml.safe_load(mig_parted_yaml(out))
    assert doc["version"] == "v1"
    changed = {c.node for c in p.mig_changes}
    assert set(doc["mig-configs"]) == {CONFIG_PREFIX + n for n in changed}
    for node in snap.request.cluster.nodes:
        if node.name not in changed:
            continue
        assert out.node_labels[node.name] == {"nvidia.com/mig.config": CONFIG_PREFIX + node.name}
        entries = doc["mig-configs"][CONFIG_PREFIX + node.name]
        by_gpu = {i: e for e in entries for i in e["devices"]}
        assert sorted(by_gpu) == [g.index for g in node.gpus]
        for gpu in node.gpus:
            final = {m.key() for m in gpu.mig_instances}
            for ch in p.mig_changes:
                if (ch.node, ch.gpu) == (node.name, gpu.index):
                    final = (final - {m.key() for m in ch.destroy}) | {m.key() for m in ch.create}
            entry = by_gpu[gpu.index]
            assert entry["mig-enabled"] is gpu.mig_enabled
            if gpu.mig_enabled:
                assert entry["mig-devices"] == dict(Counter(i.profile for i in final))
        drain = next(d for d in out.drain if d.node == node.name)
        running_here = {j.name for j in snap.request.jobs
                        if any(pl.node == node.name for pl in j.current or [])}
        assert set(drain.pods) == running_here
        assert set(drain.gpus) == {c.gpu for c in p.mig_changes if c.node == node.name}


def test_export_bindings_match_placements(planned: tuple[Any, Any]) -> None:
    snap, p = planned
    out = export_plan(p, snap.request, snap.job_pods)
    bound = {(b["metadata"]["namespace"], b["metadata"]["name"]): b["target"]["name"]
             for b in out.bindings}
    docs = list(yaml.safe_load_all(bindings_yaml(out)))
    assert all(d["kind"] == "Binding" and d["target"]["kind"] == "Node" for d in docs)
    assert len(docs) == len(out.bindings)
    jobs = {j.name: j for j in snap.request.jobs}
    for a in p.assignments:
        if jobs[a.job].current:
            continue
        nodes_used = {pl.node for pl in a.placements}
        for pod in snap.job_pods[a.job]:
            assert bound[(pod.namespace, pod.name)] in nodes_used
    patches = {(x.namespace, x.name): x.patch["metadata"]["annotations"]
               for x in out.pod_patches}
    ft = next(a for a in p.assignments if a.job == "team-a/finetune-1")
    assert patches[("team-a", "finetune-1")]["gpuplan.io/gpu-indices"] == ",".join(
        str(pl.gpu) for pl in ft.placements)
    big = next(a for a in p.assignments if a.job == "team-b/big-infer-0")
    assert patches[("team-b", "big-infer-0")]["gpuplan.io/mig-start"] == "0"
    assert bound[("team-b", "big-infer-0")] == big.placements[0].node
    assert {m.pod for m in out.migrations} == set(p.migrated)
    assert {m.pod for m in out.evictions} == set(p.preempted)
    script = apply_script(out)
    for d in out.drain:
        assert f"kubectl label node {d.node} nvidia.com/mig.config={d.config}" in script


def test_export_without_request_warns(planned: tuple[Any, Any]) -> None:
    _, p = planned
    out = export_plan(p)
    assert out.mig_parted is None and out.drain == []
    assert any("MIG changes" in w for w in out.warnings)
    assert any("gang" in w for w in out.warnings)
