"""Slow: kill -9 cycles of random replicas under a load of async solves, and the latency the
PostgreSQL store adds per solve request. Run with `-m slow -s` to see the figures."""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.pool import TaskState
from api.store import SolveRecord, open_store
from tests.api.conftest import wait_for
from tests.api.store.conftest import PgServer
from tests.api.store.test_replicas import replica
from tests.api.test_service import submit, tiny

pytestmark = pytest.mark.slow

CYCLES = 20


def _poll(clients: list[httpx.Client], ids: list[str], done: dict[str, Any],
          states: dict[str, str]) -> None:
    """Read every solve on some live replica; remember each plan the first time it is done."""
    for i, solve_id in enumerate(ids):
        c = clients[i % len(clients)]
        r = c.get(f"/v1/solves/{solve_id}")
        assert r.status_code == 200, f"{solve_id}: {r.status_code} {r.text}"  # never lost
        body = r.json()
        states[solve_id] = body["state"]
        if body["state"] == "done":
            done.setdefault(solve_id, (body["plan"], body["finished_at"]))


def test_no_finished_result_is_lost_over_kill_cycles(pg_server: PgServer,
                                                     tmp_path: Path) -> None:
    rng = random.Random(20)
    url = pg_server.new_database()
    reps = [replica(tmp_path, url, f"r{i}", workers=2, queue_size=32).start() for i in (0, 1)]
    ids: list[str] = []
    done: dict[str, Any] = {}
    states: dict[str, str] = {}
    try:
        for _ in range(CYCLES):
            clients = [r.client() for r in reps]
            for _ in range(4):
                ids.append(submit(rng.choice(clients),
                                  tiny("load", time_limit=rng.uniform(0.1, 1.5))))
            time.sleep(rng.uniform(0.2, 1.2))
            _poll(clients, ids, done, states)
            victim = rng.randrange(2)
            proc = reps[victim].proc
            assert proc is not None
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            survivor = clients[1 - victim]
            for _ in range(2):
                ids.append(submit(survivor, tiny("load", time_limit=rng.uniform(0.1, 1.0))))
            _poll([survivor], ids, done, states)
            for c in clients:
                c.close()
            reps[victim].stop(signal.SIGKILL)
            reps[victim].start()
        clients = [r.client() for r in reps]

        def settled() -> bool:
            _poll(clients, ids, done, states)
            return all(s in ("done", "failed", "cancelled") for s in states.values())

        wait_for(settled, timeout=60, interval=0.5)
        final: dict[str, Any] = {}
        _poll(clients, ids, final, states)
        for c in clients:
            c.close()
    finally:
        for r in reps:
            r.stop(signal.SIGKILL)
    lost = [i for i, (plan, finished) in done.items() if final.get(i) != (plan, finished)]
    counts = {s: sum(1 for v in states.values() if v == s) for s in ("done", "failed")}
    print(f"\nkill -9 cycles: {CYCLES}; solves submitted: {len(ids)}; done: {counts['done']}; "
          f"failed (owner killed): {counts['failed']}; finished results lost: {len(lost)}")
    assert lost == []
    assert len(states) == len(ids)


def _percentiles(xs: list[float]) -> str:
    qs = statistics.quantiles(xs, n=100)
    return f"p50 {statistics.median(xs) * 1e3:.2f} ms, p90 {qs[89] * 1e3:.2f} ms"


def test_store_latency_per_solve_request(pg_server: PgServer, tmp_path: Path) -> None:
    """The store calls of one async solve (write queued, running, done; one read), timed
    directly on each backend; then POST + GET over HTTP on a server per backend."""
    n = 300
    per_backend: dict[str, list[float]] = {}
    for name, url in (("sqlite", f"sqlite:///{tmp_path / 'lat.db'}"),
                      ("postgresql", pg_server.new_database())):
        store = open_store(url)
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            rec = SolveRecord(id=f"s{i}", request_hash="h" * 64, state=TaskState.queued,
                              backend="auto", created_at=time.time(), owner="me")
            store.put(rec)
            store.put(SolveRecord(**{**_fields(rec), "state": TaskState.running}))
            store.put(SolveRecord(**{**_fields(rec), "state": TaskState.done,
                                     "plan_json": "{}", "finished_at": time.time()}))
            store.get(rec.id)
            times.append(time.perf_counter() - t0)
        store.close()
        per_backend[name] = times
        print(f"\nstore calls per solve ({name}, {n} solves): {_percentiles(times)}")
    added = statistics.median(per_backend["postgresql"]) - statistics.median(
        per_backend["sqlite"])
    print(f"PostgreSQL minus SQLite, store calls per solve, p50: {added * 1e3:.2f} ms")

    for name in ("sqlite", "postgresql"):
        url = (f"sqlite:///{tmp_path / 'http.db'}" if name == "sqlite"
               else pg_server.new_database())
        server = replica(tmp_path, url, name, queue_size=64)
        server.start()
        try:
            with server.client() as c:
                posts, gets = [], []
                for _ in range(100):
                    t0 = time.perf_counter()
                    solve_id = submit(c, tiny("lat", time_limit=0.01))
                    posts.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    assert c.get(f"/v1/solves/{solve_id}").status_code == 200
                    gets.append(time.perf_counter() - t0)
                    wait_for(lambda: _state(c, solve_id) == "done")  # noqa: B023
        finally:
            server.stop()
        print(f"HTTP {name}: POST /v1/solves {_percentiles(posts)}; "
              f"GET /v1/solves/id {_percentiles(gets)}")


def _state(c: httpx.Client, solve_id: str) -> str:
    state: str = c.get(f"/v1/solves/{solve_id}").json()["state"]
    return state


def _fields(rec: SolveRecord) -> dict[str, Any]:
    return {f: getattr(rec, f) for f in rec.__dataclass_fields__}
