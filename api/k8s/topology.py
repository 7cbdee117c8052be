"""Kueue / KAI Topology objects -> `cluster.topology_levels`, `Node.topology`, `Job.topology`.

A Topology's `spec.levels[].nodeLabel` lists node labels from the widest level to the
narrowest. They become `cluster.topology_levels` under their label names (e.g.
`cloud.provider.com/topology-rack`), except `kubernetes.io/hostname`, which is the node
itself: the implicit level `"host"` (contract 5.5). Each node's `topology` maps a level to
the node's value of that label; a node without the label is a domain of its own at that
level (`<label>=<node name>`, reported), since nothing says it shares one.

One Topology is used: the only one given, else the one the ResourceFlavors reference
(`spec.topologyName`) when they all reference the same, else the first by name (the
others reported).

A pod asks for a level with Kueue's annotations `kueue.x-k8s.io/podset-required-topology`
/ `kueue.x-k8s.io/podset-preferred-topology`, or KAI's
`kai.scheduler/topology-required-placement` / `-preferred-placement`; the value is a node
label of the Topology (the hostname label means `"host"`). A gang of several pods gets
`Job.topology` from its first member; a single pod lies on one node whatever it asks.
"""

from __future__ import annotations

from collections.abc import Mapping

from api.importing import ImportIssue
from api.k8s.objects import K8sObjects, TopologySpec
from api.k8s.pods import PodInfo, PodProblem

HOSTNAME_LABEL = "kubernetes.io/hostname"
HOST_LEVEL = "host"
#: (annotation, JobTopology field), Kueue's first.
TOPOLOGY_ANNOTATIONS = (
    ("kueue.x-k8s.io/podset-required-topology", "required"),
    ("kueue.x-k8s.io/podset-preferred-topology", "preferred"),
    ("kai.scheduler/topology-required-placement", "required"),
    ("kai.scheduler/topology-preferred-placement", "preferred"),
)


def chosen_topology(objects: K8sObjects, issues: list[ImportIssue]) -> TopologySpec | None:
    """The Topology the import uses (module doc); the ones left out are reported."""
    if not objects.topologies:
        return None
    named = sorted(objects.topologies)
    referenced = {f.topology for f in objects.flavors.values() if f.topology in
                  objects.topologies}
    pick = next(iter(referenced)) if len(referenced) == 1 else named[0]
    for name in named:
        if name != pick:
            issues.append(ImportIssue(object=f"topology/{name}", skipped=True, message=(
                f"gpuplan plans with one topology; topology/{pick} is used")))
    return objects.topologies[pick]


def levels_of(topology: TopologySpec | None) -> list[str]:
    """`cluster.topology_levels`: the Topology's labels without the hostname one."""
    if topology is None:
        return []
    return [label for label in topology.levels if label != HOSTNAME_LABEL]


def node_topology(name: str, labels: Mapping[str, str], levels: list[str],
                  issues: list[ImportIssue]) -> dict[str, str]:
    """A node's domain at each level: its label value, else a domain of its own."""
    out: dict[str, str] = {}
    missing = []
    for level in levels:
        value = labels.get(level)
        if value:
            out[level] = value
        else:
            out[level] = f"{level}={name}"
            missing.append(level)
    if missing:
        issues.append(ImportIssue(object=f"node/{name}", skipped=False, message=(
            f"no label {', '.join(missing)} of the topology; a domain of its own there")))
    return out


def job_topology(pod: PodInfo, levels: list[str] | None) -> dict[str, str] | None:
    """`Job.topology` from the pod's annotations (None when it asks for none).

    `levels` is None when no Topology was given. Raises PodProblem when the pod names a
    level the Topology does not have (the import then keeps the pod without it).
    """
    out: dict[str, str] = {}
    for key, fld in TOPOLOGY_ANNOTATIONS:
        label = pod.annotations.get(key)
        if not label or fld in out:
            continue
        if label == HOSTNAME_LABEL:
            out[fld] = HOST_LEVEL
        elif levels is not None and label in levels:
            out[fld] = label
        else:
            known = "no Topology object was given" if levels is None else \
                "the Topology's levels: " + ", ".join([*levels, HOSTNAME_LABEL])
            raise PodProblem(f"annotation {key}={label!r} names no level ({known})")
    return out or None
