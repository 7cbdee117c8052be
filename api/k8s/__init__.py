"""Kubernetes integration: snapshot import, a kube-scheduler extender and plan export.

- `build_snapshot(nodes, pods, objects=read_objects(...))`: `kubectl get nodes/pods -o
  json` (and the Kueue / KAI queue, PriorityClass, Topology and PodGroup objects:
  quotas, tenants, priorities, topology levels, elastic gangs) -> PlanRequest + issues;
- `extender_filter` / `extender_prioritize` / `extender_bind`: the
  k8s.io/kube-scheduler/extender/v1 verbs,
  judged against `K8sState` (a posted snapshot, or the live view `ClusterCache` + `Watcher`
  keep with list and watch, plus the pods the extender assumed placed);
- `export_plan(plan, request, job_pods)`: mig-parted configs, drains, Bindings, patches.

docs/kubernetes.md documents the labels, annotations and alias table.
"""

from api.importing import ImportIssue, SnapshotError
from api.k8s.export import K8sExport, apply_script, bindings_yaml, export_plan, mig_parted_yaml
from api.k8s.extender import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
    extender_bind,
    extender_filter,
    extender_prioritize,
)
from api.k8s.names import PRODUCT_ALIASES
from api.k8s.objects import K8sObjects, read_objects
from api.k8s.snapshot import Snapshot, build_snapshot
from api.k8s.state import K8sSettings, K8sState
from api.k8s.watch import ClusterCache, Watcher, make_api

__all__ = [
    "PRODUCT_ALIASES",
    "ClusterCache",
    "ExtenderArgs",
    "ExtenderBindingArgs",
    "ExtenderBindingResult",
    "ExtenderFilterResult",
    "HostPriority",
    "ImportIssue",
    "K8sExport",
    "K8sObjects",
    "K8sSettings",
    "K8sState",
    "Snapshot",
    "SnapshotError",
    "Watcher",
    "apply_script",
    "bindings_yaml",
    "build_snapshot",
    "export_plan",
    "extender_bind",
    "extender_filter",
    "extender_prioritize",
    "make_api",
    "mig_parted_yaml",
    "read_objects",
]
