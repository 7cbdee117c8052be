"""A pod's priority class and elastic gang size range (contract 5.4 and 5.1).

**Priority** (`Job.priority`): the value of the Kueue WorkloadPriorityClass that the pod's
`kueue.x-k8s.io/priority-class` label names (Kueue queues and preempts by it rather than by
the pod's class); else the pod's `spec.priority` when set (the admission controller writes
the class's value there); else the value of the PriorityClass its `spec.priorityClassName`
names, or KAI-Scheduler's `priorityClassName` pod label; else the `globalDefault`
PriorityClass; else 0. A class the objects do not define is reported and counts as the
next rule. A gang's priority is its highest member's, unless its PodGroup (Volcano, KAI)
names a PriorityClass in `spec.priorityClassName`: the schedulers order and preempt the
group by that class, so its value is the gang's priority.

**Elastic gangs** (`Job.elastic`, whole GPUs only), from what users already write:

- `gpuplan.io/elastic-min` / `gpuplan.io/elastic-max`: the range of the job's GPU count
  (the job's own `gpus` must lie in it); `gpuplan.io/speedup`: JSON `{"<n>": speedup}`
  (contract 5.1);
- a PodGroup (Volcano `scheduling.volcano.sh`, the coscheduling plugin's
  `scheduling.x-k8s.io`, KAI's `scheduling.run.ai`) whose `spec.minMember` is below the
  number of pending pods of the gang: the gang may run with minMember .. all of its pods.

A gang's pods each ask for the same g GPUs; when g > 1 only sizes that are whole pods can
be bound, so the allowed sizes are the multiples of g in the range, with the given
speedups (or linear ones) on them. Gangs with members already running, or whose pods ask
for different counts, are not made elastic (reported).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from api.k8s import names
from api.k8s.objects import K8sObjects
from api.k8s.pods import PodInfo, PodProblem, group_of

#: KAI-Scheduler reads the priority class from this pod label too.
KAI_PRIORITY_LABEL = "priorityClassName"


#: Kueue's label naming a WorkloadPriorityClass.
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def pod_priority(pod: PodInfo, objects: K8sObjects) -> tuple[int | None, str | None]:
    """(the pod's priority or None for the default 0, a problem to report or None)."""
    workload_class = pod.labels.get(KUEUE_PRIORITY_LABEL)
    if workload_class:
        value = objects.workload_priority_classes.get(workload_class)
        if value is not None:
            return value, None
        if objects.workload_priority_classes:
            own, problem = _class_priority(pod, objects)
            return own, problem or (f"WorkloadPriorityClass {workload_class!r} was not "
                                    "given; the pod's own priority is used")
    return _class_priority(pod, objects)


def _class_priority(pod: PodInfo, objects: K8sObjects) -> tuple[int | None, str | None]:
    """The pod's priority from `spec.priority` or its PriorityClass (module doc)."""
    if pod.priority is not None:
        return pod.priority, None
    name = pod.priority_class or pod.labels.get(KAI_PRIORITY_LABEL)
    if name:
        value = objects.priority_classes.get(name)
        if value is not None:
            return value, None
        if objects.priority_classes:
            return objects.default_priority, (f"PriorityClass {name!r} was not given; the "
                                              "default priority is used")
    return objects.default_priority, None


def group_priority(pods: Sequence[PodInfo], objects: K8sObjects
                   ) -> tuple[int | None, str | None]:
    """(the priority of the class a gang's PodGroup names, or None when it names none or
    an unknown one; a problem to report or None)."""
    group = group_of(pods[0])
    if group is None:
        return None, None
    name = objects.group_priority_classes.get((pods[0].namespace, group[1]))
    if name is None:
        return None, None
    value = objects.priority_classes.get(name)
    if value is None and objects.priority_classes:
        return None, (f"PriorityClass {name!r} of PodGroup {pods[0].namespace}/{group[1]} "
                      "was not given; its pods' priorities are used")
    return value, None


def _count(pod: PodInfo, key: str) -> int | None:
    raw = pod.annotations.get(key)
    if raw is None:
        return None
    if not raw.strip().isdigit() or int(raw) < 1:
        raise PodProblem(f"annotation {key}={raw!r} must be a GPU count >= 1")
    return int(raw)


def _speedup(pod: PodInfo) -> dict[str, float]:
    raw = pod.annotations.get(names.ANN_SPEEDUP)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise PodProblem(f"annotation {names.ANN_SPEEDUP} is not JSON: {e}") from e
    if not isinstance(data, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            and v > 0 for v in data.values()):
        raise PodProblem(f"annotation {names.ANN_SPEEDUP} must be a JSON object "
                         '{"<n>": <speedup > 0>}')
    return {str(k): float(v) for k, v in data.items()}


def _on_pods(lo: int, hi: int, per_pod: int, speedup: dict[str, float]) -> dict[str, Any]:
    """Elastic sizes in [lo, hi] that are whole pods of `per_pod` GPUs."""
    if per_pod == 1:
        return {"min_gpus": lo, "max_gpus": hi, "speedup": speedup}
    sizes = [n for n in range(lo, hi + 1) if n % per_pod == 0]
    if not sizes:
        raise PodProblem(f"no size in {lo}..{hi} is a whole number of {per_pod}-GPU pods")
    curve = {str(n): speedup.get(str(n), float(n)) for n in sizes
             if not speedup or str(n) in speedup}
    if not curve:
        raise PodProblem(f"no speedup key is a whole number of {per_pod}-GPU pods")
    return {"min_gpus": lo, "max_gpus": hi, "speedup": curve}


def elastic_of(pods: Sequence[PodInfo], objects: K8sObjects, running: int
               ) -> dict[str, Any] | None:
    """`Job.elastic` of a job made of `pods` (None: not elastic).

    `running` counts members of the pods' group already running. Raises PodProblem when
    the annotations are malformed or the gang cannot be elastic (module doc).
    """
    first = pods[0]
    lo, hi = _count(first, names.ANN_ELASTIC_MIN), _count(first, names.ANN_ELASTIC_MAX)
    speedup = _speedup(first)
    per_pod = {p.whole_gpus for p in pods}
    total = sum(p.whole_gpus for p in pods)
    if lo is None and hi is None:
        if speedup:
            raise PodProblem(f"{names.ANN_SPEEDUP} needs {names.ANN_ELASTIC_MIN} / "
                             f"{names.ANN_ELASTIC_MAX}")
        group = group_of(first)
        min_member = objects.pod_groups.get((first.namespace, group[1])) if group else None
        if min_member is None or len(pods) < 2 or min_member >= len(pods) or min_member < 1:
            return None
        lo, hi = min_member * max(per_pod), total
    if running:
        raise PodProblem(f"{running} member(s) already run; the pending ones form a fixed "
                         "gang")
    if len(per_pod) != 1:
        raise PodProblem("members ask for different GPU counts; not elastic")
    lo = lo if lo is not None else 1
    hi = hi if hi is not None else total
    return _on_pods(lo, hi, per_pod.pop() if len(pods) > 1 else 1, speedup)
