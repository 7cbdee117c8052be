"""Live cluster state: list and watch Nodes and Pods with the official Kubernetes client.

`ClusterCache` holds the latest Node and Pod objects exactly as the API server sends them
(the dicts `kubectl get -o json` prints), keyed by `name` and `namespace/name`, with a
`version` that moves on every change, so a reader rebuilds its view only when something
changed. `Watcher` keeps the cache current the way client-go's reflector does, one thread
per kind:

1. list (in pages of `page_size`) and replace the kind's objects; remember the list's
   `metadata.resourceVersion`;
2. watch from that resourceVersion (with bookmarks), applying ADDED / MODIFIED / DELETED
   and remembering every event's resourceVersion; when the server ends the watch (its
   `timeoutSeconds`), watch again from the last one;
3. when the server answers 410 Gone (the version was compacted away, for the list's
   continue token or the watch), list again: the new list replaces the kind's objects,
   so deletions missed meanwhile are not kept;
4. any other failure (connection refused, 5xx) is logged and retried after a back-off
   (1 s, doubling to 30 s) from step 1.

Only pods that hold or may soon hold devices matter; finished pods (Succeeded, Failed)
are filtered out on the server (`status.phase!=...`), which sends them as DELETED when they
finish. Objects of both kinds are handed to `build_snapshot` unchanged.

With `WatchOptions.objects` the queue, priority, topology and pod-group objects of
`api.k8s.objects` are listed and watched the same way, one thread per `ObjectSource`
(Kueue's ClusterQueue, LocalQueue, ResourceFlavor, Cohort, WorkloadPriorityClass and
Topology; KAI's Queue and Topology; PriorityClass; the PodGroups of Volcano, coscheduling
and KAI), through the custom-objects API. Each source tries its API versions newest first
and keeps the first the server serves; a kind the server does not serve (its CRD is not
installed: 404) or does not let us read (403) is logged once and asked again every
`BACKOFF_MAX_S`. List items carry no `kind` / `apiVersion`; the cache stamps them.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("gpuplan.k8s.watch")

NODES = "nodes"
PODS = "pods"
KINDS = (NODES, PODS)

#: CoreV1Api methods that list (and, with watch=True, watch) each kind.
LIST_METHODS: Mapping[str, str] = {NODES: "list_node", PODS: "list_pod_for_all_namespaces"}
#: Server-side filters: pods that hold no devices are left out.
FIELD_SELECTORS: Mapping[str, str | None] = {
    NODES: None, PODS: "status.phase!=Succeeded,status.phase!=Failed"}
LIST_KINDS: Mapping[str, str] = {NODES: "NodeList", PODS: "PodList"}

#: HTTP status of an expired resourceVersion or continue token.
GONE = 410
#: HTTP statuses of a kind the server does not serve (CRD not installed) or hides from us.
NOT_SERVED = (403, 404)


@dataclass(frozen=True)
class ObjectSource:
    """Where the objects of one kind of `api.k8s.objects` are listed and watched."""

    kind: str
    group: str
    plural: str
    #: API versions to try, newest first
    versions: tuple[str, ...]

    @property
    def key(self) -> str:
        """The cache's name of the kind: `<plural>.<group>`."""
        return f"{self.plural}.{self.group}"


_KUEUE = "kueue.x-k8s.io"
#: Every object kind the import reads (api.k8s.objects.READERS), as the watch asks for it.
OBJECT_SOURCES: tuple[ObjectSource, ...] = (
    ObjectSource("ClusterQueue", _KUEUE, "clusterqueues", ("v1beta2", "v1beta1")),
    ObjectSource("LocalQueue", _KUEUE, "localqueues", ("v1beta2", "v1beta1")),
    ObjectSource("ResourceFlavor", _KUEUE, "resourceflavors", ("v1beta2", "v1beta1")),
    ObjectSource("Cohort", _KUEUE, "cohorts", ("v1beta2", "v1beta1", "v1alpha1")),
    ObjectSource("WorkloadPriorityClass", _KUEUE, "workloadpriorityclasses",
                 ("v1beta2", "v1beta1")),
    ObjectSource("Topology", _KUEUE, "topologies", ("v1beta2", "v1beta1", "v1alpha1")),
    ObjectSource("Queue", "scheduling.run.ai", "queues", ("v2", "v2alpha2")),
    ObjectSource("Topology", "kai.scheduler", "topologies", ("v1alpha1",)),
    ObjectSource("PriorityClass", "scheduling.k8s.io", "priorityclasses", ("v1",)),
    ObjectSource("PodGroup", "scheduling.volcano.sh", "podgroups", ("v1beta1",)),
    ObjectSource("PodGroup", "scheduling.x-k8s.io", "podgroups", ("v1alpha1",)),
    ObjectSource("PodGroup", "scheduling.sigs.k8s.io", "podgroups", ("v1alpha1",)),
    ObjectSource("PodGroup", "scheduling.run.ai", "podgroups", ("v2alpha2", "v2")),
)
SOURCES: Mapping[str, ObjectSource] = {s.key: s for s in OBJECT_SOURCES}
#: HTTP connections the client may keep open to the API server (a watch holds one).
CONNECTIONS = 32
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0


class Gone(Exception):
    """The resourceVersion we asked from is too old: list again."""


class NotServed(Exception):
    """The server serves none of a kind's API versions to us (404 / 403)."""


def object_key(kind: str, obj: Mapping[str, Any]) -> str | None:
    """`name` of a node or a cluster-scoped object, `namespace/name` of a pod or another
    namespaced object (None when the object has no name)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    if kind == PODS:
        return f"{meta.get('namespace') or 'default'}/{meta['name']}"
    if kind != NODES and isinstance(meta.get("namespace"), str) and meta["namespace"]:
        return f"{meta['namespace']}/{meta['name']}"
    return str(meta["name"])


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(rv) if rv else None


class ClusterCache:
    """Node and Pod objects (and the watched queue objects, by `ObjectSource.key`) by key,
    as lists and watches last reported them (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in KINDS}
        self._listed: set[str] = set()
        self._on_delete: list[Callable[[str, str], None]] = []
        self.resource_versions: dict[str, str | None] = dict.fromkeys(KINDS)
        #: moves on every change of any object (and on every relist)
        self.version = 0

    @property
    def synced(self) -> bool:
        """Both kinds have been listed at least once."""
        with self._lock:
            return set(KINDS) <= self._listed

    def on_delete(self, callback: Callable[[str, str], None]) -> None:
        """Call `callback(kind, key)` after an object of `kind` is deleted."""
        self._on_delete.append(callback)

    def replace(self, kind: str, items: list[Any], resource_version: str | None) -> None:
        """A fresh list of `kind`: it replaces every object of that kind."""
        fresh: dict[str, dict[str, Any]] = {}
        for item in items:
            key = object_key(kind, item) if isinstance(item, dict) else None
            if key is not None:
                fresh[key] = item
        with self._lock:
            gone = set(self._objects.get(kind, {})) - set(fresh)
            self._objects[kind] = fresh
            self._listed.add(kind)
            self.resource_versions[kind] = resource_version
            self.version += 1
            self._changed.notify_all()
        for key in sorted(gone):
            self._deleted(kind, key)

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED or BOOKMARK) of `kind`."""
        rv = _resource_version(obj)
        if event_type == "BOOKMARK":
            with self._lock:
                self.resource_versions[kind] = rv or self.resource_versions.get(kind)
            return
        key = object_key(kind, obj)
        if key is None:
            log.warning("ignoring a %s %s event without metadata.name", kind, event_type)
            return
        with self._lock:
            if event_type == "DELETED":
                self._objects.get(kind, {}).pop(key, None)
            elif event_type in ("ADDED", "MODIFIED"):
                self._objects.setdefault(kind, {})[key] = dict(obj)
            else:
                log.warning("ignoring a %s event of unknown type %r", kind, event_type)
                return
            self.resource_versions[kind] = rv or self.resource_versions.get(kind)
            self.version += 1
            self._changed.notify_all()
        if event_type == "DELETED":
            self._deleted(kind, key)

    def _deleted(self, kind: str, key: str) -> None:
        for callback in self._on_delete:
            callback(kind, key)

    def wait(self, predicate: Callable[[ClusterCache], bool], timeout_s: float) -> bool:
        """Block until `predicate(self)` holds (checked after every change) or the timeout
        passes; whether it holds. For callers that must see a given state first."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout_s)

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        """The cached object of `kind` named `key`."""
        with self._lock:
            return self._objects.get(kind, {}).get(key)

    def lists(self) -> tuple[dict[str, Any], dict[str, Any], int]:
        """(NodeList, PodList, version) of one consistent moment."""
        with self._lock:
            out = [{"kind": LIST_KINDS[k], "apiVersion": "v1",
                    "items": list(self._objects[k].values())} for k in KINDS]
            return out[0], out[1], self.version

    def queue_objects(self) -> tuple[list[dict[str, Any]] | None, int]:
        """(every watched queue / priority / topology / pod-group object, or None when no
        such kind has been listed; the version), of one consistent moment."""
        with self._lock:
            listed = [k for k in self._listed if k not in KINDS]
            if not listed:
                return None, self.version
            return [o for k in sorted(listed) for o in self._objects[k].values()], \
                self.version


@dataclass
class WatchOptions:
    """How the watcher talks to the API server."""

    #: the server ends each watch after this long (client-go picks 5-10 minutes)
    timeout_s: int = 300
    #: objects per list page
    page_size: int = 500
    #: also list and watch the queue objects (`OBJECT_SOURCES`)
    objects: bool = True


class Watcher:
    """Threads that list and watch Nodes, Pods and (with `options.objects`) the queue
    objects into a `ClusterCache` (module doc)."""

    def __init__(self, cache: ClusterCache, api: Any, options: WatchOptions | None = None
                 ) -> None:
        self.cache = cache
        self.api = api
        self.options = options or WatchOptions()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._custom: Any = None
        #: the API version each object kind is served at, once found
        self.versions: dict[str, str] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds this watcher lists and watches."""
        return KINDS + (tuple(SOURCES) if self.options.objects else ())

    def start(self) -> None:
        """Start one daemon thread per kind."""
        for kind in self.kinds:
            t = threading.Thread(target=self.run, args=(kind,), name=f"gpuplan-watch-{kind}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, wait_s: float = 1.0) -> None:
        """Ask the threads to stop; they end after the watch request in flight returns."""
        self._stop.set()
        for t in self._threads:
            t.join(wait_s)

    @property
    def stopped(self) -> bool:
        """Whether `stop` was called."""
        return self._stop.is_set()

    def run(self, kind: str) -> None:
        """List and watch `kind` until stopped (relist on 410 Gone, back off on errors)."""
        backoff = BACKOFF_MIN_S
        told = False
        while not self._stop.is_set():
            try:
                rv = self.list_into_cache(kind)
                backoff = BACKOFF_MIN_S
                while not self._stop.is_set():
                    rv = self.watch_once(kind, rv)
            except Gone:
                log.info("%s: resourceVersion expired (410 Gone); listing again", kind)
            except NotServed as e:
                if not told:  # an optional kind: say it once, look again now and then
                    log.info("%s is not read: %s; asking again every %.0f s", kind, e,
                             BACKOFF_MAX_S)
                    told = True
                self._stop.wait(BACKOFF_MAX_S)
            except Exception as e:  # any client or network failure: back off, list again
                log.warning("%s: list/watch failed (%s); retrying in %.0f s", kind, e, backoff)
                self._stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _method(self, kind: str) -> tuple[Any, tuple[Any, ...]]:
        """The client method that lists / watches `kind`, and its positional arguments."""
        source = SOURCES.get(kind)
        if source is None:
            return getattr(self.api, LIST_METHODS[kind]), ()
        if self._custom is None:
            from kubernetes import client

            self._custom = client.CustomObjectsApi(self.api.api_client)
        version = self.versions.get(kind, source.versions[0])
        return self._custom.list_cluster_custom_object, (source.group, version,
                                                         source.plural)

    def _call(self, kind: str, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        selector = FIELD_SELECTORS.get(kind)
        if selector:
            kwargs["field_selector"] = selector
        source = SOURCES.get(kind)
        tried = [self.versions[kind]] if kind in self.versions else \
            list(source.versions) if source is not None else [""]
        for version in tried:
            if source is not None:
                self.versions[kind] = version
            method, args = self._method(kind)
            try:
                return method(*args, **kwargs)
            except ApiException as e:
                if e.status == GONE:
                    raise Gone(str(e)) from e
                if source is None or e.status not in NOT_SERVED:
                    raise
                self.versions.pop(kind, None)
                last = e
        raise NotServed(f"{last.status} {last.reason} at "
                        f"{', '.join(source.group + '/' + v for v in tried)}"
                        if source is not None else "") from last

    def _stamp(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """A queue object with its `kind` and `apiVersion` (list items lack them)."""
        source = SOURCES.get(kind)
        if source is not None and ("kind" not in obj or "apiVersion" not in obj):
            obj = {**obj, "kind": source.kind,
                   "apiVersion": f"{source.group}/{self.versions.get(kind, '')}"}
        return obj

    def list_into_cache(self, kind: str) -> str | None:
        """List every object of `kind` (paginated) into the cache; the list's version."""
        items: list[Any] = []
        token: str | None = None
        rv: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.options.page_size,
                                      "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            resp = self._call(kind, **kwargs)
            page = json.loads(resp.data)
            items.extend(self._stamp(kind, i) if isinstance(i, dict) else i
                         for i in page.get("items") or [])
            meta = page.get("metadata") or {}
            rv = rv or meta.get("resourceVersion")
            token = meta.get("continue")
            if not token:
                break
        self.cache.replace(kind, items, rv)
        log.info("%s: listed %d objects at resourceVersion %s", kind, len(items), rv)
        return rv

    def events(self, kind: str, resource_version: str | None) -> Iterator[dict[str, Any]]:
        """The events of one watch request from `resource_version` (raises Gone on 410)."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        w = watch.Watch()
        method, args = self._method(kind)
        kwargs: dict[str, Any] = {"timeout_seconds": self.options.timeout_s,
                                  "allow_watch_bookmarks": True,
                                  "_request_timeout": self.options.timeout_s + 30}
        if FIELD_SELECTORS.get(kind):
            kwargs["field_selector"] = FIELD_SELECTORS[kind]
        if resource_version:
            kwargs["resource_version"] = resource_version
        try:
            for event in w.stream(method, *args, **kwargs):
                yield event
                if self._stop.is_set():
                    w.stop()
        except ApiException as e:
            if e.status == GONE:
                raise Gone(str(e)) from e
            raise

    def watch_once(self, kind: str, resource_version: str | None) -> str | None:
        """Apply the events of one watch request; the last resourceVersion seen."""
        rv = resource_version
        for event in self.events(kind, rv):
            raw = event.get("raw_object")
            if not isinstance(raw, dict):
                continue
            event_type = str(event.get("type"))
            self.cache.apply(kind, event_type,
                             raw if event_type == "BOOKMARK" else self._stamp(kind, raw))
            rv = _resource_version(raw) or rv
        return rv


def make_api(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A CoreV1Api: in-cluster config (service account) when running in a pod and no
    kubeconfig is named, else the kubeconfig (`kubeconfig`, $KUBECONFIG, ~/.kube/config)."""
    import os

    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(config_file=kubeconfig, context=context,
                                client_configuration=cfg)
    # One open watch per kind, plus lists and bindings: more than urllib3's default pool.
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, CONNECTIONS)
    return client.CoreV1Api(client.ApiClient(cfg))


class BindError(Exception):
    """The API server refused a Binding; the message says why."""


def bind_pod(api: Any, namespace: str, name: str, uid: str | None, node: str) -> None:
    """Bind pod `namespace/name` (of `uid`, when given) to `node` with a v1 Binding, as
    kube-scheduler's default binder does; raises BindError when the server refuses."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))
    try:
        # The pods/binding subresource, as kube-scheduler uses. The answer is a Status,
        # which the generated client cannot read as a V1Binding: it is not parsed.
        api.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
    except ApiException as e:
        raw = e.body.decode(errors="replace") if isinstance(e.body, bytes) else str(e.body or "")
        try:
            detail = str(json.loads(raw).get("message") or raw)
        except (ValueError, AttributeError):
            detail = raw
        raise BindError(f"{e.status} {e.reason}: {detail[:300]}") from e
    except HTTPError as e:  # connection refused, timeout: the API server is unreachable
        raise BindError(str(e)) from e
