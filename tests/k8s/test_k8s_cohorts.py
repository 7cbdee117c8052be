"""Kubernetes import of Kueue Cohort objects (hierarchical cohorts -> parent quotas),
Kueue WorkloadPriorityClasses and a PodGroup's `spec.priorityClassName`, from the objects
as users write them (fixtures/v11/cohorts.yaml, workloadpriorityclasses.yaml,
podgroups.yaml)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from api.k8s import build_snapshot
from api.k8s.objects import read_objects
from api.k8s.snapshot import Snapshot
from solver.validate import validate_plan
from tests.k8s import v11

H100, A100 = "H100-SXM5-80GB", "A100-SXM4-80GB"


def _load(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((v11.FIXTURES / name).read_text()) if d]


def _snap(objects: list[Any], pods: dict[str, Any] | None = None) -> Snapshot:
    return build_snapshot(v11.nodes(), pods or v11.pods(), objects=read_objects(objects))


def _quota(snap: Snapshot, tenant: str) -> dict[str, Any]:
    return snap.request.cluster.quotas[tenant].model_dump()


def _job(snap: Snapshot, name: str) -> Any:
    return next(j for j in snap.request.jobs if j.name == name)


def _issues(snap: Snapshot, obj: str) -> list[str]:
    return [i.message for i in snap.issues if i.object == obj]


def test_cohort_objects_are_read() -> None:
    objs = read_objects(_load("cohorts.yaml"))
    assert objs.cohorts["org"].parent is None and not objs.cohorts["org"].flavors
    assert objs.cohorts["research"].parent == "org"
    assert objs.cohorts["platform"].parent == "org"  # v1beta2 spec.parentName
    (fq,) = objs.cohorts["research"].flavors  # the cpu quota is not a GPU quota
    assert (fq.flavor, fq.nominal, fq.borrowing_limit) == ("h100", 4, 2)
    assert objs.kueue  # Cohort objects alone make the pods' Kueue labels count


def test_hierarchical_cohorts_become_parent_quotas() -> None:
    snap = _snap([*v11.objects(), *_load("cohorts.yaml")])
    quotas = snap.request.cluster.quotas
    # The ClusterQueues are as without Cohort objects.
    assert _quota(snap, "team-a-cq") == {"guaranteed": {H100: 8, A100: 4},
                                         "limit": {H100: 12}, "parent": "research"}
    assert _quota(snap, "team-b-cq")["parent"] == "research"
    # research: its own 4 H100 on top of its members' 16; borrows at most 2 from org.
    assert _quota(snap, "research") == {"guaranteed": {H100: 20, A100: 4},
                                        "limit": {H100: 22}, "parent": "org"}
    # platform: a flavor without nodeLabels is every model; no borrowingLimit: no limit.
    assert _quota(snap, "platform") == {"guaranteed": {"*": 2}, "limit": {},
                                        "parent": "org"}
    # The root: the whole tree's guarantees, limited to what the tree could use.
    assert _quota(snap, "org") == {"guaranteed": {H100: 20, A100: 4, "*": 2},
                                   "limit": {H100: 22, A100: 6, "*": 26}, "parent": None}
    # Nothing was dropped to make the request valid (the request validated the tree).
    assert {"team-a-cq", "team-b-cq", "team-c-cq", "research", "platform", "org"} <= \
        set(quotas)
    assert not [i for i in snap.issues if i.object.startswith(("cohort/", "tenant/"))]


def test_cohort_cycles_and_clashes_are_reported_never_raised() -> None:
    cohorts = _load("cohorts.yaml")
    org = next(o for o in cohorts if o["metadata"]["name"] == "org")
    org["spec"] = {"parent": "research"}  # org -> research -> org
    clash = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Cohort",
             "metadata": {"name": "team-c-cq"}, "spec": {"parent": "org"}}
    snap = _snap([*v11.objects(), *cohorts, clash])
    cut = [m for i in snap.issues if i.object.startswith("cohort/") for m in [i.message]
           if "cycle" in m]
    assert len(cut) == 1
    parents = {t: q.parent for t, q in snap.request.cluster.quotas.items()}
    assert (parents["org"], parents["research"]) in ((None, "org"), ("research", None))
    assert "same name" in _issues(snap, "cohort/team-c-cq")[0]
    assert _quota(snap, "team-c-cq")["guaranteed"] == {"*": 2}  # the ClusterQueue stays


def test_cohort_plan_is_valid() -> None:
    from solver import plan

    snap = _snap([*v11.objects(), *_load("cohorts.yaml")])
    request = snap.request.model_copy(update={"policy": snap.request.policy.model_copy(
        update={"solver": "heuristic", "time_limit_s": 0.5})})
    result = plan(request)
    assert validate_plan(request, result) == []
    assert {a.job for a in result.assignments} | {u.job for u in result.unplaced} == \
        {j.name for j in request.jobs}


def test_workload_priority_class_label() -> None:
    pods = v11.pods()
    for p in pods["items"]:
        if p["metadata"]["name"].startswith("llm-"):
            p["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "sample-priority"
        if p["metadata"]["name"] == "kai-build":
            p["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "no-such-class"
    objects = [*v11.objects(), *_load("workloadpriorityclasses.yaml")]
    assert read_objects(objects).workload_priority_classes == {"sample-priority": 10000}
    snap = _snap(objects, pods)
    # The WorkloadPriorityClass wins over the pods' PriorityClass (high-priority, 1e6).
    assert _job(snap, "ml/group:llm").priority == 10000
    # An unknown one: reported; the pod's own class (build, 100) counts.
    assert _job(snap, "ml/kai-build").priority == 100
    assert "WorkloadPriorityClass 'no-such-class' was not given" in \
        _issues(snap, "pod/ml/kai-build")[0]
    # Without WorkloadPriorityClass objects the label is not read.
    assert _job(_snap(v11.objects(), pods), "ml/group:llm").priority == 1000000


def test_podgroup_priority_class_name() -> None:
    # vc-job's PodGroup names `train` (50); its pods name no class of their own.
    snap = _snap(v11.objects())
    assert _job(snap, "ml/group:vc-job").priority == 50
    # The group's class wins over its pods' own.
    pods = v11.pods()
    for p in pods["items"]:
        if p["metadata"]["name"].startswith("vc-worker-"):
            p["spec"]["priorityClassName"] = "inference"
    assert _job(_snap(v11.objects(), pods), "ml/group:vc-job").priority == 50
    # A class not given: reported, the pods' priorities are used.
    objects = copy.deepcopy(v11.objects())
    for o in objects:
        if o["kind"] == "PodGroup" and o["metadata"]["name"] == "vc-job":
            o["spec"]["priorityClassName"] = "no-such-class"
    snap = _snap(objects, pods)
    assert _job(snap, "ml/group:vc-job").priority == 125
    assert "PriorityClass 'no-such-class' of PodGroup ml/vc-job" in \
        _issues(snap, "group/ml/group:vc-job")[0]
