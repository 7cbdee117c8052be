"""The solve store on both backends (SQLite and a real PostgreSQL): records, the forward-only
rule, leases and cancel flags, schema migrations."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.examples import small_mixed_request
from api.pool import TaskState
from api.store import SchemaTooNew, SolveRecord, StoreError, open_store
from api.store.postgres import PostgresStore, redact
from api.store.sql import LATEST, MIGRATIONS
from api.store.sqlite import _wal
from models import Plan, PlanRequest
from tests.api.conftest import REPO

FINAL = (TaskState.done, TaskState.failed, TaskState.cancelled)


def _plan(value: float) -> str:
    return Plan(status="heuristic", solver="fake", objective_value=value).model_dump_json()


def _rec(solve_id: str, state: TaskState, created: float, finished: float | None = None,
         owner: str = "a", value: float = 1.5) -> SolveRecord:
    return SolveRecord(id=solve_id, request_hash="h" * 64, state=state, backend="auto",
                       created_at=created, finished_at=finished, owner=owner,
                       plan_json=_plan(value) if state != TaskState.queued else None)


def test_records_round_trip_and_expire(db_url: str) -> None:
    now = time.time()
    store = open_store(db_url)
    assert store.ping()
    assert store.put(_rec("old", TaskState.done, now - 100, now - 90))
    assert store.put(_rec("new", TaskState.done, now - 5, now - 1, value=2.25))
    assert store.put(_rec("run", TaskState.running, now - 200))
    store.close()

    store = open_store(db_url)  # as after a restart: nothing lost
    new = store.get("new")
    assert new is not None and new.plan_json is not None and new.owner == "a"
    assert Plan.model_validate_json(new.plan_json).objective_value == 2.25
    assert new.created_at == now - 5 and new.finished_at == now - 1  # full float precision
    assert store.get("missing") is None
    request = PlanRequest.model_validate(small_mixed_request())
    for sid in ("old", "new"):
        store.put_request(sid, request.model_dump_json())
    store.put_request("new", request.model_copy(update={"jobs": []}).model_dump_json())  # once
    assert store.get_request("new") == request
    assert store.get_request("run") is None
    assert store.expire(now - 50) == 1  # "old" only: "run" is live
    assert store.get("old") is None
    assert store.get_request("old") is None and store.get_request("new") == request
    assert [r.id for r in store.recent(10)] == ["new", "run"]
    assert [r.id for r in store.recent(1)] == ["new"]
    store.close()


def test_records_only_move_forward(db_url: str) -> None:
    now = time.time()
    store = open_store(db_url)
    try:
        assert store.put(_rec("s", TaskState.running, now))
        assert not store.put(_rec("s", TaskState.queued, now))  # a late "queued" write
        got = store.get("s")
        assert got is not None and got.state == TaskState.running
        assert store.put(_rec("s", TaskState.done, now, now + 1, value=7.0))
        assert not store.put(_rec("s", TaskState.failed, now, now + 2, owner="b"))
        assert not store.put(_rec("s", TaskState.running, now))
        got = store.get("s")
        assert got is not None and got.state == TaskState.done and got.owner == "a"
        assert got.plan_json is not None
        assert Plan.model_validate_json(got.plan_json).objective_value == 7.0
    finally:
        store.close()


_STATES = st.sampled_from(list(TaskState))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(_STATES, min_size=1, max_size=6))
def test_stored_state_is_the_first_final_write(db_url: str, writes: list[TaskState]) -> None:
    """Whatever order writes arrive in, the stored state never moves back, and the first
    finished write is the one kept."""
    store = open_store(db_url)
    sid = f"h{time.monotonic_ns()}"
    rank = {TaskState.queued: 0, TaskState.running: 1}
    try:
        for i, state in enumerate(writes):
            store.put(_rec(sid, state, 1.0, 2.0 if state in FINAL else None, value=float(i)))
        got = store.get(sid)
        assert got is not None
        first_final = next((i for i, s in enumerate(writes) if s in FINAL), None)
        if first_final is not None:
            assert got.state == writes[first_final]
            assert got.plan_json is not None
            assert Plan.model_validate_json(got.plan_json).objective_value == first_final
        else:
            assert got.state == max(writes, key=lambda s: rank[s])
    finally:
        store.close()


def test_leases_fail_solves_of_dead_owners(db_url: str) -> None:
    now = time.time()
    store = open_store(db_url)
    try:
        store.put(_rec("q", TaskState.queued, now, owner="a"))
        store.put(_rec("r", TaskState.running, now, owner="a"))
        store.put(_rec("mine", TaskState.running, now, owner="b"))
        store.put(_rec("d", TaskState.done, now, now, owner="a"))
        assert store.reap(60.0, "b") == 0  # a's leases are fresh
        assert store.heartbeat("a", {}) == []
        time.sleep(0.05)
        assert store.reap(0.01, "b") == 2  # a stopped beating: b fails its live solves
        for sid in ("q", "r"):
            got = store.get(sid)
            assert got is not None and got.state == TaskState.failed
            assert got.finished_at is not None
            assert got.error is not None and "(a) stopped renewing its lease" in got.error
            assert "marked failed by replica b" in got.error
        mine = store.get("mine")
        assert mine is not None and mine.state == TaskState.running  # b never reaps itself
        assert store.reap(0.01, "b") == 0
        done = store.get("d")
        assert done is not None and done.state == TaskState.done
    finally:
        store.close()


def test_cancel_flag_and_incumbents_reach_the_owner(db_url: str) -> None:
    now = time.time()
    store = open_store(db_url)
    try:
        store.put(_rec("r", TaskState.running, now, owner="a"))
        store.put(_rec("other", TaskState.running, now, owner="b"))
        store.put(_rec("d", TaskState.done, now, now, owner="a"))
        assert store.heartbeat("a", {"r": _plan(3.0), "d": _plan(9.0)}) == []
        r = store.get("r")
        assert r is not None and r.plan_json is not None
        assert Plan.model_validate_json(r.plan_json).objective_value == 3.0
        d = store.get("d")
        assert d is not None and d.plan_json is not None
        assert Plan.model_validate_json(d.plan_json).objective_value == 1.5  # final: kept
        assert store.request_cancel("r")
        assert not store.request_cancel("d")
        assert not store.request_cancel("missing")
        assert store.heartbeat("b", {}) == []
        assert store.heartbeat("a", {}) == ["r"]
        store.put(_rec("r", TaskState.cancelled, now, now, owner="a"))
        assert store.heartbeat("a", {}) == []
    finally:
        store.close()


def test_schema_is_versioned_and_a_newer_one_is_refused(db_url: str) -> None:
    store = open_store(db_url)
    assert store.schema_version() == LATEST
    store.close()
    store = open_store(db_url)  # reopening migrates nothing
    assert store.schema_version() == LATEST
    rows, _ = store._run("SELECT COUNT(*) FROM schema_version")  # type: ignore[attr-defined]
    assert rows[0][0] == len(MIGRATIONS)
    store._run("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)",  # type: ignore[attr-defined]
               (LATEST + 1,))
    store.close()
    with pytest.raises(SchemaTooNew) as info:
        open_store(db_url)
    message = str(info.value)
    assert "\n" not in message
    assert f"schema version {LATEST + 1}, newer than the {LATEST}" in message
    assert "upgrade gpuplan" in message


def test_replicas_starting_together_migrate_once(db_url: str) -> None:
    with ThreadPoolExecutor(4) as ex:
        stores = list(ex.map(lambda _: open_store(db_url), range(4)))
    try:
        assert {s.schema_version() for s in stores} == {LATEST}
        rows, _ = stores[0]._run(  # type: ignore[attr-defined]
            "SELECT version FROM schema_version ORDER BY version")
        assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
    finally:
        for s in stores:
            s.close()


def test_serve_refuses_a_newer_schema_in_one_line(db_url: str, tmp_path: Path) -> None:
    store = open_store(db_url)
    store._run("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)",  # type: ignore[attr-defined]
               (LATEST + 5,))
    store.close()
    r = subprocess.run(
        [sys.executable, "-m", "api.cli", "serve", "--port", "1"], cwd=REPO, timeout=120,
        capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "GPUPLAN_DB_URL": db_url, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"schema version {LATEST + 5}" in lines[0] and "refusing to start" in lines[0]
    assert "Traceback" not in r.stderr + r.stdout


def test_an_old_single_process_sqlite_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE solves (id TEXT PRIMARY KEY, request_hash TEXT NOT NULL,
            state TEXT NOT NULL, backend TEXT NOT NULL, created_at REAL NOT NULL,
            started_at REAL, finished_at REAL, plan TEXT, error TEXT);
        CREATE INDEX solves_created ON solves (created_at);
    """)
    db.execute("INSERT INTO solves VALUES ('x', 'h', 'done', 'cpsat', 1.0, 2.0, 3.0, ?, NULL)",
               (_plan(4.0),))
    db.execute("INSERT INTO solves VALUES ('y', 'h', 'running', 'cpsat', 1.0, 2.0, NULL, NULL, "
               "NULL)")
    db.commit()
    db.close()
    store = open_store(f"sqlite:///{path}")
    try:
        assert store.schema_version() == LATEST
        x = store.get("x")
        assert x is not None and x.state == TaskState.done and x.owner is None
        assert store.reap(60.0, "new") == 1  # "y" has no lease at all: its process is gone
        y = store.get("y")
        assert y is not None and y.state == TaskState.failed
    finally:
        store.close()


def test_bad_urls_fail_in_one_line(tmp_path: Path) -> None:
    for url in ("mysql://x/y", "sqlite://relative", "nothing"):
        with pytest.raises(StoreError, match="must be sqlite:///PATH or postgresql://"):
            open_store(url)
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot open sqlite:///"):
        open_store(f"sqlite:///{tmp_path / 'file' / 'sub' / 'x.db'}")
    from tests.api.conftest import free_port

    url = f"postgresql://u:hunter2@127.0.0.1:{free_port()}/db"
    with pytest.raises(StoreError) as info:
        PostgresStore(url, connect_timeout_s=1)
    assert "hunter2" not in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("cannot connect to postgresql://u@127.0.0.1:")
    assert redact(url) == url.replace(":hunter2", "")


def test_connections_opening_a_new_sqlite_file_together_all_switch_to_wal(tmp_path: Path
                                                                          ) -> None:
    """SQLite refuses the switch to WAL at once ("database is locked") to a connection
    that would deadlock waiting for it; the store tries again instead of failing."""
    def connect(path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                             timeout=30)
        _wal(db)
        return db

    for i in range(20):
        path = tmp_path / f"s{i}.db"
        with ThreadPoolExecutor(8) as ex:
            dbs = list(ex.map(lambda _, p=path: connect(p), range(8)))
        assert {db.execute("PRAGMA journal_mode").fetchone()[0] for db in dbs} == {"wal"}
        for db in dbs:
            db.close()
