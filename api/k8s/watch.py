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
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0


class Gone(Exception):
    """The resourceVersion we asked from is too old: list again."""


def object_key(kind: str, obj: Mapping[str, Any]) -> str | None:
    """`name` of a node, `namespace/name` of a pod (None when the object has no name)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    if kind == PODS:
        return f"{meta.get('namespace') or 'default'}/{meta['name']}"
    return str(meta["name"])


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(rv) if rv else None


class ClusterCache:
    """Node and Pod objects by key, as lists and watches last reported them (thread-safe)."""

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
            return self._listed == set(KINDS)

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
            gone = set(self._objects[kind]) - set(fresh)
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
                self.resource_versions[kind] = rv or self.resource_versions[kind]
            return
        key = object_key(kind, obj)
        if key is None:
            log.warning("ignoring a %s %s event without metadata.name", kind, event_type)
            return
        with self._lock:
            if event_type == "DELETED":
                self._objects[kind].pop(key, None)
            elif event_type in ("ADDED", "MODIFIED"):
                self._objects[kind][key] = dict(obj)
            else:
                log.warning("ignoring a %s event of unknown type %r", kind, event_type)
                return
            self.resource_versions[kind] = rv or self.resource_versions[kind]
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
            return self._objects[kind].get(key)

    def lists(self) -> tuple[dict[str, Any], dict[str, Any], int]:
        """(NodeList, PodList, version) of one consistent moment."""
        with self._lock:
            out = [{"kind": LIST_KINDS[k], "apiVersion": "v1",
                    "items": list(self._objects[k].values())} for k in KINDS]
            return out[0], out[1], self.version


@dataclass
class WatchOptions:
    """How the watcher talks to the API server."""

    #: the server ends each watch after this long (client-go picks 5-10 minutes)
    timeout_s: int = 300
    #: objects per list page
    page_size: int = 500


class Watcher:
    """Threads that list and watch Nodes and Pods into a `ClusterCache` (module doc)."""

    def __init__(self, cache: ClusterCache, api: Any, options: WatchOptions | None = None
                 ) -> None:
        self.cache = cache
        self.api = api
        self.options = options or WatchOptions()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start one daemon thread per kind."""
        for kind in KINDS:
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
        while not self._stop.is_set():
            try:
                rv = self.list_into_cache(kind)
                backoff = BACKOFF_MIN_S
                while not self._stop.is_set():
                    rv = self.watch_once(kind, rv)
            except Gone:
                log.info("%s: resourceVersion expired (410 Gone); listing again", kind)
            except Exception as e:  # any client or network failure: back off, list again
                log.warning("%s: list/watch failed (%s); retrying in %.0f s", kind, e, backoff)
                self._stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _call(self, kind: str, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        method = getattr(self.api, LIST_METHODS[kind])
        selector = FIELD_SELECTORS[kind]
        if selector:
            kwargs["field_selector"] = selector
        try:
            return method(**kwargs)
        except ApiException as e:
            if e.status == GONE:
                raise Gone(str(e)) from e
            raise

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
            items.extend(page.get("items") or [])
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
        method = getattr(self.api, LIST_METHODS[kind])
        kwargs: dict[str, Any] = {"timeout_seconds": self.options.timeout_s,
                                  "allow_watch_bookmarks": True,
                                  "_request_timeout": self.options.timeout_s + 30}
        if FIELD_SELECTORS[kind]:
            kwargs["field_selector"] = FIELD_SELECTORS[kind]
        if resource_version:
            kwargs["resource_version"] = resource_version
        try:
            for event in w.stream(method, **kwargs):
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
            self.cache.apply(kind, str(event.get("type")), raw)
            rv = _resource_version(raw) or rv
        return rv


def make_api(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A CoreV1Api: in-cluster config (service account) when running in a pod and no
    kubeconfig is named, else the kubeconfig (`kubeconfig`, $KUBECONFIG, ~/.kube/config)."""
    import os

    from kubernetes import client, config

    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.CoreV1Api(client.ApiClient(cfg))
    api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
    return client.CoreV1Api(api_client)


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
