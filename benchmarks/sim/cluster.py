"""Cluster spec files for the simulator: the contract's `Cluster` JSON (`{"nodes": [...]}`).

`benchmarks/clusters/*.json` holds the specs; `hetero_cluster(...)` writes new ones
(nodes of 8 GPUs named `<model>-<i>`, a fraction of MIG-capable nodes in MIG mode with an
empty layout; the simulator creates instances as jobs need them).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pydantic import ValidationError

from models import Cluster, Gpu, Node

CLUSTERS_DIR = Path(__file__).resolve().parent.parent / "clusters"

_SHORT = {"V100-32GB": "v100", "A100-SXM4-80GB": "a100", "A100-SXM4-40GB": "a100-40",
          "H100-SXM5-80GB": "h100", "T4-16GB": "t4", "L40S-48GB": "l40s",
          "A30-24GB": "a30", "H200-141GB": "h200", "H100-NVL-94GB": "h100nvl"}


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be read or is not a valid Cluster."""


def load_cluster(path: Path | str) -> Cluster:
    """Read a cluster spec file (a name without '/' is looked up in benchmarks/clusters)."""
    p = Path(path)
    if not p.exists() and "/" not in str(path):
        p = CLUSTERS_DIR / (p.name if p.suffix else f"{p.name}.json")
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise ClusterSpecError(f"cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise ClusterSpecError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}") from e
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ClusterSpecError(f"{path}: {loc}: {first['msg']}") from e
    if not any(n.gpus for n in cluster.nodes):
        raise ClusterSpecError(f"{path}: the cluster has no GPU")
    return cluster


def hetero_cluster(counts: dict[str, int], mig_fraction: dict[str, float] | None = None,
                   gpus_per_node: int = 8) -> Cluster:
    """Nodes of `gpus_per_node` GPUs per model; `mig_fraction[model]` of a model's nodes
    (rounded) are in MIG mode. Nodes are listed by name (no heterogeneity-aware order)."""
    nodes: list[Node] = []
    for model, n in counts.items():
        n_nodes = n // gpus_per_node
        n_mig = round(n_nodes * (mig_fraction or {}).get(model, 0.0))
        for i in range(n_nodes):
            mig = i >= n_nodes - n_mig
            nodes.append(Node(
                name=f"{_SHORT.get(model, model.lower())}-{i:02d}",
                labels={"nvidia.com/gpu.product": model},
                gpus=[Gpu(index=k, model=model, mig_enabled=mig)
                      for k in range(gpus_per_node)]))
    nodes.sort(key=lambda nd: nd.name)
    return Cluster(nodes=nodes)


def largest_pool(cluster: Cluster) -> int:
    """GPUs of the largest non-MIG pool of one model (the largest gang that can run)."""
    c = Counter(g.model for n in cluster.nodes for g in n.gpus if not g.mig_enabled)
    return max(c.values(), default=0)


def describe(cluster: Cluster) -> str:
    """A one-line summary, e.g. '64 V100-32GB + 64 A100-SXM4-80GB (16 MIG)'."""
    total = Counter(g.model for n in cluster.nodes for g in n.gpus)
    mig = Counter(g.model for n in cluster.nodes for g in n.gpus if g.mig_enabled)
    return " + ".join(f"{c} {m}" + (f" ({mig[m]} MIG)" if mig[m] else "")
                      for m, c in total.items())
