"""A kube-scheduler extender: filter and prioritize nodes for one pod.

Wire types are those of `k8s.io/kube-scheduler/extender/v1`, whose Go structs carry no
JSON tags, so the field names are PascalCase: `ExtenderArgs{Pod, Nodes, NodeNames}` ->
`ExtenderFilterResult{Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}`
and `HostPriorityList` = `[{"Host", "Score"}]` with scores 0..10 (`MaxExtenderPriority`).

Decisions score nodes directly by fit against the cached cluster state (the latest
snapshot: nodes and running pods), which takes microseconds per node: a node passes when
the pod fits the devices that exist there now (whole GPUs that no running pod holds, a
free MIG instance of the requested profile, room for a GPU share) on an eligible model.
Scores favour the plan's choice when a plan is cached (10), else half the job's relative
speed on the node's model (vs the best candidate) and half how full the node's devices of
that kind become (bin packing keeps whole GPUs and MIG GPUs free elsewhere).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.k8s.issues import ImportIssue
from api.k8s.pods import (
    PodInfo,
    PodProblem,
    gang_job_name,
    group_of,
    job_options,
    parse_pod,
)
from api.k8s.snapshot import Snapshot, build_snapshot, demand_of, list_items
from models import GpuModel, Instance, Job, Node, Plan, Policy, model_eligible, speed

#: kube-scheduler's extenderv1.MaxExtenderPriority.
MAX_SCORE = 10


class ExtenderArgs(BaseModel):
    """extenderv1.ExtenderArgs: the pod and its candidate nodes (objects or names)."""

    model_config = ConfigDict(extra="forbid")

    Pod: dict[str, Any]
    Nodes: dict[str, Any] | None = Field(
        default=None, description="v1.NodeList; set when nodeCacheCapable is false.")
    NodeNames: list[str] | None = Field(
        default=None, description="Node names; set when nodeCacheCapable is true.")


class ExtenderFilterResult(BaseModel):
    """extenderv1.ExtenderFilterResult."""

    model_config = ConfigDict(extra="forbid")

    Nodes: dict[str, Any] | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(BaseModel):
    """extenderv1.HostPriority."""

    model_config = ConfigDict(extra="forbid")

    Host: str
    Score: int = Field(ge=0, le=MAX_SCORE)


@dataclass
class K8sState:
    """What the service remembers between calls: the latest snapshot and plan."""

    nodes: object = None
    pods: object = None
    policy: Policy | None = None
    aliases: dict[str, str] = field(default_factory=dict)
    snapshot: Snapshot | None = None
    plan: Plan | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, nodes: object, pods: object | None, policy: Policy | None = None,
               aliases: Mapping[str, str] | None = None) -> Snapshot:
        """Import and remember a snapshot (pods None = keep the cached pods)."""
        with self.lock:
            pods = pods if pods is not None else self.pods or {"kind": "List", "items": []}
            snap = build_snapshot(nodes, pods, policy=policy or self.policy,
                                  aliases=aliases if aliases is not None else self.aliases)
            self.nodes, self.pods, self.snapshot, self.plan = nodes, pods, snap, None
            if policy is not None:
                self.policy = policy
            if aliases is not None:
                self.aliases = dict(aliases)
            return snap


@dataclass
class _Free:
    whole: list[int]
    share_room: dict[int, float]
    mig: dict[str, int]
    used: float
    total: float


def _free(node: Node, snapshot: Snapshot, catalog: Mapping[str, GpuModel]) -> _Free:
    """Devices of `node` that no running job holds, and how full the node is."""
    whole: set[int] = set()
    share: dict[int, float] = {}
    mig: set[tuple[int, Instance]] = set()
    for job in snapshot.request.jobs:
        for p in job.current or []:
            if p.node != node.name:
                continue
            if p.mig is not None:
                mig.add((p.gpu, p.mig.key()))
            elif p.fraction is not None:
                share[p.gpu] = share.get(p.gpu, 0.0) + p.fraction
            else:
                whole.add(p.gpu)
    free_whole = [g.index for g in node.gpus if g.healthy and not g.mig_enabled
                  and g.index not in whole and g.index not in share]
    room = {g.index: 1.0 - share.get(g.index, 0.0) for g in node.gpus
            if g.healthy and not g.mig_enabled and g.index not in whole}
    free_mig: dict[str, int] = {}
    used = float(len(whole)) + sum(share.values())
    for g in node.gpus:
        spec = catalog[g.model]
        for inst in g.mig_instances:
            if (g.index, inst.key()) in mig:
                prof = spec.profile(inst.profile)
                used += prof.compute_slices / spec.compute_slices if prof else 0.0
            elif g.healthy:
                free_mig[inst.profile] = free_mig.get(inst.profile, 0) + 1
    return _Free(whole=free_whole, share_room=room, mig=free_mig, used=used,
                 total=float(len(node.gpus)))


@dataclass
class Verdict:
    """One node's answer: fits (with a 0..1 packing term) or why not."""

    fits: bool
    reason: str = ""
    resolvable: bool = True
    packing: float = 0.0
    speed: float = 0.0


def _job_for(pod: PodInfo, snapshot: Snapshot, node_name: str) -> Job:
    options = job_options(pod)
    node = snapshot.nodes.get(node_name)
    demand = demand_of(pod, options, node)
    opts = {k: v for k, v in options.items()
            if k not in ("gpu_share", "mig_profile", "single_node", "same_domain")}
    return Job(name=pod.ref, tenant=pod.namespace, **{**opts, **demand})


def judge(pod: PodInfo, node_name: str, snapshot: Snapshot) -> Verdict:
    """Whether `pod` fits node `node_name` of `snapshot` now, and how well."""
    node = next((n for n in snapshot.request.cluster.nodes if n.name == node_name), None)
    if node is None:
        return Verdict(False, "not a GPU node gpuplan could import (see the snapshot "
                              "warnings)", resolvable=False)
    if not node.gpus:
        return Verdict(False, "no GPUs", resolvable=False)
    catalog = snapshot.request.cluster.catalog()
    try:
        job = _job_for(pod, snapshot, node_name)
    except (PodProblem, ValidationError) as e:
        return Verdict(False, f"pod cannot run here: {e}", resolvable=False)
    state = snapshot.nodes[node_name]
    if job.mig_profile is not None and (state.single_profile is not None) == bool(pod.mig):
        return Verdict(False, "MIG devices are advertised under another resource name here "
                              f"(MIG strategy {state.strategy})", resolvable=False)
    model_name = node.gpus[0].model
    # Single-strategy GPUs have a model of their own; throughput maps name the real one.
    named = state.base_model or model_name
    if not model_eligible(job, named, catalog[model_name]):
        return Verdict(False, f"GPU model {named} is not eligible for the pod",
                       resolvable=False)
    if not node.schedulable:
        return Verdict(False, "node is cordoned, NotReady or reconfiguring MIG")
    free = _free(node, snapshot, catalog)
    rate = speed(job, named, catalog)
    if job.gpus is not None:
        if len(free.whole) < job.gpus:
            return Verdict(False, f"needs {job.gpus} free GPUs, {len(free.whole)} free")
        size: float = job.gpus
    elif job.gpu_share is not None:
        share = job.gpu_share
        if not any(r + 1e-9 >= share for r in free.share_room.values()):
            return Verdict(False, f"no GPU with room for a {share:g} share")
        size = share
    else:
        profile = job.mig_profile or ""
        if free.mig.get(profile, 0) < 1:
            return Verdict(False, f"no free {profile} MIG device (a MIG reconfiguration is "
                                  "needed: see `gpuplan k8s export`)")
        spec = catalog[model_name]
        prof = spec.profile(profile)
        size = prof.compute_slices / spec.compute_slices if prof else 0.0
    packing = min(1.0, (free.used + size) / free.total) if free.total else 0.0
    return Verdict(True, packing=packing, speed=rate)


def _planned_nodes(pod: PodInfo, plan: Plan | None) -> set[str]:
    if plan is None:
        return set()
    group = group_of(pod)
    wanted = {pod.ref, gang_job_name(pod.namespace, group[1]) if group else ""}
    return {p.node for a in plan.assignments if a.job in wanted for p in a.placements}


def _candidates(args: ExtenderArgs, state: K8sState) -> tuple[list[str], Snapshot | None,
                                                              dict[str, Any]]:
    """Candidate names, the snapshot to judge them against and the node objects by name."""
    if args.Nodes is not None:
        items = list_items(args.Nodes, "Nodes")
        objs = {str((o.get("metadata") or {}).get("name")): o for o in items
                if isinstance(o, dict)}
        snap = build_snapshot(args.Nodes, state.pods or {"kind": "List", "items": []},
                              policy=state.policy, aliases=state.aliases)
        return list(objs), snap, objs
    return list(args.NodeNames or []), state.snapshot, {}


def _pod(args: ExtenderArgs) -> PodInfo:
    return parse_pod(args.Pod)


def extender_filter(args: ExtenderArgs, state: K8sState) -> ExtenderFilterResult:
    """The filter verb: the nodes where the pod fits now, and why the others fail."""
    try:
        pod = _pod(args)
        names, snap, objs = _candidates(args, state)
    except (PodProblem, ValueError) as e:
        return ExtenderFilterResult(Error=f"gpuplan: {e}")
    passed: list[str] = []
    result = ExtenderFilterResult()
    if not pod.wants_gpu:
        passed = names
    elif snap is None:
        return ExtenderFilterResult(Error="gpuplan: no cluster snapshot cached; POST "
                                          "/v1/k8s/snapshot first")
    else:
        for name in names:
            v = judge(pod, name, snap)
            if v.fits:
                passed.append(name)
            elif v.resolvable:
                result.FailedNodes[name] = v.reason
            else:
                result.FailedAndUnresolvableNodes[name] = v.reason
    if args.Nodes is not None:
        result.Nodes = {**{k: v for k, v in args.Nodes.items() if k != "items"},
                        "items": [objs[n] for n in passed]}
    else:
        result.NodeNames = passed
    return result


def extender_prioritize(args: ExtenderArgs, state: K8sState) -> list[HostPriority]:
    """The prioritize verb: a 0..10 score per candidate node (see the module doc)."""
    try:
        pod = _pod(args)
        names, snap, _ = _candidates(args, state)
    except (PodProblem, ValueError):
        return []
    if not pod.wants_gpu or snap is None:
        return [HostPriority(Host=n, Score=0) for n in names]
    verdicts: Sequence[tuple[str, Verdict]] = [(n, judge(pod, n, snap)) for n in names]
    best = max((v.speed for _, v in verdicts if v.fits), default=0.0)
    planned = _planned_nodes(pod, state.plan if snap is state.snapshot else None)
    out: list[HostPriority] = []
    for name, v in verdicts:
        if not v.fits:
            score = 0
        elif name in planned:
            score = MAX_SCORE
        else:
            rel = v.speed / best if best > 0 else 0.0
            cap = MAX_SCORE - 1 if planned else MAX_SCORE
            score = min(cap, round(MAX_SCORE * (0.5 * rel + 0.5 * v.packing)))
        out.append(HostPriority(Host=name, Score=max(0, score)))
    return out


def issues_of(state: K8sState) -> list[ImportIssue]:
    """The warnings of the cached snapshot."""
    return list(state.snapshot.issues) if state.snapshot else []
