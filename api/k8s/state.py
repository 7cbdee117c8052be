"""What the extender knows between calls: the cluster view, assumptions and settings.

The view is the newest of two sources: a snapshot posted to `/v1/k8s/snapshot` (or
`/v1/k8s/nodes`), and, with `GPUPLAN_K8S_WATCH=true` (`gpuplan serve --k8s-watch`), the
live `ClusterCache` that `api.k8s.watch` keeps current. Both go through the one import,
`build_snapshot`; the live snapshot is rebuilt only when the cache changed. The queue,
priority, topology and pod-group objects of the live snapshot are the watched ones once
the watch has listed any of their kinds (`GPUPLAN_K8S_WATCH_OBJECTS`), else those of the
last post that had them.

Assumptions play the part of kube-scheduler's assumed pods: when the extender tells the
scheduler which node it prefers for a pod (the only node it passed, or the node it scored
highest), it assumes the pod lands there and counts those GPUs as taken until

- the view shows the pod bound (confirmed: the real pod now counts, wherever it landed),
- the pod is deleted (watch) or filtered again (the scheduler is retrying it),
- the view shows something else on those GPUs (the assumption is wrong), or
- `assume_ttl_s` passes (the binding never showed up).

With kube-scheduler's `bindVerb` pointed at the extender, gpuplan binds the pod itself
(`api.k8s.watch.bind_pod`, needs the watch's API access) and then knows where it is: the
assumption is marked bound and kept until the view shows the pod, for at most
`BOUND_TTL_S`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.k8s.objects import K8sObjects, read_objects
from api.k8s.snapshot import Snapshot, build_snapshot, list_items
from api.k8s.watch import PODS, ClusterCache
from models import Job, Plan, Policy
from models.instance import ClusterState, compile_jobs

log = logging.getLogger("gpuplan.k8s")

#: The same warning is logged at most once per this many seconds.
WARN_EVERY_S = 60.0
#: How long a pod gpuplan bound itself counts without the view showing it.
BOUND_TTL_S = 600.0


class K8sSettings(BaseSettings):
    """Kubernetes settings (environment prefix `GPUPLAN_K8S_`); docs/kubernetes.md."""

    model_config = SettingsConfigDict(env_prefix="GPUPLAN_K8S_", extra="ignore")

    watch: bool = Field(default=False, description=(
        "List and watch Nodes and Pods so the extender's view follows the cluster."))
    kubeconfig: str | None = Field(default=None, description=(
        "kubeconfig file for the watch; default: in-cluster service account when running "
        "in a pod, else $KUBECONFIG or ~/.kube/config."))
    context: str | None = Field(default=None, description="kubeconfig context.")
    watch_objects: bool = Field(default=True, description=(
        "With `watch`, also list and watch the Kueue, KAI, PriorityClass and PodGroup "
        "objects the import reads (kinds the cluster does not serve are skipped)."))
    watch_timeout_s: int = Field(default=300, ge=1, le=3600, description=(
        "The API server ends each watch after this long; the watch then resumes."))
    assume_ttl_s: float = Field(default=30.0, gt=0, description=(
        "How long a pod counts as placed on the extender's preferred node without the view "
        "confirming it."))
    no_state: Literal["pass", "error"] = Field(default="pass", description=(
        "Filter without a cluster view: 'pass' every node (with a warning) or answer "
        "'error'."))
    failed_nodes_only: bool = Field(default=False, description=(
        "Report every failed node in FailedNodes (kube-scheduler 1.20 and older have no "
        "FailedAndUnresolvableNodes)."))


@dataclass
class Assumption:
    """A pod the extender expects on `node`, as the running job `job` (its placements)."""

    pod: str
    node: str
    job: Job
    expires: float
    #: gpuplan bound the pod itself (bindVerb): known, not guessed
    bound: bool = False


@dataclass
class View:
    """The cluster as the extender judges it: the snapshot plus assumed pods, with the
    occupancy of both in a ClusterState (the compiled instance every planner uses)."""

    snapshot: Snapshot
    occupancy: ClusterState
    #: node names of the NodeList behind the snapshot (GPU nodes or not)
    known_nodes: frozenset[str]


class K8sState:
    """The service's Kubernetes state (one per app; see the module doc)."""

    def __init__(self, settings: K8sSettings | None = None, live: ClusterCache | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or K8sSettings()
        self.live = live
        self.clock = clock
        #: binds a pod (namespace, name, uid, node) through the API; None without access
        self.binder: Callable[[str, str, str | None, str], None] | None = None
        self.lock = threading.RLock()
        self.nodes: object = None
        self.pods: object = None
        self.policy: Policy | None = None
        self.aliases: dict[str, str] = {}
        #: the queue / priority / topology / pod-group objects of the last post that had them
        self.objects: K8sObjects = K8sObjects()
        self.plan: Plan | None = None
        self.assumed: dict[str, Assumption] = {}
        self._snapshot: Snapshot | None = None
        self._live_seen = -1
        self._live_objects: tuple[int, K8sObjects] | None = None
        self._view: tuple[tuple[int, int], View] | None = None
        self._assume_gen = 0
        self._warned: dict[str, float] = {}
        if live is not None:
            live.on_delete(self._deleted)

    # ------------------------------------------------------------------ sources
    def update(self, nodes: object, pods: object | None, policy: Policy | None = None,
               aliases: Mapping[str, str] | None = None,
               objects: K8sObjects | None = None) -> Snapshot:
        """Import and remember a posted snapshot (pods, aliases or objects None = keep the
        cached ones)."""
        with self.lock:
            pods = pods if pods is not None else self.pods_list() or {
                "kind": "List", "items": []}
            snap = build_snapshot(nodes, pods, policy=policy or self.policy,
                                  aliases=aliases if aliases is not None else self.aliases,
                                  objects=self.live_objects() if objects is None else objects)
            self.nodes, self.pods, self._snapshot, self.plan = nodes, pods, snap, None
            if self.live is not None:
                self._live_seen = self.live.version
            if policy is not None:
                self.policy = policy
            if aliases is not None:
                self.aliases = dict(aliases)
            if objects is not None:
                self.objects = objects
            return snap

    @property
    def snapshot(self) -> Snapshot | None:
        """The newest snapshot: the live one when the cache changed since the last post."""
        with self.lock:
            live = self.live
            if live is not None and live.synced and live.version != self._live_seen:
                nodes, pods, version = live.lists()
                try:
                    self._snapshot = build_snapshot(nodes, pods, policy=self.policy,
                                                    aliases=self.aliases,
                                                    objects=self.live_objects())
                    self.nodes, self.pods = nodes, pods
                except ValueError as e:  # SnapshotError: keep the last good view
                    log.warning("live snapshot import failed: %s", e)
                self._live_seen = version
            return self._snapshot

    def live_objects(self) -> K8sObjects:
        """The watched queue objects once any of their kinds was listed, else the posted
        ones (read again only when the cache changed)."""
        with self.lock:
            live = self.live
            if live is None:
                return self.objects
            items, version = live.queue_objects()
            if items is None:
                return self.objects
            if self._live_objects is None or self._live_objects[0] != version:
                self._live_objects = (version, read_objects(items))
            return self._live_objects[1]

    def pods_list(self) -> object:
        """The newest PodList (live or posted), None when none is known."""
        with self.lock:
            if self.live is not None and self.live.synced:
                return self.live.lists()[1]
            return self.pods

    # ------------------------------------------------------------------ assumptions
    def assume(self, pod: str, node: str, job: Job, *, bound: bool = False) -> None:
        """Count `job` (a pod's job with its placements as `current`) as running."""
        ttl = BOUND_TTL_S if bound else self.settings.assume_ttl_s
        with self.lock:
            self.assumed[pod] = Assumption(pod, node, job, self.clock() + ttl, bound)
            self._assume_gen += 1

    def forget(self, pod: str) -> None:
        """Drop the assumption about `pod`, if any."""
        with self.lock:
            if self.assumed.pop(pod, None) is not None:
                self._assume_gen += 1

    def _deleted(self, kind: str, key: str) -> None:
        if kind == PODS:
            self.forget(key)

    def _settle(self, snap: Snapshot) -> None:
        """Drop assumptions that expired or that the snapshot confirms (pod bound)."""
        now = self.clock()
        bound = {p.ref for pods in snap.job_pods.values() for p in pods if p.running}
        for ref, a in list(self.assumed.items()):
            if a.expires <= now or ref in bound:
                reason = "expired" if a.expires <= now else "confirmed by the view"
                log.debug("assumption %s on %s %s", ref, a.node, reason)
                self.forget(ref)

    def warn(self, key: str, message: str) -> None:
        """Log `message` as a warning, at most once a minute per `key`."""
        now = self.clock()
        with self.lock:
            if now - self._warned.get(key, -math.inf) < WARN_EVERY_S:
                return
            self._warned[key] = now
        log.warning("%s", message)

    def view_of(self, snap: Snapshot, nodes: object, *, assumptions: bool = True) -> View:
        """A view of a snapshot built for one call (from the Node objects it carried)."""
        with self.lock:
            if not assumptions:
                return self._build_view(snap, nodes, [])
            self._settle(snap)
            return self._build_view(snap, nodes, list(self.assumed.values()))

    def view(self) -> View | None:
        """The snapshot with assumed pods placed (None without any snapshot)."""
        with self.lock:
            snap = self.snapshot
            if snap is None:
                return None
            self._settle(snap)
            key = (id(snap), self._assume_gen)
            if self._view is not None and self._view[0] == key:
                return self._view[1]
            view = self._build_view(snap, self.nodes, list(self.assumed.values()))
            self._view = (key, view)
            return view

    def _build_view(self, snap: Snapshot, nodes: object, assumed: list[Assumption]) -> View:
        running = [j for j in snap.request.jobs if j.current]
        request = snap.request.model_copy(update={"jobs": running + [a.job for a in assumed]})
        occupancy = ClusterState(request)
        infos = compile_jobs(request)
        for info in infos[:len(running)]:
            assert info.current is not None
            if occupancy.conflicts(info, info.current) is None:
                occupancy.place(info, list(info.current))
            else:
                # The import assigned these GPUs itself: a conflict means an inconsistent
                # cluster (the kubelet admitted more than fits); count what fits.
                self.warn(f"overlap:{info.name}",
                          f"running job {info.name} overlaps another on the same GPUs")
        for a, info in zip(assumed, infos[len(running):], strict=True):
            if a.node not in occupancy.node_of:
                continue  # a call's Node list need not hold every node
            why = occupancy.conflicts(info, a.job.current or [])
            if why is None:
                occupancy.place(info, list(a.job.current or []))
            else:
                log.info("assumption %s on %s dropped: %s", a.pod, a.node, why)
                self.assumed.pop(a.pod, None)
        known = frozenset(_node_names(nodes))
        return View(snapshot=snap, occupancy=occupancy, known_nodes=known)


def _node_names(nodes: object) -> list[str]:
    try:
        items = list_items(nodes, "nodes")
    except ValueError:
        return []
    out: list[str] = []
    for item in items:
        meta: Any = item.get("metadata") if isinstance(item, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            out.append(meta["name"])
    return out
