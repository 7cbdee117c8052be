"""Nodes and pods that use the v1.1 objects of fixtures/v11 (queues, priorities, topology,
pod groups), as `kubectl get -o json` shows them.

The four nodes of `scenario` (2 x 8 A100-SXM4-80GB, 2 x 8 H100-80GB-HBM3) with the
topology labels of Kueue's documentation (https://kueue.sigs.k8s.io/docs/concepts/topology:
`topology.kubernetes.io/zone`, `cloud.provider.com/topology-block`,
`cloud.provider.com/topology-rack`); `h100-2` lacks its rack label. Pods carry the labels
and annotations the schedulers document: Kueue's `kueue.x-k8s.io/queue-name` and
`kueue.x-k8s.io/podset-required-topology` / `-preferred-topology`
(https://kueue.sigs.k8s.io/docs/tasks/run/topology_aware_scheduling/), KAI-Scheduler's
`kai.scheduler/queue` and `priorityClassName` labels (NVIDIA/KAI-Scheduler
docs/priority/example/train-priority-pod.yaml), Volcano's `scheduling.k8s.io/group-name`
annotation and the coscheduling plugin's `scheduling.x-k8s.io/pod-group` label.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from tests.k8s import scenario

FIXTURES = Path(__file__).parent / "fixtures" / "v11"
NS = "ml"
#: node -> (zone, block, rack or None)
PLACES = {"a100-1": ("z1", "b1", "r1"), "a100-2": ("z1", "b1", "r2"),
          "h100-1": ("z1", "b2", "r3"), "h100-2": ("z1", "b2", None)}
SPEEDUP = {"2": 1.9, "4": 3.5, "8": 6.0}


def objects() -> list[Any]:
    """Every object of fixtures/v11 (the YAML documents of its files)."""
    out: list[Any] = []
    for name in ("kueue.yaml", "kai.yaml", "priorityclasses.yaml", "podgroups.yaml"):
        out.extend(d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d)
    return out


def nodes() -> dict[str, Any]:
    """The NodeList."""
    items = scenario.nodes()
    for node in items:
        zone, block, rack = PLACES[node["metadata"]["name"]]
        labels = node["metadata"]["labels"]
        labels["topology.kubernetes.io/zone"] = zone
        labels["cloud.provider.com/topology-block"] = block
        if rack is not None:
            labels["cloud.provider.com/topology-rack"] = rack
    return scenario.node_list(items)


def pod(name: str, gpus: int, minute: int, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A pending pod of namespace `ml` asking for `gpus` GPUs, with extra metadata/spec."""
    out = copy.deepcopy(scenario.gpu_pod(name, gpus, False, minute))
    out["metadata"]["namespace"] = NS
    out["metadata"]["labels"] = labels or {}
    out["metadata"]["annotations"] = annotations or {}
    out["spec"].update(spec)
    return out


def pods() -> dict[str, Any]:
    """The PodList (see the module docstring and the tests for what each pod shows)."""
    block, rack = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
    items = [
        *(pod(f"llm-{i}", 2, 0, {"kueue.x-k8s.io/queue-name": "lq-a",
                                 "kueue.x-k8s.io/pod-group-name": "llm"},
              {"kueue.x-k8s.io/pod-group-total-count": "4",
               "kueue.x-k8s.io/podset-required-topology": block,
               "kueue.x-k8s.io/podset-preferred-topology": rack},
              priorityClassName="high-priority") for i in range(4)),
        pod("kai-train", 1, 1, {"kai.scheduler/queue": "nlp", "priorityClassName": "train"}),
        pod("kai-build", 2, 2, {"kai.scheduler/queue": "vision"}, priorityClassName="build"),
        pod("elastic-one", 8, 3, annotations={"gpuplan.io/elastic-min": "2",
                                              "gpuplan.io/elastic-max": "8",
                                              "gpuplan.io/speedup": json.dumps(SPEEDUP)}),
        pod("elastic-bad", 2, 4, annotations={"gpuplan.io/elastic-min": "4",
                                              "gpuplan.io/elastic-max": "8"}),
        *(pod(f"vc-worker-{i}", 2, 5, annotations={"scheduling.k8s.io/group-name": "vc-job"})
          for i in range(4)),
        *(pod(f"co-{i}", 1, 6, {"scheduling.x-k8s.io/pod-group": "co-job",
                                "kueue.x-k8s.io/queue-name": "lq-b"}) for i in range(4)),
        pod("lost-queue", 1, 7, {"kueue.x-k8s.io/queue-name": "lq-missing"}),
        *(pod(f"odd-topo-{i}", 1, 8, {"kueue.x-k8s.io/queue-name": "lq-c"},
              {"gpuplan.io/gang": "odd",
               "kueue.x-k8s.io/podset-required-topology": "example.com/no-such-label"})
          for i in range(2)),
    ]
    serve = scenario.bound(pod("serve-0", 1, 9, {"kai.scheduler/queue": "vision"},
                               priorityClassName="inference", priority=125), "h100-1")
    items.append(serve)
    return scenario.pod_list(items)
