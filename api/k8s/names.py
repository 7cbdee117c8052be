"""Every Kubernetes name gpuplan reads or writes: labels, annotations, resources, aliases.

GPU Feature Discovery (GFD, part of the NVIDIA GPU Operator) labels each GPU node with
`nvidia.com/gpu.product` (the NVML device name with spaces replaced by `-`),
`nvidia.com/gpu.count`, `nvidia.com/gpu.memory` (MiB) and `nvidia.com/mig.strategy`; under
the `single` MIG strategy it appends `-MIG-<profile>` to the product and counts MIG devices
instead of GPUs. `PRODUCT_ALIASES` maps product strings to catalog model names; see
docs/kubernetes.md for the table and how to extend it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# Resources advertised by the NVIDIA device plugin.
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# GPU Feature Discovery / GPU Operator node labels.
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MEMORY_MIB = "nvidia.com/gpu.memory"
LABEL_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
LABEL_CLIQUE = "nvidia.com/gpu.clique"

# gpuplan's own labels (nodes) and annotations (pods).
PREFIX = "gpuplan.io/"
LABEL_TOPOLOGY = PREFIX + "topology-domain"
ANN_WEIGHT = PREFIX + "weight"
ANN_THROUGHPUT = PREFIX + "throughput"
ANN_KIND = PREFIX + "kind"
ANN_TENANT = PREFIX + "tenant"
ANN_GPU_SHARE = PREFIX + "gpu-share"
ANN_GPU_MEMORY = PREFIX + "gpu-memory-gib"
ANN_ALLOWED_MODELS = PREFIX + "allowed-models"
ANN_PREEMPTIBLE = PREFIX + "preemptible"
ANN_REMAINING_WORK = PREFIX + "remaining-work"
ANN_SINGLE_NODE = PREFIX + "single-node"
ANN_SAME_DOMAIN = PREFIX + "same-domain"
ANN_MIG_PROFILE = PREFIX + "mig-profile"
ANN_GPU_INDICES = PREFIX + "gpu-indices"
ANN_MIG_START = PREFIX + "mig-start"
ANN_GANG = PREFIX + "gang"
ANN_ELASTIC_MIN = PREFIX + "elastic-min"
ANN_ELASTIC_MAX = PREFIX + "elastic-max"
ANN_SPEEDUP = PREFIX + "speedup"

#: Strings that GFD appends to the product; everything from them on is dropped.
MIG_PRODUCT_MARKER = "-MIG-"
SHARED_PRODUCT_SUFFIX = "-SHARED"

#: GFD product string -> catalog model. Products whose name already is a catalog key after
#: dropping a leading `NVIDIA-` or `Tesla-` need no entry. PCIe variants share the MIG
#: geometry and memory of the SXM part they map to (their speed prior is the SXM one; send
#: a throughput map when that matters).
PRODUCT_ALIASES: Mapping[str, str] = {
    "NVIDIA-A100-SXM4-40GB": "A100-SXM4-40GB",
    "NVIDIA-A100-PCIE-40GB": "A100-SXM4-40GB",
    "NVIDIA-A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA-A100-80GB-PCIe": "A100-SXM4-80GB",
    "NVIDIA-A30": "A30-24GB",
    "NVIDIA-H100-80GB-HBM3": "H100-SXM5-80GB",
    "NVIDIA-H100-PCIe": "H100-SXM5-80GB",
    "NVIDIA-H100-NVL": "H100-NVL-94GB",
    "NVIDIA-H200": "H200-141GB",
    "NVIDIA-H200-NVL": "H200-141GB",
    "NVIDIA-L40S": "L40S-48GB",
    "Tesla-V100-SXM2-32GB": "V100-32GB",
    "Tesla-V100-SXM3-32GB": "V100-32GB",
    "Tesla-V100-PCIE-32GB": "V100-32GB",
    "Tesla-V100S-PCIE-32GB": "V100-32GB",
    "Tesla-T4": "T4-16GB",
}

_VENDOR_PREFIXES = ("NVIDIA-", "Tesla-")

#: How far GFD's `nvidia.com/gpu.memory` may be from the catalog memory before a warning
#: (drivers report a little less than the marketing figure: 81559 MiB on an "80GB" H100).
MEMORY_TOLERANCE = 0.12


@dataclass(frozen=True, slots=True)
class Product:
    """A parsed `nvidia.com/gpu.product` label."""

    base: str
    mig_profile: str | None
    shared: bool


def parse_product(label: str) -> Product:
    """Split GFD's product label into the device name, a single-strategy MIG profile and
    the time-slicing `-SHARED` marker."""
    base = label
    shared = base.endswith(SHARED_PRODUCT_SUFFIX)
    if shared:
        base = base[: -len(SHARED_PRODUCT_SUFFIX)]
    profile = None
    if MIG_PRODUCT_MARKER in base:
        base, profile = base.split(MIG_PRODUCT_MARKER, 1)
    return Product(base=base, mig_profile=profile or None, shared=shared)


def resolve_model(
    product: str, catalog: Mapping[str, object], extra: Mapping[str, str] | None = None
) -> str | None:
    """The catalog model of a GFD device name, or None when the alias table has no entry.

    Looked up in order: `extra` (caller's aliases), `PRODUCT_ALIASES`, the name itself, the
    name without a leading `NVIDIA-` / `Tesla-`. Nothing is matched fuzzily.
    """
    for table in (extra or {}, PRODUCT_ALIASES):
        if product in table:
            return table[product]
    if product in catalog:
        return product
    for prefix in _VENDOR_PREFIXES:
        if product.startswith(prefix) and product[len(prefix):] in catalog:
            return product[len(prefix):]
    return None


GroupSource = Literal["label", "annotation"]

#: Pod-group keys of the batch schedulers, most specific first: pods sharing a value (in
#: one namespace) form one all-or-nothing gang job.
GROUP_KEYS: tuple[tuple[GroupSource, str, str], ...] = (
    ("annotation", ANN_GANG, "gpuplan"),
    ("label", "kueue.x-k8s.io/pod-group-name", "kueue"),
    ("annotation", "scheduling.k8s.io/group-name", "volcano"),
    ("annotation", "pod-group-name", "kai"),
    ("label", "scheduling.x-k8s.io/pod-group", "coscheduling"),
    ("label", "pod-group.scheduling.sigs.k8s.io", "coscheduling"),
)

#: Annotations giving the expected member count of a group (a warning when fewer exist).
GROUP_TOTAL_KEYS: tuple[str, ...] = ("kueue.x-k8s.io/pod-group-total-count",)


def mig_resource(profile: str) -> str:
    """The mixed-strategy resource name of a MIG profile (`nvidia.com/mig-1g.10gb`)."""
    return MIG_RESOURCE_PREFIX + profile
