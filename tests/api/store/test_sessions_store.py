"""Planning sessions in the store, on both backends (SQLite and a real PostgreSQL): rows
round-trip, a change is written only over the version it was made from (two stores on one
database racing for one version: exactly one wins), delete and expiry, an old file's table."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from api.store import SessionRecord, open_store, sql
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


def _race(call: Callable[[int], bool]) -> list[bool]:
    """`call(0)` and `call(1)` started at once in two threads (a barrier): their results."""
    start = threading.Barrier(2)
    won = [False, False]

    def run(i: int) -> None:
        start.wait()
        won[i] = call(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return won


def test_two_replicas_racing_for_one_version_exactly_one_wins(db_url: str) -> None:
    """Whole writes, then appended changes: of two at once over one version, one wins."""
    stores = [open_store(db_url), open_store(db_url)]
    try:
        stores[0].session_create(_session("s", 0, 1.0))
        for version in range(1, 21):  # whole writes
            won = _race(lambda i, v=version: stores[i].session_update(
                _session("s", v, float(v), f'{{"by": {i}}}'), v - 1))
            assert sum(won) == 1, (version, won)
            rec = stores[1].session_get("s")
            assert rec is not None and rec.version == version
            assert rec.request_json == f'{{"by": {won.index(True)}}}'
        for version in range(21, 41):  # changes appended: one wins, one row each
            won = _race(lambda i, v=version: stores[i].session_append(
                "s", v - 1, float(v), f"E{{\"by\": {i}}}"))
            assert sum(won) == 1, (version, won)
            rec = stores[0].session_get("s")
            assert rec is not None and rec.version == version
            lines = rec.pending.splitlines()
            assert len(lines) == version - 20 and lines[-1] == f'E{{"by": {won.index(True)}}}'
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


def test_a_fold_writes_the_state_at_a_version_and_keeps_the_later_changes(db_url: str
                                                                         ) -> None:
    """Each change is a row of its own; a fold writes the state whole at a version already
    reached (the head is not touched) and drops the changes up to it only, and never goes
    back to an older version."""
    store = open_store(db_url)
    try:
        store.session_create(_session("s", 0, 1.0))
        for v in range(4):
            assert store.session_append("s", v, 2.0 + v, f"E{v}")
        assert store.session_fold("s", 2, '{"at": 2}', _plan(2.0))
        got = store.session_get("s")
        assert got is not None and got.version == 4 and got.updated_at == 5.0
        assert got.request_json == '{"at": 2}' and got.plan_json == _plan(2.0)
        assert got.pending.splitlines() == ["E2", "E3"]  # versions 3 and 4
        assert not store.session_fold("s", 1, '{"at": 1}', None)  # older: nothing written
        assert store.session_append("s", 4, 6.0, "E4")
        assert store.session_get("s") == SessionRecord("s", 100.0, 6.0, 5, '{"at": 2}',
                                                       _plan(2.0), "E2\nE3\nE4\n")
        assert store.session_delete("s")
        assert not store.session_fold("s", 9, "{}", None)
        store.session_create(_session("s", 0, 1.0))  # nothing of the deleted one is left
        assert store.session_get("s") == _session("s", 0, 1.0)
    finally:
        store.close()


def test_a_schema_5_store_upgrades_in_place_and_keeps_its_sessions(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store made by the previous schema (the state and the changes appended since in
    one row) is migrated in place: its sessions read the same, take new changes, expire."""
    with monkeypatch.context() as m:
        m.setattr(sql, "MIGRATIONS", sql.MIGRATIONS[:5])
        m.setattr(sql, "LATEST", 5)
        old = open_store(db_url)
        try:
            for sid, updated in (("kept", time.time()), ("stale", 1.0)):
                old._run("INSERT INTO planning_sessions (id, created_at, updated_at, version, "  # type: ignore[attr-defined]
                         "request, last_plan, pending) VALUES (?, 1.0, ?, 3, ?, ?, ?)",
                         (sid, updated, '{"v": 1}', _plan(1.0), "E{}\nP{}\n"))
        finally:
            old.close()
    store = open_store(db_url)
    try:
        assert store.schema_version() == sql.LATEST == 6
        got = store.session_get("kept")
        assert got is not None
        assert (got.version, got.request_json, got.plan_json, got.pending) == \
            (3, '{"v": 1}', _plan(1.0), "E{}\nP{}\n")
        assert store.session_append("kept", 3, got.updated_at + 1, "E[]")
        again = store.session_get("kept")
        assert again is not None and again.pending == "E{}\nP{}\nE[]\n"
        assert store.session_fold("kept", 4, '{"v": 4}', None)
        folded = store.session_get("kept")
        assert folded is not None and (folded.pending, folded.request_json) == ("", '{"v": 4}')
        assert store.session_expire(time.time() - 60) == 1
        assert store.session_get("stale") is None and store.session_head("kept") is not None
    finally:
        store.close()


def test_reads_while_another_store_folds_are_whole(db_url: str) -> None:
    """A read meets folds on another connection (each drops the changes it wrote into the
    state): every read is still one version's state and exactly the changes after it."""
    writer, reader = open_store(db_url), open_store(db_url)
    try:
        writer.session_create(_session("s", 0, 1.0))
        for v in range(1, 31):
            assert writer.session_append("s", v - 1, 1.0 + v, f"E{v}")
        done = threading.Event()

        def fold() -> None:
            try:
                for v in range(1, 31):
                    assert writer.session_fold("s", v, f'{{"at": {v}}}', None)
            finally:
                done.set()

        folding = threading.Thread(target=fold)
        folding.start()
        reads = 0
        while not done.is_set() or reads == 0:
            rec = reader.session_get("s")
            assert rec is not None and rec.version == 30
            base = 0 if rec.request_json == '{"jobs": []}' else \
                int(rec.request_json.removeprefix('{"at": ').removesuffix("}"))
            assert rec.pending.splitlines() == [f"E{v}" for v in range(base + 1, 31)]
            reads += 1
        folding.join(30)
        final = reader.session_get("s")
        assert final is not None and (final.request_json, final.pending) == ('{"at": 30}', "")
    finally:
        writer.close()
        reader.close()
