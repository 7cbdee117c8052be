"""The 10-pod scenario of the live kube-scheduler run, as Kubernetes objects.

Four GPU nodes with GPU Feature Discovery labels (2 x 8 A100-SXM4-80GB, 2 x 8
H100-80GB-HBM3) and ten pods asking for 1-8 `nvidia.com/gpu`, 32 GPUs in all, in the order
the scheduler takes them. Jobs marked `h100` carry a throughput annotation that makes them
2.5x faster on the H100 (the others use the catalog's relative speeds, which favour the
H100 too). The last pod needs a whole empty node: it fits only if the first nine pack.
"""

from __future__ import annotations

import copy
import json
from typing import Any

NAMESPACE = "ml"
#: (node name, GFD product, GFD memory MiB, GPU family)
NODES = (
    ("a100-1", "NVIDIA-A100-SXM4-80GB", 81920, "ampere"),
    ("a100-2", "NVIDIA-A100-SXM4-80GB", 81920, "ampere"),
    ("h100-1", "NVIDIA-H100-80GB-HBM3", 81559, "hopper"),
    ("h100-2", "NVIDIA-H100-80GB-HBM3", 81559, "hopper"),
)
GPUS_PER_NODE = 8
#: (pod name, nvidia.com/gpu, has an H100 throughput annotation), in scheduling order
PODS = (
    ("train-a", 4, True),
    ("train-b", 4, True),
    ("tune-c", 2, False),
    ("tune-d", 2, True),
    ("infer-e", 1, False),
    ("infer-f", 1, False),
    ("tune-g", 2, False),
    ("train-h", 4, False),
    ("train-i", 4, True),
    ("train-j", 8, False),
)
H100_THROUGHPUT = {"H100-SXM5-80GB": 2.5, "A100-SXM4-80GB": 1.0}


def gpu_node(name: str, product: str, memory_mib: int, family: str) -> dict[str, Any]:
    """A Ready GPU node as `kubectl get node -o json` shows it with the GPU Operator."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(GPUS_PER_NODE),
            "nvidia.com/gpu.memory": str(memory_mib), "nvidia.com/gpu.family": family,
            "nvidia.com/gpu.replicas": "1", "nvidia.com/mig.strategy": "none",
            "nvidia.com/mig.capable": "true"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "128", "memory": "1Ti", "pods": "110",
                         "nvidia.com/gpu": str(GPUS_PER_NODE)},
            "allocatable": {"cpu": "127", "memory": "1000Gi", "pods": "110",
                            "nvidia.com/gpu": str(GPUS_PER_NODE)},
            "conditions": [{"type": "Ready", "status": "True"}]},
    }


def gpu_pod(name: str, gpus: int, h100: bool, minute: int) -> dict[str, Any]:
    """A pending pod asking for `gpus` whole GPUs (and some CPU and memory)."""
    annotations = {"gpuplan.io/throughput": json.dumps(H100_THROUGHPUT)} if h100 else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}",
                     "creationTimestamp": f"2026-01-01T00:{minute:02d}:00Z",
                     "annotations": annotations},
        "spec": {"schedulerName": "default-scheduler", "containers": [{
            "name": "main", "image": "registry.example/train:1",
            "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                          "limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Pending"},
    }


def nodes() -> list[dict[str, Any]]:
    """The four node objects."""
    return [gpu_node(*n) for n in NODES]


def pods() -> list[dict[str, Any]]:
    """The ten pending pods, in scheduling order."""
    return [gpu_pod(name, gpus, h100, i) for i, (name, gpus, h100) in enumerate(PODS)]


def bound(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """The pod after its Binding to `node` (what the watch shows next)."""
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["status"] = {"phase": "Running"}
    return out


def node_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A v1 NodeList."""
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items}


def pod_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A v1 PodList."""
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
