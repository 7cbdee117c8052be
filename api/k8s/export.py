"""A Plan -> what to apply to Kubernetes.

- mig-parted: one named config per node whose MIG layout changes (`gpuplan-<node>`), in
  the `version: v1` / `mig-configs:` format the GPU Operator's MIG manager reads, with the
  FINAL layout of every GPU (current layout minus `destroy` plus `create`, which is why the
  request is needed), and the `nvidia.com/mig.config` label value each such node needs;
- the nodes to drain for those changes and the running pods that touches;
- for each pending pod the plan places: a v1 Binding to its node and a metadata patch with
  the GPU indices (and MIG start) as gpuplan annotations;
- running pods the plan migrates (to delete, so that their controller recreates them) or
  preempts (to evict).

mig-parted lists instance counts, not positions: it creates the instances itself (listed
largest first, which always succeeds for a valid layout on an empty GPU).
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from api.k8s import names
from api.k8s.pods import PodInfo
from models import Instance, Placement, Plan, PlanRequest

CONFIG_PREFIX = "gpuplan-"


class DrainEntry(BaseModel):
    """A node whose MIG layout changes: the GPUs touched and the GPU pods running on it."""

    model_config = ConfigDict(extra="forbid")

    node: str
    config: str
    gpus: list[int]
    pods: list[str] = Field(description="Running GPU pods (ns/name) on the node.")


class PodPatch(BaseModel):
    """A merge patch for one pod (`kubectl patch pod -n NS NAME --type merge -p PATCH`)."""

    model_config = ConfigDict(extra="forbid")

    namespace: str
    name: str
    patch: dict[str, Any]


class Move(BaseModel):
    """A running pod the plan moves (`node` set) or stops (`node` null)."""

    model_config = ConfigDict(extra="forbid")

    pod: str
    node: str | None = None


class K8sExport(BaseModel):
    """Everything `gpuplan k8s export` produces."""

    model_config = ConfigDict(extra="forbid")

    mig_parted: dict[str, Any] | None = Field(
        default=None, description="mig-parted config (version v1) with one config per node.")
    node_labels: dict[str, dict[str, str]] = Field(default_factory=dict)
    drain: list[DrainEntry] = Field(default_factory=list)
    bindings: list[dict[str, Any]] = Field(default_factory=list)
    pod_patches: list[PodPatch] = Field(default_factory=list)
    migrations: list[Move] = Field(default_factory=list)
    evictions: list[Move] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def final_layout(current: Sequence[Instance], destroy: Sequence[Instance],
                 create: Sequence[Instance]) -> list[Instance]:
    """current - destroy + create, sorted by start."""
    gone = set(destroy)
    return sorted([i for i in current if i not in gone] + list(create),
                  key=lambda i: (i.start, i.profile))


def _mig_devices(layout: Sequence[Instance], order: Mapping[str, int]) -> dict[str, int]:
    """Profile -> count, largest profile first (the order mig-parted creates them in)."""
    counts = Counter(i.profile for i in layout)
    return {p: counts[p] for p in sorted(counts, key=lambda p: (-order.get(p, 0), p))}


def _node_configs(plan: Plan, request: PlanRequest) -> tuple[dict[str, Any],
                                                             dict[str, list[int]]]:
    catalog = request.cluster.catalog()
    changes: dict[str, dict[int, tuple[list[Instance], list[Instance]]]] = {}
    for ch in plan.mig_changes:
        changes.setdefault(ch.node, {})[ch.gpu] = ([m.key() for m in ch.destroy],
                                                   [m.key() for m in ch.create])
    configs: dict[str, Any] = {}
    touched: dict[str, list[int]] = {}
    for node in request.cluster.nodes:
        if node.name not in changes:
            continue
        entries: list[dict[str, Any]] = []
        by_devices: dict[tuple[bool, tuple[tuple[str, int], ...]], list[int]] = {}
        for gpu in sorted(node.gpus, key=lambda g: g.index):
            model = catalog[gpu.model]
            order = {p.name: p.memory_slices * 10 + p.compute_slices for p in model.mig_profiles}
            destroy, create = changes[node.name].get(gpu.index, ([], []))
            layout = final_layout([m.key() for m in gpu.mig_instances], destroy, create)
            key = (gpu.mig_enabled, tuple(_mig_devices(layout, order).items()))
            by_devices.setdefault(key, []).append(gpu.index)
        for (enabled, devices), indices in by_devices.items():
            entry: dict[str, Any] = {"devices": indices, "mig-enabled": enabled}
            if enabled:
                entry["mig-devices"] = dict(devices)
            entries.append(entry)
        configs[CONFIG_PREFIX + node.name] = entries
        touched[node.name] = sorted(changes[node.name])
    return configs, touched


def _binding(pod: PodInfo, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def _annotations(placements: Sequence[Placement]) -> dict[str, str]:
    out = {names.ANN_GPU_INDICES: ",".join(str(p.gpu) for p in placements)}
    mig = placements[0].mig if len(placements) == 1 else None
    if mig is not None:
        out[names.ANN_MIG_START] = str(mig.start)
    return out


def _split_gang(pods: Sequence[PodInfo], placements: Sequence[Placement]
                ) -> list[tuple[PodInfo, list[Placement]]] | None:
    """Give each gang pod `whole_gpus` placements of one node (None if impossible).

    An elastic gang planned below its pods' total (contract 5.1) binds the pods its GPUs
    cover, in name order; the others are left out of the split (they stay pending)."""
    by_node: dict[str, list[Placement]] = {}
    for p in placements:
        by_node.setdefault(p.node, []).append(p)
    out: list[tuple[PodInfo, list[Placement]]] = []
    for pod in sorted(pods, key=lambda p: (-p.whole_gpus, p.name)):
        if not any(by_node.values()):
            break
        node = next((n for n in sorted(by_node) if len(by_node[n]) >= pod.whole_gpus), None)
        if node is None:
            return None
        out.append((pod, by_node[node][: pod.whole_gpus]))
        by_node[node] = by_node[node][pod.whole_gpus:]
    return out if not any(by_node.values()) else None


def _pod_from_ref(job: str) -> PodInfo | None:
    """A single-pod job's pod from its name `ns/name` (gangs need the pod list)."""
    ns, _, name = job.partition("/")
    if not name or ":" in name:
        return None
    return PodInfo(namespace=ns, name=name, phase="Pending", node_name=None, created=None,
                   labels={}, annotations={})


def export_plan(
    plan: Plan,
    request: PlanRequest | None = None,
    job_pods: Mapping[str, Sequence[PodInfo]] | None = None,
) -> K8sExport:
    """Turn `plan` into mig-parted configs, node labels, drains, Bindings and patches.

    `request` (the snapshot the plan answers) is needed for MIG configs, drains and to tell
    running from pending jobs; `job_pods` (from the snapshot) for multi-pod gangs.
    """
    out = K8sExport()
    jobs = {j.name: j for j in request.jobs} if request is not None else {}
    pods_of = dict(job_pods or {})
    if request is None:
        if plan.mig_changes:
            out.warnings.append("plan has MIG changes: pass the request to export mig-parted "
                                "configs and drains")
    else:
        configs, touched = _node_configs(plan, request)
        if configs:
            out.mig_parted = {"version": "v1", "mig-configs": configs}
        running_on: dict[str, set[str]] = {}
        if touched:
            for j in request.jobs:
                for p in j.current or []:
                    running_on.setdefault(p.node, set()).add(j.name)
        for node, gpus in touched.items():
            config = CONFIG_PREFIX + node
            out.node_labels[node] = {names.LABEL_MIG_CONFIG: config}
            running = sorted(running_on.get(node, ()))
            out.drain.append(DrainEntry(node=node, config=config, gpus=gpus, pods=running))
    migrated = set(plan.migrated)
    for a in plan.assignments:
        job = jobs.get(a.job)
        if job is not None and job.current:
            if a.job in migrated:
                out.migrations.append(Move(pod=a.job, node=a.placements[0].node))
            continue
        pods = list(pods_of.get(a.job, []))
        if not pods:
            single = _pod_from_ref(a.job)
            if single is None:
                out.warnings.append(f"{a.job}: a gang; pass the pods to bind its members")
                continue
            pods = [single]
        if len(pods) == 1:
            parts = [(pods[0], list(a.placements))]
            if len({p.node for p in a.placements}) != 1:
                out.warnings.append(f"{a.job}: one pod placed on several nodes; not bound")
                continue
        else:
            split = _split_gang(pods, a.placements)
            if split is None:
                out.warnings.append(f"{a.job}: placements do not split into its pods' GPU "
                                    "counts per node; not bound")
                continue
            parts = split
            if len(parts) < len(pods):
                out.warnings.append(f"{a.job}: an elastic gang planned on {len(a.placements)} "
                                    f"GPUs; {len(parts)} of its {len(pods)} pods bound, the "
                                    "others stay pending")
        for pod, placements in parts:
            out.bindings.append(_binding(pod, placements[0].node))
            out.pod_patches.append(PodPatch(
                namespace=pod.namespace, name=pod.name,
                patch={"metadata": {"annotations": _annotations(placements)}}))
    out.evictions = [Move(pod=name) for name in plan.preempted]
    return out


def bindings_yaml(export: K8sExport) -> str:
    """The Bindings as one multi-document YAML (`kubectl create -f`)."""
    return yaml.safe_dump_all(export.bindings, sort_keys=False)


def mig_parted_yaml(export: K8sExport) -> str:
    """The mig-parted config document ('' when no node needs one)."""
    if export.mig_parted is None:
        return ""
    return yaml.safe_dump(export.mig_parted, sort_keys=False)


def apply_script(export: K8sExport) -> str:
    """A reviewable shell script applying the export in order: evict, reconfigure, bind."""
    q = shlex.quote
    lines = ["#!/bin/sh", "# Generated by `gpuplan k8s export`; review before running.",
             "set -eu"]
    for move in [*export.evictions, *export.migrations]:
        ns, _, name = move.pod.partition("/")
        lines.append(f"kubectl delete pod -n {q(ns)} {q(name)} --wait=true")
    for d in export.drain:
        lines.append(f"kubectl cordon {q(d.node)}")
        for ref in d.pods:
            ns, _, name = ref.partition("/")
            lines.append(f"kubectl delete pod -n {q(ns)} {q(name)} --wait=true")
        lines.append(f"kubectl label node {q(d.node)} "
                     f"{names.LABEL_MIG_CONFIG}={q(d.config)} --overwrite")
        lines.append(f"kubectl wait node/{q(d.node)} --timeout=15m --for=jsonpath="
                     "'{.metadata.labels.nvidia\\.com/mig\\.config\\.state}'=success")
        lines.append(f"kubectl uncordon {q(d.node)}")
    for p in export.pod_patches:
        ann = p.patch["metadata"]["annotations"]
        pairs = " ".join(q(f"{k}={v}") for k, v in ann.items())
        lines.append(f"kubectl annotate pod -n {q(p.namespace)} {q(p.name)} {pairs} "
                     "--overwrite")
    if export.bindings:
        lines.append("kubectl create -f bindings.yaml")
    return "\n".join(lines) + "\n"
