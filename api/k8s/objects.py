"""The queue, priority, topology and pod-group objects of a v1.1 import, as plain data.

`read_objects(items)` takes any mix of the objects below (single objects or `*List`
objects, as `kubectl get ... -o json|yaml` prints them; `objects_from_text` reads a JSON
or multi-document YAML file) and keeps what planning needs. Kinds are told apart by
`kind` and the API group of `apiVersion`:

- `ClusterQueue` (`kueue.x-k8s.io`): the cohort (`spec.cohort`, or v1beta2's
  `spec.cohortName`); per flavor, the `nvidia.com/gpu` `nominalQuota`, `borrowingLimit`
  and `lendingLimit`; which MIG resources it sets quotas for;
- `Cohort` (`kueue.x-k8s.io`, hierarchical cohorts): its parent (`spec.parent`, or
  v1beta2's `spec.parentName`) and `spec.resourceGroups` read as a ClusterQueue's;
- `WorkloadPriorityClass` (`kueue.x-k8s.io`): `value`;
- `LocalQueue` (`kueue.x-k8s.io`): (namespace, name) -> `spec.clusterQueue`;
- `ResourceFlavor` (`kueue.x-k8s.io`): `spec.nodeLabels`, `spec.topologyName`;
- `Topology` (`kueue.x-k8s.io` or `kai.scheduler`): `spec.levels[].nodeLabel`, widest first;
- `Queue` (`scheduling.run.ai`, KAI-Scheduler): `spec.parentQueue`,
  `spec.resources.gpu.quota` and `.limit`;
- `PriorityClass` (`scheduling.k8s.io`): `value`, `globalDefault`;
- `PodGroup` (`scheduling.volcano.sh`, `scheduling.x-k8s.io`, `scheduling.sigs.k8s.io`,
  `scheduling.run.ai`): (namespace, name) -> `spec.minMember` and (Volcano, KAI)
  `spec.priorityClassName`.

Objects of other kinds are ignored silently (a `kubectl get all` dump may hold anything);
objects of these kinds that are malformed become `ImportIssue`s (`<kind>/<name>`, skipped).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from api.importing import ImportIssue, SnapshotError
from api.k8s import names
from api.k8s.quantity import QuantityError, parse_quantity
from models.request import MAX_QUOTA


class ObjectProblem(ValueError):
    """An object of a known kind that cannot be read; the message says why."""


@dataclass(frozen=True)
class FlavorQuota:
    """The `nvidia.com/gpu` quota of one ResourceFlavor in a ClusterQueue."""

    flavor: str
    nominal: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None


@dataclass
class ClusterQueue:
    """A Kueue ClusterQueue as far as GPUs go."""

    name: str
    cohort: str | None
    flavors: list[FlavorQuota] = field(default_factory=list)
    #: MIG resources (`nvidia.com/mig-*`) it sets quotas for: not modelled, reported.
    mig_resources: list[str] = field(default_factory=list)


@dataclass
class KueueCohort:
    """A Kueue Cohort object: its parent cohort and its own GPU quota per flavor (on top
    of its members')."""

    name: str
    parent: str | None
    flavors: list[FlavorQuota] = field(default_factory=list)
    mig_resources: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Flavor:
    """A Kueue ResourceFlavor: the node labels that select its nodes, and its Topology."""

    name: str
    node_labels: Mapping[str, str]
    topology: str | None = None


@dataclass(frozen=True)
class KaiQueue:
    """A KAI-Scheduler Queue's GPU quota: `quota` (deserved, -1 = unlimited) and `limit`
    (-1 = no limit; None when not set)."""

    name: str
    parent: str | None
    quota: float
    limit: float | None


@dataclass(frozen=True)
class TopologySpec:
    """A Kueue or KAI Topology: its node labels from the widest level to the narrowest."""

    name: str
    levels: tuple[str, ...]


@dataclass
class K8sObjects:
    """Everything the optional objects of one import say."""

    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    #: Kueue Cohort objects (a cohort named only by ClusterQueues has none)
    cohorts: dict[str, KueueCohort] = field(default_factory=dict)
    #: (namespace, LocalQueue name) -> ClusterQueue name
    local_queues: dict[tuple[str, str], str] = field(default_factory=dict)
    flavors: dict[str, Flavor] = field(default_factory=dict)
    kai_queues: dict[str, KaiQueue] = field(default_factory=dict)
    #: PriorityClass name -> value
    priority_classes: dict[str, int] = field(default_factory=dict)
    #: the value of the PriorityClass marked `globalDefault`, if any
    default_priority: int | None = None
    #: Kueue WorkloadPriorityClass name -> value
    workload_priority_classes: dict[str, int] = field(default_factory=dict)
    topologies: dict[str, TopologySpec] = field(default_factory=dict)
    #: (namespace, PodGroup name) -> minMember
    pod_groups: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (namespace, PodGroup name) -> the PriorityClass its `spec.priorityClassName` names
    group_priority_classes: dict[tuple[str, str], str] = field(default_factory=dict)
    issues: list[ImportIssue] = field(default_factory=list)

    @property
    def kueue(self) -> bool:
        """Whether any Kueue queue object was given (pods' queue labels are then read)."""
        return bool(self.cluster_queues or self.local_queues or self.cohorts)


# --------------------------------------------------------------------- field readers

def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ObjectProblem("spec is not an object")
    return spec


def _opt_str(value: object, what: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ObjectProblem(f"{what} is not a string")
    return value


def _amount(value: object, what: str) -> float:
    """A quota amount: a Kubernetes quantity (string or number)."""
    try:
        q = float(parse_quantity(value))
    except QuantityError as e:
        raise ObjectProblem(f"{what}: {e}") from e
    if not math.isfinite(q) or not 0 <= q <= MAX_QUOTA:
        raise ObjectProblem(f"{what}: must be a quantity in [0, {MAX_QUOTA:g}], got {value!r}")
    return q


def _number(value: object, what: str) -> float:
    """A plain JSON number (KAI's queue amounts; -1 means unlimited)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ObjectProblem(f"{what} is not a number")
    if value > MAX_QUOTA:
        raise ObjectProblem(f"{what} is above {MAX_QUOTA:g}")
    return float(value)


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ObjectProblem(f"{what} is not an integer")
    return value


# --------------------------------------------------------------------- one reader per kind

def _gpu_quotas(spec: Mapping[str, Any]) -> tuple[list[FlavorQuota], list[str]]:
    """The `nvidia.com/gpu` quota per flavor of `spec.resourceGroups` (a ClusterQueue's or
    a Cohort's), and the MIG resources it sets quotas for."""
    flavors: list[FlavorQuota] = []
    mig: list[str] = []
    groups = spec.get("resourceGroups") or []
    if not isinstance(groups, list):
        raise ObjectProblem("spec.resourceGroups is not a list")
    for gi, group in enumerate(groups):
        entries = group.get("flavors") if isinstance(group, dict) else None
        if not isinstance(entries, list):
            raise ObjectProblem(f"spec.resourceGroups[{gi}].flavors is not a list")
        for fi, fl in enumerate(entries):
            where = f"spec.resourceGroups[{gi}].flavors[{fi}]"
            if not isinstance(fl, dict) or not isinstance(fl.get("name"), str):
                raise ObjectProblem(f"{where}.name is missing")
            resources = fl.get("resources") or []
            if not isinstance(resources, list):
                raise ObjectProblem(f"{where}.resources is not a list")
            for ri, res in enumerate(resources):
                rwhere = f"{where}.resources[{ri}]"
                rname = res.get("name") if isinstance(res, dict) else None
                if not isinstance(rname, str):
                    raise ObjectProblem(f"{rwhere}.name is missing")
                if rname.startswith(names.MIG_RESOURCE_PREFIX):
                    mig.append(rname)
                if rname != names.GPU_RESOURCE:
                    continue
                borrow, lend = res.get("borrowingLimit"), res.get("lendingLimit")
                flavors.append(FlavorQuota(
                    flavor=fl["name"],
                    nominal=_amount(res.get("nominalQuota", 0), f"{rwhere}.nominalQuota"),
                    borrowing_limit=None if borrow is None else _amount(
                        borrow, f"{rwhere}.borrowingLimit"),
                    lending_limit=None if lend is None else _amount(
                        lend, f"{rwhere}.lendingLimit")))
    return flavors, mig


def _cluster_queue(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    spec = _spec(obj)
    cohort = _opt_str(spec.get("cohort"), "spec.cohort") or _opt_str(
        spec.get("cohortName"), "spec.cohortName")
    flavors, mig = _gpu_quotas(spec)
    out.cluster_queues[name] = ClusterQueue(name=name, cohort=cohort, flavors=flavors,
                                            mig_resources=mig)


def _cohort(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    spec = _spec(obj)
    parent = _opt_str(spec.get("parent"), "spec.parent") or _opt_str(
        spec.get("parentName"), "spec.parentName")
    flavors, mig = _gpu_quotas(spec)
    out.cohorts[name] = KueueCohort(name=name, parent=parent, flavors=flavors,
                                    mig_resources=mig)


def _workload_priority_class(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    out.workload_priority_classes[name] = _int(obj.get("value"), "value")


def _local_queue(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    ns = (obj.get("metadata") or {}).get("namespace") or "default"
    target = _opt_str(_spec(obj).get("clusterQueue"), "spec.clusterQueue")
    if target is None:
        raise ObjectProblem("spec.clusterQueue is missing")
    out.local_queues[(str(ns), name)] = target


def _flavor(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    spec = _spec(obj)
    labels = spec.get("nodeLabels") or {}
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ObjectProblem("spec.nodeLabels is not a map of strings")
    out.flavors[name] = Flavor(name=name, node_labels=dict(labels),
                               topology=_opt_str(spec.get("topologyName"), "spec.topologyName"))


def _topology(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    levels = _spec(obj).get("levels")
    if not isinstance(levels, list) or not levels:
        raise ObjectProblem("spec.levels must be a non-empty list")
    labels = []
    for i, level in enumerate(levels):
        label = level.get("nodeLabel") if isinstance(level, dict) else None
        if not isinstance(label, str) or not label:
            raise ObjectProblem(f"spec.levels[{i}].nodeLabel is missing")
        labels.append(label)
    if len(set(labels)) != len(labels):
        raise ObjectProblem("spec.levels name a node label twice")
    out.topologies[name] = TopologySpec(name=name, levels=tuple(labels))


def _kai_queue(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    spec = _spec(obj)
    resources = spec.get("resources") or {}
    gpu = resources.get("gpu") if isinstance(resources, dict) else None
    if gpu is None:
        gpu = {}
    if not isinstance(gpu, dict):
        raise ObjectProblem("spec.resources.gpu is not an object")
    quota = _number(gpu.get("quota", 0), "spec.resources.gpu.quota")
    limit = None if gpu.get("limit") is None else _number(gpu["limit"],
                                                           "spec.resources.gpu.limit")
    for what, v in (("quota", quota), ("limit", limit)):
        if v is not None and v < 0 and v != -1:
            raise ObjectProblem(f"spec.resources.gpu.{what} is {v:g}: must be >= 0 or -1")
    out.kai_queues[name] = KaiQueue(
        name=name, parent=_opt_str(spec.get("parentQueue"), "spec.parentQueue"),
        quota=quota, limit=limit)


def _priority_class(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    value = _int(obj.get("value"), "value")
    out.priority_classes[name] = value
    if obj.get("globalDefault") is True:
        out.default_priority = value


def _pod_group(obj: Mapping[str, Any], name: str, out: K8sObjects) -> None:
    ns = (obj.get("metadata") or {}).get("namespace") or "default"
    spec = _spec(obj)
    raw = spec.get("minMember")
    value = None if raw is None else _int(raw, "spec.minMember")
    if value is not None and value < 0:
        raise ObjectProblem("spec.minMember is negative")
    cls = _opt_str(spec.get("priorityClassName"), "spec.priorityClassName")
    if value is not None:
        out.pod_groups[(str(ns), name)] = value
    if cls is not None:
        out.group_priority_classes[(str(ns), name)] = cls


_KUEUE = "kueue.x-k8s.io"
#: (kind, API group) -> reader. One registry; the module docstring lists the fields.
READERS = {
    ("ClusterQueue", _KUEUE): _cluster_queue,
    ("Cohort", _KUEUE): _cohort,
    ("WorkloadPriorityClass", _KUEUE): _workload_priority_class,
    ("LocalQueue", _KUEUE): _local_queue,
    ("ResourceFlavor", _KUEUE): _flavor,
    ("Topology", _KUEUE): _topology,
    ("Topology", "kai.scheduler"): _topology,
    ("Queue", "scheduling.run.ai"): _kai_queue,
    ("PriorityClass", "scheduling.k8s.io"): _priority_class,
    ("PodGroup", "scheduling.volcano.sh"): _pod_group,
    ("PodGroup", "scheduling.x-k8s.io"): _pod_group,
    ("PodGroup", "scheduling.sigs.k8s.io"): _pod_group,
    ("PodGroup", "scheduling.run.ai"): _pod_group,
}


def _flatten(items: Iterable[object]) -> Iterable[object]:
    """Objects, with the items of `List` / `*List` objects spliced in."""
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("items"), list) and (
                str(item.get("kind", "")).endswith("List")):
            yield from _flatten(item["items"])
        elif item is not None:
            yield item


def read_objects(items: Iterable[object]) -> K8sObjects:
    """Read the objects of the kinds in `READERS`; malformed ones become issues."""
    out = K8sObjects()
    for i, item in enumerate(_flatten(items)):
        if not isinstance(item, dict):
            out.issues.append(ImportIssue(object=f"object/#{i}", skipped=True,
                                          message="not an object"))
            continue
        kind = item.get("kind")
        group = str(item.get("apiVersion", "")).rpartition("/")[0]
        reader = READERS.get((str(kind), group))
        if reader is None:
            continue
        meta = item.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        ref = f"{str(kind).lower()}/{name if isinstance(name, str) and name else '#' + str(i)}"
        try:
            if not isinstance(name, str) or not name:
                raise ObjectProblem("metadata.name is missing")
            reader(item, name, out)
        except ObjectProblem as e:
            out.issues.append(ImportIssue(object=ref, skipped=True, message=str(e)))
    return out


def objects_from_text(text: str, source: str = "objects") -> list[object]:
    """The documents of a JSON file or a (multi-document) YAML file.

    Raises SnapshotError (with `source` as the location) when the text is neither.
    """
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "malformed"
        raise SnapshotError((source,), f"neither JSON nor YAML: {problem}{where}") from e
