"""The live watch of the queue objects: Kueue ClusterQueue / LocalQueue / ResourceFlavor /
Cohort / WorkloadPriorityClass, PriorityClass and Volcano PodGroups listed and watched with
the official client (custom-objects API) against `fakeapi.FakeApiServer`, and the live
snapshot's quotas and priorities following their changes."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.k8s import ClusterCache, K8sState, Watcher, make_api
from api.k8s.watch import WatchOptions
from tests.k8s import v11
from tests.k8s.fakeapi import FakeApiServer

WAIT_S = 30.0
H100 = "H100-SXM5-80GB"
#: What the fake server serves (Cohorts only at v1alpha1, as Kueue before v0.11); KAI
#: Queues, Topologies and the other PodGroups are not served (404).
SERVED = {
    "/apis/kueue.x-k8s.io/v1beta1/clusterqueues": "clusterqueues.kueue.x-k8s.io",
    "/apis/kueue.x-k8s.io/v1beta1/localqueues": "localqueues.kueue.x-k8s.io",
    "/apis/kueue.x-k8s.io/v1beta1/resourceflavors": "resourceflavors.kueue.x-k8s.io",
    "/apis/kueue.x-k8s.io/v1alpha1/cohorts": "cohorts.kueue.x-k8s.io",
    "/apis/kueue.x-k8s.io/v1beta1/workloadpriorityclasses":
        "workloadpriorityclasses.kueue.x-k8s.io",
    "/apis/scheduling.k8s.io/v1/priorityclasses": "priorityclasses.scheduling.k8s.io",
    "/apis/scheduling.volcano.sh/v1beta1/podgroups": "podgroups.scheduling.volcano.sh",
}
KINDS = {"ClusterQueue": "clusterqueues.kueue.x-k8s.io",
         "LocalQueue": "localqueues.kueue.x-k8s.io",
         "ResourceFlavor": "resourceflavors.kueue.x-k8s.io",
         "Cohort": "cohorts.kueue.x-k8s.io",
         "WorkloadPriorityClass": "workloadpriorityclasses.kueue.x-k8s.io",
         "PriorityClass": "priorityclasses.scheduling.k8s.io"}


def _bare(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a list item holds it: without `kind` and `apiVersion`."""
    return {k: v for k, v in copy.deepcopy(obj).items() if k not in ("kind", "apiVersion")}


def _objects() -> list[dict[str, Any]]:
    out = v11.objects()
    for name in ("cohorts.yaml", "workloadpriorityclasses.yaml"):
        out.extend(d for d in yaml.safe_load_all((v11.FIXTURES / name).read_text()) if d)
    flat: list[dict[str, Any]] = []
    for o in out:
        flat.extend(o["items"] if o["kind"] == "List" else [o])
    return flat


def _kind_of(obj: dict[str, Any]) -> str | None:
    if obj["kind"] == "PodGroup":
        return "podgroups.scheduling.volcano.sh" if obj["apiVersion"].startswith(
            "scheduling.volcano.sh/") else None
    return KINDS.get(obj["kind"])


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[FakeApiServer, ClusterCache, Watcher]]:
    server = FakeApiServer(SERVED).start()
    for node in v11.nodes()["items"]:
        server.add("nodes", node)
    for pod in v11.pods()["items"]:
        server.add("pods", pod)
    for obj in _objects():
        kind = _kind_of(obj)
        if kind is not None:
            server.add(kind, _bare(obj))
    cache = ClusterCache()
    watcher = Watcher(cache, make_api(str(server.kubeconfig(tmp_path / "kubeconfig"))),
                      WatchOptions(timeout_s=20))
    watcher.start()
    try:
        assert cache.wait(lambda c: c.synced and all(
            k in c.resource_versions for k in SERVED.values()), WAIT_S)
        yield server, cache, watcher
    finally:
        watcher.stop(wait_s=0.0)
        server.stop()


def _quotas(state: K8sState) -> dict[str, Any]:
    snap = state.snapshot
    assert snap is not None
    return {t: q.model_dump() for t, q in snap.request.cluster.quotas.items()}


def test_watched_queue_objects_make_the_live_snapshot(
        live: tuple[FakeApiServer, ClusterCache, Watcher]) -> None:
    server, cache, watcher = live
    state = K8sState(live=cache)
    snap = state.snapshot
    assert snap is not None
    quotas = _quotas(state)
    # The Cohort objects (served at v1alpha1 only: found after v1beta2 and v1beta1 404).
    assert watcher.versions["cohorts.kueue.x-k8s.io"] == "v1alpha1"
    assert any(r.startswith("/apis/kueue.x-k8s.io/v1beta2/cohorts") for r in server.requests)
    assert quotas["research"]["guaranteed"][H100] == 20 and quotas["research"]["parent"] == "org"
    # LocalQueues give tenants; PriorityClass list items (no kind/apiVersion) are read.
    jobs = {j.name: j for j in snap.request.jobs}
    assert jobs["ml/group:llm"].tenant == "team-a-cq"
    assert jobs["ml/group:llm"].priority == 1000000
    assert jobs["ml/group:vc-job"].priority == 50   # the Volcano PodGroup's class
    # A kind the server does not serve is asked for and skipped.
    assert any(r.startswith("/apis/scheduling.run.ai/") for r in server.requests)
    assert "queues.scheduling.run.ai" not in cache.resource_versions


def test_queue_object_changes_reach_the_live_snapshot(
        live: tuple[FakeApiServer, ClusterCache, Watcher]) -> None:
    server, cache, _ = live
    state = K8sState(live=cache)
    assert _quotas(state)["platform"]["guaranteed"] == {"*": 2}
    research = copy.deepcopy(server.objects["cohorts.kueue.x-k8s.io"]["research"])
    research["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = 6
    server.modify("cohorts.kueue.x-k8s.io", research)
    server.delete("cohorts.kueue.x-k8s.io", "platform")
    wpc = _bare(_objects()[-1])
    wpc["value"] = 7
    server.modify("workloadpriorityclasses.kueue.x-k8s.io", wpc)
    assert cache.wait(lambda c: c.get("cohorts.kueue.x-k8s.io", "platform") is None, WAIT_S)
    assert cache.wait(lambda c: (c.get("workloadpriorityclasses.kueue.x-k8s.io",
                                       "sample-priority") or {}).get("value") == 7, WAIT_S)
    quotas = _quotas(state)
    assert quotas["research"]["guaranteed"][H100] == 22
    assert "platform" not in quotas
    assert state.live_objects().workload_priority_classes == {"sample-priority": 7}
