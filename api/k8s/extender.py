"""A kube-scheduler extender: filter and prioritize nodes for one pod.

Wire types are those of `k8s.io/kube-scheduler/extender/v1`, whose Go structs carry no
JSON tags, so the field names are PascalCase: `ExtenderArgs{Pod, Nodes, NodeNames}` ->
`ExtenderFilterResult{Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}`
and `HostPriorityList` = `[{"Host", "Score"}]` with scores 0..10 (`MaxExtenderPriority`).

Decisions are taken against the state's view (`api.k8s.state`): the newest snapshot
(posted, or kept live by the watch) with the pods the extender assumed placed. Fit is
judged by the compiled instance every planner uses (`models.instance.ClusterState`:
free whole GPUs, share fractions and GPU memory, MIG instances, host CPU and memory) and
eligibility by `models.rules`; the extender only proposes which devices of the node the
pod would take (lowest free whole GPUs, the tightest GPU with room for a share, a free
instance of the smallest fitting MIG profile) and asks the instance whether they fit.

Scores (prioritize) use the whole 0..10 range:

- 0: the pod does not fit, wants no GPU, or the node is unknown to the view;
- 10: the one best node: the node of the cached plan if there is one, else the highest
  quality `q = (relative speed + packing) / 2`, where relative speed is the pod's speed on
  the node's model over its best speed among the fitting nodes and packing is the share of
  the node's GPUs in use once the pod is placed; ties on `q` go to the fuller node (higher
  packing), then to the first node name in sort order: a stable rule that fills one node
  before opening the next;
- 1..9: every other fitting node, `1 + round(8 * (q - q_min) / (q_max - q_min))` over the
  fitting nodes (9 when all `q` are equal), so that small differences still order nodes.

The node scored 10 (or the only node that passes filter, since kube-scheduler then skips
prioritize) is where the pod is assumed to land.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.k8s.pods import (
    PodInfo,
    PodProblem,
    gang_job_name,
    group_of,
    job_options,
    parse_pod,
)
from api.k8s.snapshot import Snapshot, build_snapshot, demand_of, list_items
from api.k8s.state import K8sState, View
from api.k8s.watch import PODS, BindError
from models import Job, Node, Placement, Plan
from models.instance import ClusterState, GpuSlot, JobInfo, compile_jobs, mig_placement
from models.request import speed
from models.rules import mig_profiles_for, model_eligible

log = logging.getLogger("gpuplan.k8s")

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


class ExtenderBindingArgs(BaseModel):
    """extenderv1.ExtenderBindingArgs: bind this pod to this node (bindVerb)."""

    model_config = ConfigDict(extra="forbid")

    PodName: str
    PodNamespace: str
    PodUID: str = ""
    Node: str


class ExtenderBindingResult(BaseModel):
    """extenderv1.ExtenderBindingResult."""

    model_config = ConfigDict(extra="forbid")

    Error: str = ""


@dataclass
class Verdict:
    """One node's answer: fits (with the devices it would take) or why not."""

    fits: bool
    reason: str = ""
    resolvable: bool = True
    #: the node is not in the view: passed without a judgement
    unknown: bool = False
    packing: float = 0.0
    speed: float = 0.0
    job: Job | None = None
    placements: list[Placement] = field(default_factory=list)


def _job_for(pod: PodInfo, snapshot: Snapshot, node_name: str) -> Job:
    """The pod as a pending single-node job, with its demand as it reads on that node."""
    options = job_options(pod)
    node = snapshot.nodes.get(node_name)
    demand = demand_of(pod, options, node)
    opts = {k: v for k, v in options.items()
            if k not in ("gpu_share", "mig_profile", "single_node", "same_domain")}
    return Job(name=pod.ref, tenant=pod.namespace, cpu_millicores=pod.cpu_millicores,
               host_memory_gib=pod.host_memory_gib, **{**opts, **demand})


def _usable(occ: ClusterState, node: str) -> list[GpuSlot]:
    return [occ.gpus[g] for g in occ.nodes[occ.node_of[node]].gpus if occ.gpus[g].usable]


def _propose(occ: ClusterState, info: JobInfo, node: str, profiles: Sequence[str]
             ) -> list[Placement] | str:
    """The devices of `node` the pod would take, or why there are none free."""
    gpus = _usable(occ, node)
    if info.shape == "whole":
        free = sorted((g for g in gpus if not g.mig and g.is_free), key=lambda g: g.index)
        if len(free) < info.gpus:
            return f"needs {info.gpus} free GPUs, {len(free)} free"
        return [Placement(node=node, gpu=g.index) for g in free[:info.gpus]]
    if info.shape == "share":
        # Tightest partly shared GPU first (keeps whole GPUs free), then the lowest free one.
        room = sorted((g for g in gpus if occ.share_fits(g, info.share, info.gpu_mem)),
                      key=lambda g: (not g.share_jobs, 1.0 - g.share_used, g.index))
        if not room:
            mem = f" and {info.gpu_mem:g} GiB" if info.gpu_mem else ""
            return f"no GPU with room for a {info.share:g} share{mem}"
        return [Placement(node=node, gpu=room[0].index, fraction=info.share)]
    for profile in profiles:
        for g in sorted((g for g in gpus if g.mig), key=lambda g: g.index):
            idle = sorted((i for i in g.mig_current - set(g.mig_used) if i.profile == profile),
                          key=lambda i: i.start)
            if idle:
                return [mig_placement(node, g.index, idle[0])]
    return (f"no free {' or '.join(profiles) or 'matching'} MIG device (a MIG "
            "reconfiguration is needed: see `gpuplan k8s export`)")


def _packing(occ: ClusterState, node: str, added: float) -> float:
    """Share of the node's GPUs in use once `added` GPU equivalents are placed."""
    slots = [occ.gpus[g] for g in occ.nodes[occ.node_of[node]].gpus]
    used = added
    for g in slots:
        if g.whole_job is not None:
            used += 1.0
        elif g.mig:
            spec = occ.catalog[g.model]
            for inst in g.mig_used:
                prof = spec.profile(inst.profile)
                used += prof.compute_slices / spec.compute_slices if prof else 0.0
        else:
            used += g.share_used
    return min(1.0, used / len(slots)) if slots else 0.0


class _Judge:
    """Judges one pod against the nodes of one view (compiling its job once per shape)."""

    def __init__(self, pod: PodInfo, view: View) -> None:
        self.pod = pod
        self.view = view
        self.snapshot = view.snapshot
        self.catalog = view.occupancy.catalog
        self.nodes: dict[str, Node] = {n.name: n for n in self.snapshot.request.cluster.nodes}
        self._compiled: dict[str, JobInfo] = {}

    def _info(self, job: Job) -> JobInfo:
        key = job.model_dump_json()
        info = self._compiled.get(key)
        if info is None:
            request = self.snapshot.request.model_copy(update={"jobs": [job]})
            info = self._compiled[key] = compile_jobs(request)[0]
        return info

    def _missing(self, name: str) -> Verdict:
        """A node that is not an imported GPU node of the view."""
        if name not in self.view.known_nodes:
            return Verdict(True, "not in gpuplan's view of the cluster (new node, or no "
                                 "snapshot since it joined): passed unjudged", unknown=True)
        issue = next((i for i in self.snapshot.issues
                      if i.skipped and i.object == f"node/{name}"), None)
        if issue is not None:
            return Verdict(False, f"GPU node not imported: {issue.message}", resolvable=False)
        return Verdict(False, "no NVIDIA GPUs (no GPU Feature Discovery labels or device "
                              "plugin capacity)", resolvable=False)

    def __call__(self, name: str) -> Verdict:
        """Whether the pod fits node `name` now, which devices it would take, how well."""
        node = self.nodes.get(name)
        if node is None:
            return self._missing(name)
        if not node.gpus:
            return Verdict(False, "no GPUs", resolvable=False)
        pod = self.pod
        try:
            job = _job_for(pod, self.snapshot, name)
        except (PodProblem, ValidationError) as e:
            return Verdict(False, f"pod cannot run here: {e}", resolvable=False)
        state = self.snapshot.nodes[name]
        if job.mig_profile is not None and (state.single_profile is not None) == bool(pod.mig):
            return Verdict(False, "MIG devices are advertised under another resource name "
                                  f"here (MIG strategy {state.strategy})", resolvable=False)
        model = node.gpus[0].model
        # Single-strategy GPUs have a model of their own; throughput maps name the real one.
        named = state.base_model or model
        spec = self.catalog[model]
        rate = speed(job, named, self.catalog)
        if not model_eligible(job, named, spec) or rate <= 0:
            return Verdict(False, f"GPU model {named} is not eligible for the pod",
                           resolvable=False)
        if not node.schedulable:
            return Verdict(False, "node is cordoned, NotReady or reconfiguring MIG")
        info = self._info(job)
        occ = self.view.occupancy
        profiles = [p.name for p in mig_profiles_for(job, spec)]
        proposed = _propose(occ, info, name, profiles)
        if isinstance(proposed, str):
            return Verdict(False, proposed)
        why = occ.conflicts(info, proposed)
        if why is not None:
            return Verdict(False, why)
        if info.shape == "mig":
            prof = spec.profile(proposed[0].mig.profile if proposed[0].mig else "")
            size = prof.compute_slices / spec.compute_slices if prof else 0.0
        else:
            size = float(info.gpus) if info.shape == "whole" else info.share
        return Verdict(True, packing=_packing(occ, name, size), speed=rate,
                       job=job.model_copy(update={"current": proposed}), placements=proposed)


def _planned_nodes(pod: PodInfo, plan: Plan | None) -> set[str]:
    if plan is None:
        return set()
    group = group_of(pod)
    wanted = {pod.ref, gang_job_name(pod.namespace, group[1]) if group else ""}
    return {p.node for a in plan.assignments if a.job in wanted for p in a.placements}


@dataclass
class _Call:
    """One extender call: the pod, its candidate nodes and the view to judge them in."""

    pod: PodInfo
    names: list[str]
    objects: dict[str, Any]
    view: View | None
    #: the view is the state's own (not built from the Node objects of the call)
    cached: bool


def _call(args: ExtenderArgs, state: K8sState) -> _Call:
    """Parse the pod and candidates; raises PodProblem / ValueError for malformed input."""
    pod = parse_pod(args.Pod)
    state.forget(pod.ref)  # the scheduler is (re)trying this pod: nothing is assumed of it
    if args.Nodes is None:
        return _Call(pod, list(args.NodeNames or []), {}, state.view(), True)
    items = list_items(args.Nodes, "Nodes")
    objs = {str((o.get("metadata") or {}).get("name")): o for o in items if isinstance(o, dict)}
    pods = state.pods_list()
    if pods is None:
        return _Call(pod, list(objs), objs, None, False)
    snap = build_snapshot(args.Nodes, pods, policy=state.policy, aliases=state.aliases,
                          objects=state.objects)
    return _Call(pod, list(objs), objs, state.view_of(snap, args.Nodes), False)


def _no_view(state: K8sState) -> Verdict | str:
    """What to do without any view: pass everything (warning) or answer an Error."""
    if state.settings.no_state == "error":
        return ("gpuplan: no cluster view yet (the watch has not listed the cluster, or no "
                "snapshot was posted to /v1/k8s/snapshot)")
    state.warn("no-view", "no cluster view yet: passing every node unjudged "
                          "(GPUPLAN_K8S_NO_STATE=error makes this an error)")
    return Verdict(True, "no cluster view yet: passed unjudged", unknown=True)


def _verdicts(call: _Call, args: ExtenderArgs, state: K8sState
              ) -> list[tuple[str, Verdict]] | str:
    if not call.pod.wants_gpu:
        return [(n, Verdict(True, unknown=True)) for n in call.names]
    view = call.view
    if view is None and args.Nodes is not None and state.settings.no_state == "pass":
        # Node objects but no pods: judge model and MIG layout, not occupancy (the
        # scheduler's own resource accounting still counts nvidia.com/* requests).
        state.warn("no-pods", "no pods known yet: judging the Node objects as if idle")
        snap = build_snapshot(args.Nodes, {"kind": "List", "items": []},
                              policy=state.policy, aliases=state.aliases,
                              objects=state.objects)
        view = state.view_of(snap, args.Nodes, assumptions=False)
    if view is None:
        answer = _no_view(state)
        return answer if isinstance(answer, str) else [(n, answer) for n in call.names]
    judge_one = _Judge(call.pod, view)
    out = [(n, judge_one(n)) for n in call.names]
    unknown = [n for n, v in out if v.unknown]
    if unknown:
        state.warn(f"unknown:{','.join(unknown)}", f"nodes {unknown} are not in the view "
                   "(new, or renamed since the last snapshot): passed unjudged")
    return out


def extender_filter(args: ExtenderArgs, state: K8sState) -> ExtenderFilterResult:
    """The filter verb: the nodes where the pod fits now, and why the others fail."""
    try:
        call = _call(args, state)
    except (PodProblem, ValueError) as e:
        return ExtenderFilterResult(Error=f"gpuplan: {e}")
    verdicts = _verdicts(call, args, state)
    if isinstance(verdicts, str):
        return ExtenderFilterResult(Error=verdicts)
    result = ExtenderFilterResult()
    passed = [n for n, v in verdicts if v.fits]
    only_one = passed[0] if len(passed) == 1 else None
    for name, v in verdicts:
        if v.fits:
            if name == only_one and v.job is not None:
                # kube-scheduler skips prioritize when one node is left: it goes there.
                state.assume(call.pod.ref, name, v.job)
        elif v.resolvable or state.settings.failed_nodes_only:
            result.FailedNodes[name] = v.reason
        else:
            result.FailedAndUnresolvableNodes[name] = v.reason
    if args.Nodes is not None:
        result.Nodes = {**{k: v for k, v in args.Nodes.items() if k != "items"},
                        "items": [call.objects[n] for n in passed]}
    else:
        result.NodeNames = passed
    return result


def scores(verdicts: Sequence[tuple[str, Verdict]], planned: set[str]) -> dict[str, int]:
    """Node -> 0..10 by the mapping and tie rule of the module doc."""
    fitting = [(n, v) for n, v in verdicts if v.fits and not v.unknown]
    out = {n: 0 for n, _ in verdicts}
    if not fitting:
        return out
    best_speed = max(v.speed for _, v in fitting)
    quality = {n: 0.5 * (v.speed / best_speed if best_speed > 0 else 0.0) + 0.5 * v.packing
               for n, v in fitting}
    packing = {n: v.packing for n, v in fitting}
    ranked = sorted(quality, key=lambda n: (n not in planned, -round(quality[n], 9),
                                            -round(packing[n], 9), n))
    lo, hi = min(quality.values()), max(quality.values())
    for n in ranked[1:]:
        norm = (quality[n] - lo) / (hi - lo) if hi - lo > 1e-9 else 1.0
        out[n] = min(MAX_SCORE - 1, 1 + math.floor(8 * norm + 0.5))
    out[ranked[0]] = MAX_SCORE
    return out


def extender_prioritize(args: ExtenderArgs, state: K8sState) -> list[HostPriority]:
    """The prioritize verb: a 0..10 score per candidate node (see the module doc)."""
    try:
        call = _call(args, state)
    except (PodProblem, ValueError):
        return []
    verdicts = _verdicts(call, args, state)
    if isinstance(verdicts, str):
        return [HostPriority(Host=n, Score=0) for n in call.names]
    plan = state.plan if call.cached else None
    by_node = scores(verdicts, _planned_nodes(call.pod, plan))
    best = next((n for n, s in by_node.items() if s == MAX_SCORE), None)
    chosen = dict(verdicts).get(best) if best is not None else None
    if chosen is not None and chosen.job is not None and best is not None:
        state.assume(call.pod.ref, best, chosen.job)
    return [HostPriority(Host=n, Score=by_node[n]) for n, _ in verdicts]


def extender_bind(args: ExtenderBindingArgs, state: K8sState) -> ExtenderBindingResult:
    """The bind verb: bind the pod through the API; gpuplan then knows where it is."""
    ref = f"{args.PodNamespace}/{args.PodName}"
    if state.binder is None:
        return ExtenderBindingResult(Error="gpuplan: bindVerb needs API access: run with "
                                           "GPUPLAN_K8S_WATCH=true (gpuplan serve --k8s-watch)")
    try:
        state.binder(args.PodNamespace, args.PodName, args.PodUID or None, args.Node)
    except BindError as e:
        state.forget(ref)
        return ExtenderBindingResult(Error=f"gpuplan: binding {ref} to {args.Node} failed: {e}")
    with state.lock:
        assumed = state.assumed.get(ref)
    if assumed is not None and assumed.node == args.Node:
        state.assume(ref, args.Node, assumed.job, bound=True)
        return ExtenderBindingResult()
    # The scheduler chose another node (other plugins' scores): count the pod there.
    state.forget(ref)
    obj = state.live.get(PODS, ref) if state.live is not None else None
    view = state.view()
    if obj is not None and view is not None:
        try:
            verdict = _Judge(parse_pod(obj), view)(args.Node)
        except PodProblem:
            verdict = Verdict(False)
        if verdict.job is not None:
            state.assume(ref, args.Node, verdict.job, bound=True)
    return ExtenderBindingResult()
