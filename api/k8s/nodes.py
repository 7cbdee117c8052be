"""Nodes as gpuplan sees them: GPU model, MIG strategy and layout, state, host capacity.

Read from the labels of GPU Feature Discovery, the capacity the NVIDIA device plugin
advertises and the GPU Operator's MIG manager labels (see names.py and
docs/kubernetes.md). Which physical GPU holds which MIG instance is not visible in
Kubernetes: MIG GPUs take the lowest indices and their layouts come from
`mig.layouts_for_counts`, unless the node carries a `gpuplan.io/mig-layout` annotation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.importing import ImportIssue
from api.k8s import names
from api.k8s.mig import layouts_for_counts, named_config_counts
from api.k8s.quantity import QuantityError, count, cpu_millicores, memory_gib
from models import GpuModel, Instance, is_valid_layout

ANN_MIG_LAYOUT = names.PREFIX + "mig-layout"
#: MIG manager states in which the node's devices are settled.
SETTLED_MIG_STATES = frozenset({"success"})


class NodeProblem(ValueError):
    """A node whose GPUs cannot be mapped; the message says why."""


@dataclass
class GpuState:
    """One GPU while the snapshot is assembled (health is settled after pods are read)."""

    index: int
    mig_enabled: bool
    instances: list[Instance] = field(default_factory=list)
    healthy: bool = True


@dataclass
class NodeState:
    """A GPU node: everything the request's Node needs, plus the MIG strategy."""

    name: str
    labels: dict[str, str]
    schedulable: bool
    model: str
    strategy: str
    single_profile: str | None
    gpus: list[GpuState]
    unhealthy_whole: int = 0
    topology_domain: str | None = None
    cpu_millicores: float | None = None
    memory_gib: float | None = None
    base_model: str | None = None
    variant: GpuModel | None = None


def single_model_name(model: str, profile: str) -> str:
    """The request model of GPUs under the single strategy: `<model>/single-<profile>`."""
    return f"{model}/single-{profile}"


def _ready(status: Mapping[str, Any]) -> bool:
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _counts(resources: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
    """(nvidia.com/gpu, {profile: nvidia.com/mig-<profile>}) from capacity/allocatable."""
    try:
        whole = count(resources.get(names.GPU_RESOURCE, "0"))
        mig = {k[len(names.MIG_RESOURCE_PREFIX):]: count(v) for k, v in resources.items()
               if k.startswith(names.MIG_RESOURCE_PREFIX)}
    except QuantityError as e:
        raise NodeProblem(f"device plugin capacity: {e}") from e
    return whole, {p: n for p, n in mig.items() if n > 0}


def is_gpu_node(obj: Mapping[str, Any]) -> bool:
    """A node with GFD labels or NVIDIA device-plugin capacity."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    cap = (obj.get("status") or {}).get("capacity") or {}
    return (isinstance(labels, dict) and names.LABEL_PRODUCT in labels) or (
        isinstance(cap, dict) and any(str(k).startswith("nvidia.com/") for k in cap))


def _annotated_layout(raw: str, model: GpuModel) -> dict[int, list[Instance]]:
    """`gpuplan.io/mig-layout`: {"<gpu index>": [{"profile", "start"}, ...]}."""
    try:
        data = json.loads(raw)
        out = {int(k): [Instance(str(i["profile"]), int(i["start"])) for i in v]
               for k, v in data.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise NodeProblem(f"annotation {ANN_MIG_LAYOUT} is malformed: {e}") from e
    for idx, layout in out.items():
        if not is_valid_layout(model, layout):
            raise NodeProblem(f"annotation {ANN_MIG_LAYOUT}: GPU {idx} layout is not valid")
    return out


def parse_node(
    obj: Mapping[str, Any],
    catalog: Mapping[str, GpuModel],
    aliases: Mapping[str, str],
    issues: list[ImportIssue],
) -> NodeState:
    """The GPU view of one v1 Node; raises NodeProblem when its GPUs cannot be mapped.

    Problems that leave the node usable (a malformed allocatable, a memory label that
    disagrees with the catalog) are appended to `issues` instead.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise NodeProblem("metadata.name is missing")
    name: str = meta["name"]
    ref = f"node/{name}"
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not all(isinstance(x, dict) for x in (labels, annotations, spec, status)):
        raise NodeProblem("metadata.labels, metadata.annotations, spec or status is not "
                          "an object")
    labels = {str(k): str(v) for k, v in labels.items()}
    capacity = status.get("capacity") or {}
    allocatable = status.get("allocatable") or {}
    if not isinstance(capacity, dict) or not isinstance(allocatable, dict):
        raise NodeProblem("status.capacity or status.allocatable is not an object")

    product_label = labels.get(names.LABEL_PRODUCT)
    if not product_label:
        raise NodeProblem(f"no {names.LABEL_PRODUCT} label (is GPU Feature Discovery "
                          "running on it?)")
    product = names.parse_product(product_label)
    model_name = names.resolve_model(product.base, catalog, aliases)
    if model_name is None:
        raise NodeProblem(f"unknown GPU product {product.base!r}: add it to the alias table")
    model = catalog[model_name]

    # Cordoned (spec.unschedulable) and NotReady nodes take no new work.
    schedulable = spec.get("unschedulable") is not True and _ready(status)
    mig_state = labels.get(names.LABEL_MIG_CONFIG_STATE)
    if mig_state is not None and mig_state not in SETTLED_MIG_STATES:
        schedulable = False
        issues.append(ImportIssue(object=ref, skipped=False, message=(
            f"{names.LABEL_MIG_CONFIG_STATE}={mig_state}: MIG reconfiguration in progress "
            "or failed; node marked unschedulable")))

    state = NodeState(name=name, labels=labels, schedulable=schedulable, model=model_name,
                      strategy=labels.get(names.LABEL_MIG_STRATEGY, "none"),
                      single_profile=None, gpus=[],
                      topology_domain=labels.get(names.LABEL_TOPOLOGY)
                      or labels.get(names.LABEL_CLIQUE))
    for key, attr, parse in (("cpu", "cpu_millicores", cpu_millicores),
                             ("memory", "memory_gib", memory_gib)):
        if key in allocatable:
            try:
                setattr(state, attr, parse(allocatable[key]))
            except QuantityError as e:
                issues.append(ImportIssue(object=ref, skipped=False, message=(
                    f"status.allocatable.{key}: {e}; host {key} left unconstrained")))

    if product.mig_profile is not None:
        _single_strategy(state, model, product.mig_profile, capacity, ref, issues)
    else:
        _check_memory(labels, model, model_name, ref, issues)
        _mixed_or_none(state, model, capacity, allocatable, annotations, ref, issues)
    return state


def _check_memory(labels: Mapping[str, str], model: GpuModel, model_name: str, ref: str,
                  issues: list[ImportIssue]) -> None:
    raw = labels.get(names.LABEL_MEMORY_MIB)
    if raw is None or model.memory_gib is None:
        return
    try:
        gib = float(raw) / 1024
    except ValueError:
        issues.append(ImportIssue(object=ref, skipped=False,
                                  message=f"{names.LABEL_MEMORY_MIB}={raw!r} is not a number"))
        return
    if abs(gib - model.memory_gib) > names.MEMORY_TOLERANCE * model.memory_gib:
        issues.append(ImportIssue(object=ref, skipped=False, message=(
            f"{names.LABEL_MEMORY_MIB}={raw} MiB does not match {model_name} "
            f"({model.memory_gib:g} GiB); planned as {model_name}")))


def _single_strategy(state: NodeState, model: GpuModel, profile: str,
                     capacity: Mapping[str, Any], ref: str, issues: list[ImportIssue]) -> None:
    """Single strategy: every GPU is MIG-enabled with instances of one profile, each
    advertised as nvidia.com/gpu."""
    spec = model.profile(profile)
    if spec is None:
        raise NodeProblem(f"{state.model} has no MIG profile {profile!r}")
    state.strategy, state.single_profile = "single", profile
    # A node model of its own that knows only this profile: the planner then never mixes
    # profiles there, and mixed-strategy MIG pods (another resource name) stay off it.
    state.base_model = state.model
    state.model = single_model_name(state.model, profile)
    variant = model.model_copy(update={"mig_profiles": (spec,)})
    state.variant = variant
    instances, _ = _counts(capacity)
    per_gpu = spec.max_count
    named = named_config_counts(state.labels.get(names.LABEL_MIG_CONFIG, ""),
                                state.base_model, model)
    if named and set(named) == {profile}:
        per_gpu = named[profile]
    n_gpus = math.ceil(instances / per_gpu)
    if instances % per_gpu:
        issues.append(ImportIssue(object=ref, skipped=False, message=(
            f"{instances} {profile} devices are not a multiple of {per_gpu} per GPU; "
            f"planned as {n_gpus} GPUs")))
    layouts = layouts_for_counts(variant, {profile: instances}, n_gpus) or []
    state.gpus = [GpuState(index=i, mig_enabled=True, instances=sorted(lay))
                  for i, lay in enumerate(layouts)]


def _mixed_or_none(state: NodeState, model: GpuModel, capacity: Mapping[str, Any],
                   allocatable: Mapping[str, Any], annotations: Mapping[str, Any],
                   ref: str, issues: list[ImportIssue]) -> None:
    """Mixed (or no) strategy: whole GPUs as nvidia.com/gpu, MIG devices per profile."""
    whole, mig = _counts(capacity)
    alloc_whole, _ = _counts(allocatable) if names.GPU_RESOURCE in allocatable else (whole, {})
    replicas_raw = state.labels.get(names.LABEL_REPLICAS, "1")
    replicas = int(replicas_raw) if replicas_raw.isdigit() and int(replicas_raw) > 0 else 1
    if replicas > 1:
        issues.append(ImportIssue(object=ref, skipped=False, message=(
            f"time-sliced ({replicas} replicas per GPU): planned as whole GPUs; mark "
            f"sharing pods with {names.ANN_GPU_SHARE}")))
        whole, alloc_whole = whole // replicas, alloc_whole // replicas
    if mig and not model.mig_capable:
        raise NodeProblem(f"advertises MIG devices but {state.model} is not MIG-capable")
    label_count = state.labels.get(names.LABEL_COUNT)
    if label_count is not None and label_count.isdigit():
        n_total = int(label_count)
    elif not mig:
        n_total = whole
    else:
        raise NodeProblem(f"MIG devices but no usable {names.LABEL_COUNT} label: the number "
                          "of physical GPUs is unknown")
    n_mig = n_total - whole
    if n_mig < 0:
        raise NodeProblem(f"{names.LABEL_COUNT}={n_total} is less than the {whole} whole "
                          f"GPUs advertised")
    if mig and state.strategy != "mixed":
        issues.append(ImportIssue(object=ref, skipped=False, message=(
            f"advertises MIG devices with {names.LABEL_MIG_STRATEGY}={state.strategy!r}; "
            "read as the mixed strategy")))
        state.strategy = "mixed"
    if n_mig and not model.mig_capable:
        raise NodeProblem(f"{names.LABEL_COUNT}={n_total} but only {whole} GPUs advertised")
    raw_layout = annotations.get(ANN_MIG_LAYOUT)
    if isinstance(raw_layout, str):
        fixed = _annotated_layout(raw_layout, model)
        bad = [i for i in fixed if not 0 <= i < n_total]
        if bad:
            raise NodeProblem(f"annotation {ANN_MIG_LAYOUT} names GPUs {bad} beyond "
                              f"{n_total}")
        state.gpus = [GpuState(index=i, mig_enabled=i in fixed,
                               instances=sorted(fixed.get(i, [])))
                      for i in range(n_total)]
    else:
        layouts = layouts_for_counts(model, mig, n_mig) if n_mig else ([] if not mig else None)
        if layouts is None:
            raise NodeProblem(
                "MIG devices " + ", ".join(f"{n} x {p}" for p, n in sorted(mig.items()))
                + f" do not fit {n_mig} MIG GPUs of {state.model} in any valid layout")
        state.gpus = [GpuState(index=i, mig_enabled=True, instances=sorted(lay))
                      for i, lay in enumerate(layouts)]
        state.gpus += [GpuState(index=i, mig_enabled=False) for i in range(n_mig, n_total)]
    state.unhealthy_whole = max(0, whole - alloc_whole)
