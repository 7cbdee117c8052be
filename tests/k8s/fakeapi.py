"""A small Kubernetes API server for tests: list and watch of Nodes and Pods on 127.0.0.1.

It speaks the wire protocol the official client uses (`GET /api/v1/nodes`,
`GET /api/v1/pods`, `?limit=&continue=` pages, `?watch=true&resourceVersion=` streams of
JSON lines sent chunked, `POST /api/v1/namespaces/<ns>/pods/<name>/binding`), from an
event log the test writes (a Binding writes a MODIFIED event of the pod): every `add` / `modify` /
`delete` gets the next resourceVersion and wakes the open watches. `compact` forgets the
log up to now, so a watch from an older version gets the server's `410 Gone` (an ERROR
event whose Status has code 410, as the real server sends it), and `drop_watches` ends
the open watches (as the server's timeout does). Every request's path and query is kept
in `requests`.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

PATHS = {"/api/v1/nodes": "nodes", "/api/v1/pods": "pods"}
LIST_KINDS = {"nodes": "NodeList", "pods": "PodList"}


def key_of(kind: str, obj: dict[str, Any]) -> str:
    """`name` of a node or a cluster-scoped object, `namespace/name` of a pod or another
    namespaced object."""
    meta = obj["metadata"]
    if kind == "pods" or (kind != "nodes" and meta.get("namespace")):
        return f"{meta.get('namespace', 'default')}/{meta['name']}"
    return str(meta["name"])


class FakeApiServer:
    """The event log, the objects it leads to, and the HTTP server that serves both."""

    def __init__(self, served: dict[str, str] | None = None) -> None:
        """`served`: extra paths (`/apis/<group>/<version>/<plural>`) -> kind, beside
        Nodes and Pods; every other path answers 404."""
        self.cond = threading.Condition()
        self.rv = 100
        self.paths = {**PATHS, **(served or {})}
        kinds = set(self.paths.values())
        self.objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in kinds}
        self.log: dict[str, list[tuple[int, str, dict[str, Any]]]] = {k: [] for k in kinds}
        self.compacted = dict.fromkeys(kinds, 0)
        self.generation = 0
        self.closing = False
        self.requests: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The server's base URL."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        """Serve in a background thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """End every watch and stop serving."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig that points at this server."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": "test-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "test"}}],
        }))
        return path

    # ------------------------------------------------------------------ the event log
    def _record(self, kind: str, event: str, obj: dict[str, Any]) -> int:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        key = key_of(kind, obj)
        if event == "DELETED":
            self.objects[kind].pop(key, None)
        else:
            self.objects[kind][key] = obj
        self.log[kind].append((self.rv, event, obj))
        self.cond.notify_all()
        return self.rv

    def add(self, kind: str, obj: dict[str, Any]) -> int:
        """An ADDED event; the new resourceVersion."""
        with self.cond:
            return self._record(kind, "ADDED", obj)

    def modify(self, kind: str, obj: dict[str, Any]) -> int:
        """A MODIFIED event; the new resourceVersion."""
        with self.cond:
            return self._record(kind, "MODIFIED", obj)

    def delete(self, kind: str, key: str) -> int:
        """A DELETED event of the object named `key`."""
        with self.cond:
            return self._record(kind, "DELETED", self.objects[kind][key])

    def compact(self, kind: str) -> None:
        """Forget the log up to now: watches from older versions get 410 Gone."""
        with self.cond:
            self.compacted[kind] = self.rv
            self.log[kind] = []

    def drop_watches(self) -> None:
        """End the open watches (clients resume from their last resourceVersion)."""
        with self.cond:
            self.generation += 1
            self.cond.notify_all()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the log: changes made inside reach watchers together, afterwards."""
        with self.cond:
            yield

    def count(self, path: str, *, watch: bool) -> int:
        """How many list (watch False) or watch requests were made of `path`."""
        return sum(1 for r in self.requests if r.split("?")[0] == path
                   and ("watch=true" in r.lower() or "watch=1" in r) == watch)

    # ------------------------------------------------------------------ answers
    def bind(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A v1 Binding: 404 for an unknown pod, 409 for a bound one, else 201."""
        key = f"{namespace}/{name}"
        with self.cond:
            pod = self.objects["pods"].get(key)
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            if pod["spec"].get("nodeName"):
                return 409, _status(409, "Conflict", f"pod {name} is already assigned to "
                                                     f"node {pod['spec']['nodeName']!r}")
            uid = (body.get("metadata") or {}).get("uid")
            if uid and uid != pod["metadata"].get("uid"):
                return 409, _status(409, "Conflict", "the UID in the precondition differs")
            bound = copy.deepcopy(pod)
            bound["spec"]["nodeName"] = body["target"]["name"]
            self._record("pods", "MODIFIED", bound)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                     "status": "Success", "code": 201}

    def list_body(self, kind: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            items = sorted(self.objects[kind].values(), key=lambda o: key_of(kind, o))
            rv = self.rv
            start = 0
            token = query.get("continue")
            if token:
                at, offset = (int(x) for x in token.split(":"))
                if at < self.compacted[kind]:
                    return 410, _status(410, "Expired", "continue token expired")
                start = offset
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start:start + limit]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if start + limit < len(items):
            meta["continue"] = f"{rv}:{start + limit}"
        return 200, {"kind": LIST_KINDS.get(kind, "List"), "apiVersion": "v1", "metadata": meta,
                     "items": page}

    def _woken(self, kind: str, since: int, generation: int) -> bool:
        return self.closing or self.generation != generation or any(
            rv > since for rv, _, _ in self.log[kind])

    def watch_lines(self, kind: str, query: dict[str, str]) -> Iterator[dict[str, Any]]:
        """The events a watch from `resourceVersion` sees, until it ends."""
        since = int(query.get("resourceVersion") or 0)
        with self.cond:
            generation = self.generation
            if since < self.compacted[kind]:
                yield {"type": "ERROR", "object": _status(
                    410, "Expired", f"too old resource version: {since} "
                                    f"({self.compacted[kind]})")}
                return
        while True:
            with self.cond:
                if self.closing or self.generation != generation:
                    return
                fresh = [(rv, t, o) for rv, t, o in self.log[kind] if rv > since]
                if not fresh:
                    self.cond.wait_for(functools.partial(self._woken, kind, since, generation),
                                       timeout=float(query.get("timeoutSeconds") or 30))
                    if self.closing or self.generation != generation:
                        return
                    fresh = [(rv, t, o) for rv, t, o in self.log[kind] if rv > since]
                    if not fresh:
                        return
            for rv, event, obj in fresh:
                since = rv
                yield {"type": event, "object": obj}


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: requests are kept in `api.requests`."""

        def do_GET(self) -> None:
            """List or watch."""
            url = urlparse(self.path)
            api.requests.append(self.path)
            kind = api.paths.get(url.path)
            if kind is None:
                self._json(404, _status(404, "NotFound", f"{url.path} not served"))
                return
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if query.get("watch", "").lower() in ("true", "1"):
                self._watch(kind, query)
            else:
                self._json(*api.list_body(kind, query))

        def do_POST(self) -> None:
            """Bindings."""
            url = urlparse(self.path)
            api.requests.append("POST " + self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            parts = url.path.strip("/").split("/")
            if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] \
                    and parts[4] == "pods" and parts[6] == "binding":
                self._json(*api.bind(parts[3], parts[5], body))
            else:
                self._json(404, _status(404, "NotFound", f"{url.path} not served"))

        def _json(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _watch(self, kind: str, query: dict[str, str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in api.watch_lines(kind, query):
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass  # the client went away
            self.close_connection = True

    return Handler
