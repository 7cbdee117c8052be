"""Two `gpuplan serve` replicas (real uvicorn on loopback) sharing one real PostgreSQL:
either answers for the other's solves, cancels reach the owner, a killed owner's solves
fail within the lease, and SIGTERM drains a replica without refusing a connection."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, wait_for
from tests.api.store.conftest import PgServer
from tests.api.test_service import submit, tiny

LEASE_S = 2.0


def replica(tmp: Path, db_url: str, name: str, **settings: Any) -> Server:
    """A `gpuplan serve` process on the shared database."""
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    params: dict[str, Any] = {"db_url": db_url, "lease_s": LEASE_S, "kill_grace_s": 0.5,
                              "shutdown_delay_s": 0, "workers": 1, **settings}
    return Server(d, cli=True, **params)


@pytest.fixture(scope="module")
def shared(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, Server, Path]]:
    """One database and replica B on it, for the module; tests start their own A."""
    url = pg_server.new_database()
    tmp = tmp_path_factory.mktemp("replicas")
    b = replica(tmp, url, "b").start()
    yield url, b, tmp
    b.stop()


@pytest.fixture
def replica_a(shared: tuple[str, Server, Path], request: pytest.FixtureRequest
              ) -> Iterator[Server]:
    """Replica A on the shared database (settings by indirect parametrisation)."""
    url, _, tmp = shared
    settings = getattr(request, "param", {})
    a = replica(tmp, url, f"a-{request.node.name}", **settings).start()
    yield a
    a.stop(signal.SIGKILL)


def record(c: httpx.Client, solve_id: str) -> dict[str, Any]:
    r = c.get(f"/v1/solves/{solve_id}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_submit_on_a_poll_and_cancel_on_b_then_kill_a(shared: tuple[str, Server, Path],
                                          replica_a: Server) -> None:
    _, b, _ = shared
    with replica_a.client() as ca, b.client() as cb:
        quick = submit(ca, tiny("quick", time_limit=0.2))
        done_b = wait_for(lambda: (s := record(cb, quick))["state"] == "done" and s)
        done_a = record(ca, quick)
        assert done_b["plan"] == done_a["plan"] and done_b["plan"] is not None
        assert done_b["plan_is_final"] is True and done_b["finished_at"] == done_a["finished_at"]

        running = submit(ca, tiny("long-run", time_limit=30))
        queued = submit(ca, tiny("long-queued", time_limit=30))  # A has one worker
        seen = wait_for(lambda: (s := record(cb, running))["state"] == "running"
                        and s["plan"] is not None and s)  # the owner's best plan so far
        assert seen["plan_is_final"] is False
        assert record(cb, queued)["state"] == "queued"

        r = cb.delete(f"/v1/solves/{queued}")
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
        assert r.json()["started_at"] is None
        r = cb.delete(f"/v1/solves/{running}")
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
        assert r.json()["started_at"] is not None
        assert record(ca, running)["state"] == "cancelled"
        assert cb.delete(f"/v1/solves/{running}").json()["state"] == "cancelled"

        listed = {s["id"]: s["state"] for s in cb.get("/v1/solves").json()["solves"]}
        assert {quick: "done", running: "cancelled", queued: "cancelled"}.items() <= \
            listed.items()
        assert cb.get("/v1/solves/nope").status_code == 404
        assert cb.delete("/v1/solves/nope").status_code == 404

        # SIGKILL the owner mid-solve: B fails the solve once A's lease runs out
        orphan = submit(ca, tiny("long-killed", time_limit=30))
        wait_for(lambda: record(cb, orphan)["state"] == "running")
        assert replica_a.proc is not None
        os.kill(replica_a.proc.pid, signal.SIGKILL)
        failed = wait_for(lambda: (s := record(cb, orphan))["state"] == "failed" and s,
                          timeout=LEASE_S * 4 + 20, interval=0.1)
    assert "stopped renewing its lease for 2 s" in failed["error"]
    assert failed["finished_at"] is not None
    assert record_after_kill_is_final(b, quick, done_b)


def record_after_kill_is_final(b: Server, solve_id: str, before: dict[str, Any]) -> bool:
    """A finished result outlives its owner: B still answers it, unchanged."""
    with b.client() as cb:
        return record(cb, solve_id) == before


class Hammer(threading.Thread):
    """Requests to a draining replica on fresh connections until one fails to connect."""

    def __init__(self, server: Server, solve_id: str) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.solve_id = solve_id
        self.seen: list[tuple[float, str, int | str]] = []  # (time, what, status or error)
        self.stop = threading.Event()

    def run(self) -> None:
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(base_url=self.server.url, timeout=10, limits=limits) as c:
            end = time.monotonic() + 60
            while not self.stop.is_set() and time.monotonic() < end:
                for what, call in (
                    ("readyz", lambda: c.get("/readyz")),
                    ("get", lambda: c.get(f"/v1/solves/{self.solve_id}")),
                    ("post", lambda: c.post("/v1/solves", json=tiny("late"))),
                ):
                    try:
                        status: int | str = call().status_code
                    except httpx.TransportError as e:
                        self.seen.append((time.time(), what, type(e).__name__))
                        return
                    self.seen.append((time.time(), what, status))
                time.sleep(0.02)


@pytest.mark.parametrize("replica_a", [{"workers": 2, "shutdown_grace_s": 6,
                                        "shutdown_delay_s": 1.5}], indirect=True)
def test_sigterm_drains_then_exits(shared: tuple[str, Server, Path],
                                   replica_a: Server) -> None:
    _, b, _ = shared
    with replica_a.client() as ca, b.client() as cb:
        finishing = submit(ca, tiny("finishes", time_limit=2.5))
        hanging = submit(ca, tiny("hang-at-term", time_limit=30))
        wait_for(lambda: all(record(cb, i)["state"] == "running" for i in (finishing, hanging)))
        hammer = Hammer(replica_a, finishing)
        hammer.start()
        assert replica_a.proc is not None
        replica_a.proc.send_signal(signal.SIGTERM)
        code = replica_a.proc.wait(60)
        hammer.join(30)
        done = record(cb, finishing)
        stopped = record(cb, hanging)
    assert code == 0
    assert done["state"] == "done" and done["plan_is_final"] is True
    assert stopped["state"] == "failed"
    assert "did not finish within its 6 s grace period" in stopped["error"]

    seen = hammer.seen
    unready = next(t for t, what, s in seen if what == "readyz" and s == 503)
    errors = [(t, s) for t, _, s in seen if isinstance(s, str)]
    assert errors, "the hammer should see the listener close at the end"
    first_error = errors[0][0]
    # every request until the drain ended got an HTTP answer: new solves 503, reads 200
    assert first_error >= max(done["finished_at"], stopped["finished_at"])
    assert first_error - unready >= 1.5 * 0.9
    answered = [(what, s) for t, what, s in seen if unready <= t < first_error]
    assert ("post", 503) in answered and ("get", 200) in answered
    assert all(s in (200, 503) for _, s in answered)
