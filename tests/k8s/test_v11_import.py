"""Kubernetes import of the v1.1 objects (contract 5): Kueue and KAI queues -> quotas and
tenants, PriorityClasses -> priorities, Topology -> levels, PodGroups and annotations ->
elastic gangs. Fixtures: fixtures/v11 (objects) and tests/k8s/v11.py (nodes, pods)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.importing import SnapshotError
from api.k8s import build_snapshot, export_plan
from api.k8s.objects import READERS, K8sObjects, objects_from_text, read_objects
from api.k8s.snapshot import Snapshot
from models import Plan, PlanRequest
from solver import plan
from solver.driver import PlanningError
from solver.validate import validate_plan
from tests.k8s import v11

REPO = Path(__file__).resolve().parents[2]
H100, A100 = "H100-SXM5-80GB", "A100-SXM4-80GB"
BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
ZONE = "topology.kubernetes.io/zone"


def _snap(objects: list[Any] | None = None, pods: dict[str, Any] | None = None,
          nodes: dict[str, Any] | None = None) -> Snapshot:
    return build_snapshot(nodes or v11.nodes(), pods or v11.pods(),
                          objects=read_objects(v11.objects() if objects is None else objects))


def _job(snap: Snapshot, name: str) -> Any:
    return next(j for j in snap.request.jobs if j.name == name)


def _issues(snap: Snapshot, obj: str) -> list[str]:
    return [i.message for i in snap.issues if i.object == obj]


def _quota(snap: Snapshot, tenant: str) -> dict[str, Any]:
    return snap.request.cluster.quotas[tenant].model_dump()


# ---------------------------------------------------------------- reading the objects

def test_read_objects_by_kind() -> None:
    objs = read_objects(v11.objects())
    assert set(objs.cluster_queues) == {"team-a-cq", "team-b-cq", "team-c-cq"}
    assert objs.cluster_queues["team-b-cq"].cohort == "research"  # v1beta2 cohortName
    assert objs.local_queues[("ml", "lq-a")] == "team-a-cq"
    assert objs.flavors["h100"].topology == "default"
    assert not objs.flavors["default-flavor"].node_labels
    assert objs.topologies["default"].levels == (ZONE, BLOCK, RACK, "kubernetes.io/hostname")
    assert set(objs.kai_queues) == {"lab", "vision", "nlp", "burst", "orphan"}
    assert objs.kai_queues["nlp"].limit == 12 and objs.kai_queues["burst"].quota == -1
    assert objs.priority_classes == {"high-priority": 1000000, "train": 50,
                                     "build-preemptible": 75, "build": 100, "inference": 125}
    assert objs.default_priority is None
    assert objs.pod_groups == {("ml", "vc-job"): 2, ("ml", "co-job"): 3}
    assert objs.issues == []


@pytest.mark.parametrize(("obj", "message"), [
    ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
      "metadata": {"name": "x"}, "spec": {"resourceGroups": {"flavors": []}}},
     "spec.resourceGroups is not a list"),
    ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "x"},
      "spec": {"resourceGroups": [{"flavors": [{"name": "f", "resources": [
          {"name": "nvidia.com/gpu", "nominalQuota": "lots"}]}]}]}},
     "nominalQuota: malformed quantity"),
    ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
      "metadata": {"name": "x", "namespace": "ml"}, "spec": {}},
     "spec.clusterQueue is missing"),
    ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "x"},
      "spec": {"levels": []}}, "spec.levels must be a non-empty list"),
    ({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "x"},
      "spec": {"resources": {"gpu": {"quota": -5}}}}, "must be >= 0 or -1"),
    ({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "x"},
      "spec": {"resources": {"gpu": {"quota": "2"}}}}, "quota is not a number"),
    ({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "x"},
      "value": "high"}, "value is not an integer"),
    ({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
      "metadata": {"namespace": "ml"}, "spec": {"minMember": 2}}, "metadata.name is missing"),
])
def test_malformed_objects_are_reported(obj: dict[str, Any], message: str) -> None:
    objs = read_objects([obj])
    assert len(objs.issues) == 1 and objs.issues[0].skipped
    assert message in objs.issues[0].message
    # The whole import goes on: the object is left out, nothing raises.
    snap = build_snapshot(v11.nodes(), v11.pods(), objects=objs)
    assert any(message in i.message for i in snap.issues)


def test_lists_are_flattened_and_other_kinds_ignored() -> None:
    docs = objects_from_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueueList", "items": [
            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
             "metadata": {"name": "q"}, "spec": {}}]},
        {"apiVersion": "other.example.com/v1", "kind": "Queue", "metadata": {"name": "o"}}]}))
    objs = read_objects(docs)
    assert set(objs.cluster_queues) == {"q"} and not objs.kai_queues and not objs.issues


def test_text_that_is_neither_json_nor_yaml() -> None:
    with pytest.raises(SnapshotError, match=r"queues.yaml: neither JSON nor YAML: .* line 2"):
        objects_from_text("a: [\n", "queues.yaml")


# ---------------------------------------------------------------- Kueue

def test_kueue_quotas() -> None:
    snap = _snap()
    # h100 by its GFD product label, `ampere` through the nodes its labels select.
    assert _quota(snap, "team-a-cq") == {"guaranteed": {H100: 8, A100: 4},
                                         "limit": {H100: 12}, "parent": "research"}
    # In a cohort without a borrowingLimit: no limit of its own on H100; the ampere GPUs
    # its flavors do not cover: limit 0.
    assert _quota(snap, "team-b-cq") == {"guaranteed": {H100: 8}, "limit": {A100: 0},
                                         "parent": "research"}
    # No cohort: nothing to borrow; a flavor without nodeLabels covers every model.
    assert _quota(snap, "team-c-cq") == {"guaranteed": {"*": 2}, "limit": {"*": 2},
                                         "parent": None}
    # The cohort: its members' sums, and nothing beyond them.
    assert _quota(snap, "research") == {"guaranteed": {H100: 16, A100: 4},
                                        "limit": {H100: 16, A100: 4, "*": 20}, "parent": None}
    assert any("lendingLimit" in m for m in _issues(snap, "clusterqueue/team-b-cq"))


def test_kueue_tenants() -> None:
    snap = _snap()
    assert _job(snap, "ml/group:llm").tenant == "team-a-cq"
    assert _job(snap, "ml/group:co-job").tenant == "team-b-cq"
    assert _job(snap, "ml/group:odd").tenant == "team-c-cq"
    assert _job(snap, "ml/lost-queue").tenant == "ml"
    assert _issues(snap, "pod/ml/lost-queue") == [
        "LocalQueue ml/lq-missing was not given; tenant is the namespace"]
    # gpuplan's own annotation wins over the queue.
    pods = v11.pods()
    for p in pods["items"]:
        if p["metadata"]["name"].startswith("llm-"):
            p["metadata"]["annotations"]["gpuplan.io/tenant"] = "mine"
    assert _job(_snap(pods=pods), "ml/group:llm").tenant == "mine"


def test_kueue_flavor_problems_are_reported() -> None:
    objs = [o for o in v11.objects() if o["kind"] != "ResourceFlavor" or
            o["metadata"]["name"] != "ampere"]
    snap = _snap(objs)
    assert _quota(snap, "team-a-cq")["guaranteed"] == {H100: 8}
    assert "ResourceFlavor 'ampere' was not given" in _issues(snap, "clusterqueue/team-a-cq")[0]
    # A flavor whose labels select nodes of two models cannot key a quota.
    objs = copy.deepcopy(v11.objects())
    for o in objs:
        if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == "ampere":
            o["spec"]["nodeLabels"] = {"kubernetes.io/os": "linux"}
    snap = _snap(objs)
    assert _quota(snap, "team-a-cq")["guaranteed"] == {H100: 8}
    assert "2 models" in _issues(snap, "clusterqueue/team-a-cq")[0]


def test_queue_labels_without_queue_objects_keep_the_namespace() -> None:
    snap = _snap([])
    assert {j.tenant for j in snap.request.jobs} == {"ml"}
    assert not snap.request.cluster.quotas
    assert not any("LocalQueue" in i.message or "queue" in i.message for i in snap.issues)


# ---------------------------------------------------------------- KAI-Scheduler

def test_kai_queues() -> None:
    snap = _snap()
    assert _quota(snap, "lab") == {"guaranteed": {"*": 16}, "limit": {}, "parent": None}
    # limit 0: nothing beyond the quota.
    assert _quota(snap, "vision") == {"guaranteed": {"*": 8}, "limit": {"*": 8},
                                      "parent": "lab"}
    assert _quota(snap, "nlp") == {"guaranteed": {"*": 4}, "limit": {"*": 12}, "parent": "lab"}
    assert _quota(snap, "burst") == {"guaranteed": {}, "limit": {}, "parent": None}
    assert "unlimited" in _issues(snap, "queue/burst")[0]
    assert _quota(snap, "orphan")["parent"] is None
    assert "'no-such-queue' was not given" in _issues(snap, "queue/orphan")[0]
    assert _job(snap, "ml/kai-train").tenant == "nlp"
    assert _job(snap, "ml/kai-build").tenant == "vision"
    assert _job(snap, "ml/serve-0").tenant == "vision"


def _kai(name: str, quota: float, limit: float | None = None,
         parent: str | None = None) -> dict[str, Any]:
    gpu: dict[str, Any] = {"quota": quota}
    if limit is not None:
        gpu["limit"] = limit
    spec: dict[str, Any] = {"resources": {"gpu": gpu}}
    if parent is not None:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}


def test_kai_children_over_their_parent_are_scaled() -> None:
    snap = _snap([_kai("p", 8, -1), _kai("a", 6, -1, "p"), _kai("b", 4, -1, "p")])
    assert _quota(snap, "a")["guaranteed"] == {"*": pytest.approx(4.8)}
    assert _quota(snap, "b")["guaranteed"] == {"*": pytest.approx(3.2)}
    assert "scaled by 0.8" in _issues(snap, "queue/p")[0]
    PlanRequest.model_validate_json(snap.request.model_dump_json())


def test_kai_unlimited_parent_guarantees_its_children() -> None:
    snap = _snap([_kai("p", -1, -1), _kai("a", 6, -1, "p"), _kai("b", 4, -1, "p")])
    assert _quota(snap, "p")["guaranteed"] == {"*": 10}
    assert _quota(snap, "a") == {"guaranteed": {"*": 6}, "limit": {}, "parent": "p"}


def test_kai_limit_below_quota_and_cycles_never_fail_the_import() -> None:
    snap = _snap([_kai("low", 4, 2), _kai("x", 1, -1, "y"), _kai("y", 1, -1, "x")])
    assert _quota(snap, "low")["limit"] == {"*": 4}
    assert "raised to the quota" in _issues(snap, "queue/low")[0]
    quotas = snap.request.cluster.quotas
    # One link of the cycle is cut, the other kept.
    assert sorted(str(quotas[t].parent) for t in ("x", "y")) in (["None", "x"], ["None", "y"])
    assert any("cycle" in i.message for i in snap.issues)


# ---------------------------------------------------------------- priority classes

def test_priorities() -> None:
    snap = _snap()
    assert _job(snap, "ml/group:llm").priority == 1000000      # spec.priorityClassName
    assert _job(snap, "ml/kai-train").priority == 50           # KAI's pod label
    assert _job(snap, "ml/kai-build").priority == 100
    assert _job(snap, "ml/serve-0").priority == 125            # spec.priority wins
    assert _job(snap, "ml/lost-queue").priority == 0


def test_unknown_and_default_priority_classes() -> None:
    objs = [*v11.objects(), {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                             "metadata": {"name": "batch-default"}, "value": 10,
                             "globalDefault": True}]
    pods = v11.pods()
    for p in pods["items"]:
        if p["metadata"]["name"] == "kai-build":
            p["spec"]["priorityClassName"] = "no-such-class"
    snap = _snap(objs, pods)
    assert _job(snap, "ml/lost-queue").priority == 10
    assert _job(snap, "ml/kai-build").priority == 10
    assert "PriorityClass 'no-such-class' was not given" in _issues(snap, "pod/ml/kai-build")[0]


# ---------------------------------------------------------------- topology

def test_topology_levels_and_domains() -> None:
    snap = _snap()
    req = snap.request
    assert req.cluster.topology_levels == [ZONE, BLOCK, RACK]
    nodes = {n.name: n.topology for n in req.cluster.nodes}
    assert nodes["a100-2"] == {ZONE: "z1", BLOCK: "b1", RACK: "r2"}
    # No rack label: a rack of its own.
    assert nodes["h100-2"][RACK] == f"{RACK}=h100-2"
    assert "no label" in _issues(snap, "node/h100-2")[0]
    llm = _job(snap, "ml/group:llm")
    assert llm.topology is not None
    assert (llm.topology.required, llm.topology.preferred) == (BLOCK, RACK)
    # A level the Topology lacks: the gang is kept without it.
    assert _job(snap, "ml/group:odd").topology is None
    assert "names no level" in _issues(snap, "group/ml/group:odd")[0]


def test_hostname_level_and_kai_annotations() -> None:
    pods = v11.pods()
    for p in pods["items"]:
        ann = p["metadata"]["annotations"]
        if p["metadata"]["name"].startswith("llm-"):
            ann.pop("kueue.x-k8s.io/podset-required-topology")
            ann.pop("kueue.x-k8s.io/podset-preferred-topology")
            ann["kai.scheduler/topology-required-placement"] = "kubernetes.io/hostname"
            ann["kai.scheduler/topology-preferred-placement"] = ZONE
    topo = _job(_snap(pods=pods), "ml/group:llm").topology
    assert (topo.required, topo.preferred) == ("host", ZONE)


def test_one_topology_is_used() -> None:
    other = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
             "metadata": {"name": "another"}, "spec": {"levels": [{"nodeLabel": ZONE}]}}
    snap = _snap([*v11.objects(), other])
    # The flavors reference `default`, so that one wins over the first by name.
    assert snap.request.cluster.topology_levels == [ZONE, BLOCK, RACK]
    assert "topology/default is used" in _issues(snap, "topology/another")[0]


# ---------------------------------------------------------------- elastic gangs

def test_elastic_gangs() -> None:
    snap = _snap()
    one = _job(snap, "ml/elastic-one").elastic
    assert (one.min_gpus, one.max_gpus, one.speedup) == (2, 8, v11.SPEEDUP)
    # Its own size (2) outside the range: kept, not elastic.
    assert _job(snap, "ml/elastic-bad").elastic is None
    assert "elastic left out" in _issues(snap, "pod/ml/elastic-bad")[0]
    # Volcano PodGroup minMember 2 of 4 pods x 2 GPUs: whole pods only.
    vc = _job(snap, "ml/group:vc-job")
    assert vc.gpus == 8 and vc.elastic is not None
    assert (vc.elastic.min_gpus, vc.elastic.max_gpus) == (4, 8)
    assert vc.elastic.speedup == {"4": 4.0, "6": 6.0, "8": 8.0}
    # coscheduling PodGroup minMember 3 of 4 one-GPU pods: every size, linear.
    co = _job(snap, "ml/group:co-job").elastic
    assert (co.min_gpus, co.max_gpus, co.speedup) == (3, 4, {})


def test_elastic_gang_with_running_members_stays_fixed() -> None:
    pods = v11.pods()
    items = pods["items"]
    first = next(p for p in items if p["metadata"]["name"] == "vc-worker-0")
    items[items.index(first)] = v11.scenario.bound(first, "a100-1")
    snap = _snap(pods=pods)
    vc = _job(snap, "ml/group:vc-job")
    assert vc.gpus == 6 and vc.elastic is None
    assert "already run" in _issues(snap, "group/ml/group:vc-job")[0]


@pytest.mark.parametrize(("annotations", "message"), [
    ({"gpuplan.io/elastic-min": "two"}, "must be a GPU count"),
    ({"gpuplan.io/elastic-min": "1", "gpuplan.io/speedup": "{"}, "is not JSON"),
    ({"gpuplan.io/elastic-min": "1", "gpuplan.io/speedup": '{"1": -1}'}, "speedup > 0"),
    ({"gpuplan.io/speedup": '{"1": 1}'}, "needs gpuplan.io/elastic-min"),
])
def test_malformed_elastic_annotations(annotations: dict[str, str], message: str) -> None:
    pods = v11.pods()
    for p in pods["items"]:
        if p["metadata"]["name"] == "kai-train":
            p["metadata"]["annotations"] = annotations
    snap = _snap(pods=pods)
    assert _job(snap, "ml/kai-train").elastic is None
    assert message in _issues(snap, "pod/ml/kai-train")[0]


# ---------------------------------------------------------------- the request

def test_snapshot_is_a_valid_request_that_solves() -> None:
    """The imported request validates as the wire contract and the planner's plan of it
    (quotas, priorities and topology; elastic gangs below) passes the validator."""
    snap = _snap()
    text = snap.request.model_dump_json(exclude_none=True)
    req = PlanRequest.model_validate_json(text, strict=True)
    assert req.cluster.quotas and req.cluster.topology_levels
    fixed = req.model_copy(update={
        "jobs": [j.model_copy(update={"elastic": None}) for j in req.jobs],
        "policy": req.policy.model_copy(update={"time_limit_s": 20})})
    result = plan(fixed)
    assert validate_plan(fixed, result) == []
    names = {a.job for a in result.assignments} | {u.job for u in result.unplaced}
    assert names == {j.name for j in req.jobs}
    # The running pod keeps its GPU.
    assert "ml/serve-0" in {a.job for a in result.assignments}


def _plans_elastic_gangs() -> bool:
    req = PlanRequest.model_validate({
        "cluster": {"nodes": [{"name": "n", "gpus": [{"index": i, "model": H100}
                                                    for i in range(2)]}]},
        "jobs": [{"name": "e", "gpus": 2, "elastic": {
            "min_gpus": 1, "max_gpus": 2, "speedup": {"1": 1.0, "2": 1.5}}}],
        "policy": {"time_limit_s": 5}})
    try:
        plan(req)
    except PlanningError:
        return False
    return True


def test_snapshot_with_elastic_gangs_solves() -> None:
    """The whole import, elastic gangs included, once the planners size elastic gangs
    (issue 15, branch `elastic`)."""
    if not _plans_elastic_gangs():
        pytest.skip("the planners of this tree do not size elastic gangs yet (issue 15)")
    req = _snap().request
    req = req.model_copy(update={"policy": req.policy.model_copy(update={"time_limit_s": 20})})
    result = plan(req)
    assert validate_plan(req, result) == []


def test_v1_import_is_unchanged(nodes_json: dict[str, Any], pods_json: dict[str, Any]) -> None:
    plain = build_snapshot(nodes_json, pods_json)
    empty = build_snapshot(nodes_json, pods_json, objects=K8sObjects())
    assert plain.request == empty.request and plain.issues == empty.issues
    dumped = json.loads(plain.request.model_dump_json(exclude_none=True))
    assert not dumped["cluster"]["quotas"] and not dumped["cluster"]["topology_levels"]
    assert all(j.get("priority", 0) == 0 and "elastic" not in j and "topology" not in j
               for j in dumped["jobs"])


# ---------------------------------------------------------------- the CLI

def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "api.cli", "k8s", "snapshot", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_cli_objects(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text(json.dumps(v11.nodes()))
    (tmp_path / "pods.json").write_text(json.dumps(v11.pods()))
    files = [f"--objects={v11.FIXTURES / n}" for n in
             ("kueue.yaml", "kai.yaml", "priorityclasses.yaml", "podgroups.yaml")]
    out = _cli("--nodes", str(tmp_path / "nodes.json"), "--pods", str(tmp_path / "pods.json"),
               *files, "-o", str(tmp_path / "req.json"))
    assert out.returncode == 0, out.stderr
    req = PlanRequest.model_validate_json((tmp_path / "req.json").read_text())
    assert req == _snap().request
    assert "gpuplan: warning: pod/ml/lost-queue adjusted" in out.stderr
    strict = _cli("--nodes", str(tmp_path / "nodes.json"), "--pods",
                  str(tmp_path / "pods.json"), *files, "--strict")
    assert strict.returncode == 2
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    bad = _cli("--nodes", str(tmp_path / "nodes.json"), "--pods", str(tmp_path / "pods.json"),
               "--objects", str(tmp_path / "bad.yaml"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith(
        f"gpuplan: error: {tmp_path / 'bad.yaml'}: neither JSON nor YAML")


def test_export_binds_the_pods_an_elastic_gang_was_given() -> None:
    """A plan that runs the 4-pod Volcano gang on 4 of its 8 GPUs binds two pods."""
    snap = _snap()
    placements = [{"node": "a100-1", "gpu": i} for i in range(4)]
    result = Plan.model_validate({
        "status": "feasible", "solver": "test", "objective_value": 0.0,
        "solve_time_s": 0.0, "assignments": [{"job": "ml/group:vc-job",
                                              "placements": placements}],
        "unplaced": [], "stats": {"gpus_total": 32, "gpus_allocated": 4.0,
                                  "utilization": 0.125}})
    out = export_plan(result, snap.request, snap.job_pods)
    assert sorted(b["metadata"]["name"] for b in out.bindings) == ["vc-worker-0", "vc-worker-1"]
    assert {b["target"]["name"] for b in out.bindings} == {"a100-1"}
    assert any("2 of its 4 pods bound" in w for w in out.warnings)


def test_docs_example() -> None:
    """docs/kubernetes.md section 4: its Kueue example gives the quotas it shows."""
    text = (REPO / "docs" / "kubernetes.md").read_text()
    section = text[text.index("## 4. Queues"):]
    yaml_text = section[section.index("```yaml\n") + 8:]
    yaml_text = yaml_text[:yaml_text.index("```")]
    json_text = section[section.index("```json\n") + 8:]
    shown = json.loads("{" + json_text[:json_text.index("```")] + "}")["quotas"]
    team_b = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
              "metadata": {"name": "team-b-cq"}, "spec": {"cohort": "research",
              "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                  {"name": "h100", "resources": [{"name": "nvidia.com/gpu",
                                                  "nominalQuota": 8}]}]}]}}
    h100s = v11.scenario.node_list([n for n in v11.scenario.nodes()
                                    if n["metadata"]["name"].startswith("h100")])
    snap = build_snapshot(h100s, v11.scenario.pod_list([]), objects=read_objects(
        [*objects_from_text(yaml_text), team_b]))
    got = {t: q.model_dump(exclude_defaults=True)
           for t, q in snap.request.cluster.quotas.items()}
    assert got == {t: {k: v for k, v in q.items() if v} for t, q in shown.items()}


_QUEUE_NAMES = ("q0", "q1", "q2", "q3")


@st.composite
def _queue_objects(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random KAI queues (any quota, limit and parent, cycles included) and Kueue
    ClusterQueues (any flavors, cohorts, borrowing limits) sharing names."""
    amount = st.sampled_from([-1, 0, 1, 2.5, 4, 8, 100])
    out: list[dict[str, Any]] = []
    for name in draw(st.lists(st.sampled_from(_QUEUE_NAMES), unique=True, max_size=4)):
        out.append(_kai(name, draw(amount), draw(st.none() | amount),
                        draw(st.none() | st.sampled_from([*_QUEUE_NAMES, "gone"]))))
    for name in draw(st.lists(st.sampled_from(("c0", "c1", "q0")), unique=True, max_size=3)):
        flavors = [{"name": f, "resources": [{"name": "nvidia.com/gpu",
                                              "nominalQuota": draw(st.integers(0, 20)),
                                              **({"borrowingLimit": b} if (b := draw(
                                                  st.none() | st.integers(0, 8))) is not None
                                                 else {})}]}
                   for f in draw(st.lists(st.sampled_from(("h100", "ampere", "default-flavor",
                                                           "missing")), unique=True))]
        spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                                    "flavors": flavors}]}
        cohort = draw(st.none() | st.sampled_from(("research", "q1", "c0")))
        if cohort is not None:
            spec["cohort"] = cohort
        out.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                    "metadata": {"name": name}, "spec": spec})
    return out


@settings(max_examples=60, deadline=None)
@given(_queue_objects())
def test_any_queue_objects_give_a_valid_request(queues: list[dict[str, Any]]) -> None:
    """Whatever the queues say, the import gives a request the contract accepts (the
    problems reported), and every guarantee it keeps fits its limit and its parent."""
    flavors = [o for o in v11.objects() if o["kind"] == "ResourceFlavor"]
    snap = _snap([*flavors, *queues])
    req = PlanRequest.model_validate_json(snap.request.model_dump_json(), strict=True)
    for q in req.cluster.quotas.values():
        assert all(g <= q.limit.get(k, float("inf")) for k, g in q.guaranteed.items())


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**9) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "spec", "metadata", "resourceGroups", "flavors", "resources",
                         "nominalQuota", "borrowingLimit", "levels", "nodeLabel", "gpu",
                         "quota", "limit", "parentQueue", "minMember", "value", "items",
                         "clusterQueue", "nodeLabels", "cohort", "namespace"]),
        inner, max_size=4), max_leaves=20)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(
    READERS)),
    _JSON, _JSON), max_size=4))
def test_hostile_objects_are_reported_never_raised(
        objs: list[tuple[tuple[str, str], Any, Any]]) -> None:
    """Objects of the known kinds with any content: read or reported, and the import
    still gives a request the contract accepts."""
    docs = [{"apiVersion": f"{group}/v1", "kind": kind, "metadata": meta, "spec": spec,
             "value": spec} for (kind, group), meta, spec in objs]
    snap = build_snapshot(v11.nodes(), v11.pods(), objects=read_objects(docs))
    PlanRequest.model_validate_json(snap.request.model_dump_json(), strict=True)
