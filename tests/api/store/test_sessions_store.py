"""Planning sessions in the store, on both backends (SQLite and a real PostgreSQL): rows
round-trip, a change is written only over the version it was made from (two stores on one
database racing for one version: exactly one wins), delete and expiry, an old file's table."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from api.store import SessionRecord, open_store
from api.store.sql import LATEST
from tests.api.store.test_store import _plan


def _session(sid: str, version: int, updated: float, request: str = '{"jobs": []}'
             ) -> SessionRecord:
    return SessionRecord(sid, 100.0, updated, version, request,
                         _plan(float(version)) if version else None)


def test_sessions_round_trip_version_and_expire(db_url: str) -> None:
    now = time.time()
    store = open_store(db_url)
    store.session_create(_session("s", 0, now))
    store.session_create(_session("old", 0, now - 100))
    store.close()

    store = open_store(db_url)  # as after a restart, or on another replica
    try:
        rec = store.session_get("s")
        assert rec == _session("s", 0, now)
        assert store.session_head("s") == rec.head and rec.head.version == 0
        assert store.session_get("nope") is None and store.session_head("nope") is None

        assert store.session_update(_session("s", 1, now + 1, '{"v": 1}'), 0)
        assert not store.session_update(_session("s", 1, now + 2, '{"lost": 1}'), 0)
        got = store.session_get("s")
        assert got is not None and got.request_json == '{"v": 1}' and got.version == 1
        assert got.plan_json == _plan(1.0) and got.updated_at == now + 1
        assert not store.session_update(_session("nope", 1, now), 0)

        assert store.session_expire(now - 50) == 1  # "old" only
        assert store.session_head("old") is None and store.session_head("s") is not None
        assert store.session_delete("s") and not store.session_delete("s")
        assert store.session_get("s") is None
    finally:
        store.close()


def test_two_replicas_racing_for_one_version_exactly_one_wins(db_url: str) -> None:
    stores = [open_store(db_url), open_store(db_url)]
    try:
        stores[0].session_create(_session("s", 0, 1.0))
        for version in range(1, 21):
            start = threading.Barrier(2)
            won: list[bool] = [False, False]

            def write(i: int, version: int = version, start: threading.Barrier = start,
                      won: list[bool] = won) -> None:
                start.wait()
                won[i] = stores[i].session_update(
                    _session("s", version, float(version), f'{{"by": {i}}}'), version - 1)

            threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert sum(won) == 1, (version, won)
            rec = stores[1].session_get("s")
            assert rec is not None and rec.version == version
            assert rec.request_json == f'{{"by": {won.index(True)}}}'
    finally:
        for s in stores:
            s.close()


def test_an_old_sqlite_session_table_is_kept(tmp_path: Path) -> None:
    """The single-process session store of old made `planning_sessions` in the solves'
    file (schema version 3 then): its rows stay readable after the migration."""
    path = tmp_path / "old.db"
    open_store(f"sqlite:///{path}").close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE planning_sessions")
    db.execute("DELETE FROM schema_version WHERE version > 3")
    db.executescript("""
        CREATE TABLE planning_sessions (id TEXT PRIMARY KEY, created_at REAL NOT NULL,
            updated_at REAL NOT NULL, version INTEGER NOT NULL, request TEXT NOT NULL,
            last_plan TEXT);
        INSERT INTO planning_sessions VALUES ('kept', 1.0, 2.0, 7, '{}', NULL);
    """)
    db.commit()
    db.close()
    store = open_store(f"sqlite:///{path}")
    try:
        assert store.schema_version() == LATEST
        assert store.session_get("kept") == SessionRecord("kept", 1.0, 2.0, 7, "{}", None)
    finally:
        store.close()


def test_changes_append_over_their_version_and_a_whole_write_drops_them(db_url: str) -> None:
    now = time.time()
    store = open_store(db_url)
    try:
        store.session_create(_session("s", 0, now))
        assert store.session_append("s", 0, now + 1, 'E{"events": 1}')
        assert not store.session_append("s", 0, now + 2, "Plost")  # version 1 now
        assert store.session_append("s", 1, now + 3, 'P{"plan": 2}')
        got = store.session_get("s")
        assert got is not None and got.version == 2 and got.updated_at == now + 3
        assert got.pending.splitlines() == ['E{"events": 1}', 'P{"plan": 2}']
        assert got.request_json == '{"jobs": []}'  # the state written whole is untouched
        assert store.session_head("s") == got.head
        assert store.session_update(_session("s", 3, now + 4, '{"v": 3}'), 2)
        got = store.session_get("s")
        assert got is not None and got.pending == "" and got.request_json == '{"v": 3}'
        assert not store.session_append("nope", 0, now, "E{}")
    finally:
        store.close()
