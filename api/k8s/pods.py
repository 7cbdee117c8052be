"""Pods as gpuplan sees them: GPU demand, host requests, gpuplan annotations, pod groups.

A pod's effective request of a resource is what the scheduler uses: the sum over its
containers (and restartable "sidecar" init containers), or the largest plain init
container if that is larger. Extended resources (`nvidia.com/*`) are taken from `limits`
(Kubernetes requires requests == limits for them), falling back to `requests`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from api.k8s import names
from api.k8s.quantity import QuantityError, count, cpu_millicores, memory_gib

#: Phases whose pods hold no resources.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class PodProblem(ValueError):
    """A pod that cannot be mapped; the message says why."""


@dataclass
class PodInfo:
    """The parts of a v1 Pod that planning needs."""

    namespace: str
    name: str
    phase: str
    node_name: str | None
    created: float | None
    labels: dict[str, str]
    annotations: dict[str, str]
    whole_gpus: int = 0
    mig: dict[str, int] = field(default_factory=dict)
    cpu_millicores: float | None = None
    host_memory_gib: float | None = None
    #: `spec.priority` (written from the PriorityClass at admission) and the class's name
    priority: int | None = None
    priority_class: str | None = None

    @property
    def ref(self) -> str:
        """`ns/name`, also the job name of a pod that is not part of a gang."""
        return f"{self.namespace}/{self.name}"

    @property
    def wants_gpu(self) -> bool:
        """True when the pod asks for a whole GPU or any MIG device."""
        return self.whole_gpus > 0 or bool(self.mig)

    @property
    def running(self) -> bool:
        """Bound to a node and not finished: it holds its devices."""
        return self.node_name is not None and self.phase not in FINISHED_PHASES


def _str_map(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise PodProblem(f"metadata.{what} is not a map of strings")
    return dict(value)


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _resources(container: object, where: str) -> dict[str, object]:
    """Per resource of one container: the limit (else request) of extended resources, the
    request (else limit) of cpu and memory; unparsed."""
    if not isinstance(container, dict):
        raise PodProblem(f"{where} is not an object")
    res = container.get("resources") or {}
    if not isinstance(res, dict):
        raise PodProblem(f"{where}.resources is not an object")
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        raise PodProblem(f"{where}.resources requests/limits are not objects")
    out: dict[str, object] = {}
    for k in sorted({*requests, *limits}):
        if k.startswith("nvidia.com/"):
            if k in requests and k in limits and str(requests[k]) != str(limits[k]):
                raise PodProblem(f"{where}: {k} request {requests[k]!r} differs from "
                                 f"limit {limits[k]!r}")
            out[k] = limits.get(k, requests.get(k))
        else:
            out[k] = requests.get(k, limits.get(k))
    return out


def _parse_value(key: str, raw: object, where: str) -> float:
    try:
        if key == "cpu":
            return cpu_millicores(raw)
        if key == "memory":
            return memory_gib(raw)
        return float(count(raw))
    except QuantityError as e:
        raise PodProblem(f"{where}: {key}: {e}") from e


def _effective(spec: Mapping[str, Any]) -> dict[str, float]:
    """Effective requests of cpu, memory and nvidia.com/* resources of a pod spec."""
    wanted = ("cpu", "memory")
    total: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for part in ("containers", "initContainers"):
        items = spec.get(part) or []
        if not isinstance(items, list):
            raise PodProblem(f"spec.{part} is not a list")
        for i, c in enumerate(items):
            where = f"spec.{part}[{i}]"
            res = _resources(c, where)
            sidecar = part == "initContainers" and c.get("restartPolicy") == "Always"
            for k, raw in res.items():
                if k not in wanted and not k.startswith("nvidia.com/"):
                    continue
                v = _parse_value(k, raw, where)
                if part == "containers" or sidecar:
                    total[k] = total.get(k, 0.0) + v
                else:
                    init_peak[k] = max(init_peak.get(k, 0.0), v)
    return {k: max(total.get(k, 0.0), init_peak.get(k, 0.0)) for k in {*total, *init_peak}}


def _priority(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise PodProblem(f"spec.priority {value!r} is not a 32-bit integer")
    return value


def parse_pod(obj: object) -> PodInfo:
    """The planning view of one v1 Pod; raises PodProblem for malformed objects."""
    if not isinstance(obj, dict):
        raise PodProblem("not an object")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise PodProblem("metadata.name is missing")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise PodProblem("spec is missing")
    status = obj.get("status") or {}
    node_name = spec.get("nodeName")
    info = PodInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=meta["name"],
        phase=str(status.get("phase") or "Pending") if isinstance(status, dict) else "Pending",
        node_name=node_name if isinstance(node_name, str) and node_name else None,
        created=_timestamp(meta.get("creationTimestamp")),
        labels=_str_map(meta.get("labels"), "labels"),
        annotations=_str_map(meta.get("annotations"), "annotations"),
        priority=_priority(spec.get("priority")),
        priority_class=spec.get("priorityClassName") or None
        if isinstance(spec.get("priorityClassName"), str) else None,
    )
    eff = _effective(spec)
    info.whole_gpus = int(eff.get(names.GPU_RESOURCE, 0))
    info.mig = {k[len(names.MIG_RESOURCE_PREFIX):]: int(v) for k, v in eff.items()
                if k.startswith(names.MIG_RESOURCE_PREFIX) and v > 0}
    info.cpu_millicores = eff.get("cpu")
    info.host_memory_gib = eff.get("memory")
    return info


def check_demand(pod: PodInfo) -> None:
    """Raise PodProblem when the GPU request has no gpuplan shape."""
    if pod.whole_gpus and pod.mig:
        raise PodProblem("asks for both nvidia.com/gpu and MIG devices")
    if len(pod.mig) > 1:
        raise PodProblem("asks for MIG devices of several profiles: "
                         + ", ".join(sorted(pod.mig)))
    if any(n > 1 for n in pod.mig.values()):
        raise PodProblem("asks for more than one MIG device (a gpuplan MIG job is one "
                         "instance)")


# --- gpuplan annotations -> Job fields -------------------------------------------------

def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError("not finite")
    return v


def _positive(text: str) -> float:
    v = _float(text)
    if v <= 0:
        raise ValueError("must be > 0")
    return v


def _non_negative(text: str) -> float:
    v = _float(text)
    if v < 0:
        raise ValueError("must be >= 0")
    return v


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def _kind(text: str) -> str:
    if text not in ("training", "inference"):
        raise ValueError("must be training or inference")
    return text


def _share(text: str) -> float:
    v = _float(text)
    if not 0 < v < 1:
        raise ValueError("must be in (0, 1)")
    return v


def _throughput(text: str) -> dict[str, float]:
    data = json.loads(text)
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        and math.isfinite(v) and v >= 0 for k, v in data.items()
    ):
        raise ValueError('must be a JSON object {"<model>": <speed >= 0>}')
    return {k: float(v) for k, v in data.items()}


def _models(text: str) -> list[str]:
    out = [m.strip() for m in text.split(",") if m.strip()]
    if not out:
        raise ValueError("must list at least one model")
    return out


#: Annotation -> (Job field, parser). One registry; docs/kubernetes.md lists them.
JOB_ANNOTATIONS: Mapping[str, tuple[str, Callable[[str], object]]] = {
    names.ANN_WEIGHT: ("weight", _positive),
    names.ANN_THROUGHPUT: ("throughput", _throughput),
    names.ANN_KIND: ("kind", _kind),
    names.ANN_TENANT: ("tenant", str),
    names.ANN_GPU_MEMORY: ("gpu_memory_gib", _non_negative),
    names.ANN_ALLOWED_MODELS: ("allowed_models", _models),
    names.ANN_PREEMPTIBLE: ("preemptible", _bool),
    names.ANN_REMAINING_WORK: ("remaining_work", _non_negative),
    names.ANN_SINGLE_NODE: ("single_node", _bool),
    names.ANN_SAME_DOMAIN: ("same_domain", _bool),
    names.ANN_GPU_SHARE: ("gpu_share", _share),
    names.ANN_MIG_PROFILE: ("mig_profile", str),
}


def job_options(pod: PodInfo) -> dict[str, Any]:
    """Job fields given by the pod's gpuplan annotations; PodProblem if one is malformed."""
    out: dict[str, Any] = {}
    for key, (fld, parse) in JOB_ANNOTATIONS.items():
        raw = pod.annotations.get(key)
        if raw is None:
            continue
        try:
            out[fld] = parse(raw)
        except (ValueError, json.JSONDecodeError) as e:
            raise PodProblem(f"annotation {key}={raw!r}: {e}") from e
    return out


def group_of(pod: PodInfo) -> tuple[str, str] | None:
    """(scheduler, group name) of the pod's pod group, if any (first key that matches)."""
    for source, key, scheduler in names.GROUP_KEYS:
        values = pod.labels if source == "label" else pod.annotations
        value = values.get(key)
        if value:
            return scheduler, value
    return None


def gang_job_name(namespace: str, group: str) -> str:
    """Job name of a multi-pod gang: `ns/group:<name>` (':' never occurs in pod names)."""
    return f"{namespace}/group:{group}"


def group_total(pods: list[PodInfo]) -> int | None:
    """The expected member count a scheduler annotated on the group, if any."""
    for pod in pods:
        for key in names.GROUP_TOTAL_KEYS:
            raw = pod.annotations.get(key)
            if raw is not None and raw.isdigit():
                return int(raw)
    return None
