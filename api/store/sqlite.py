"""SQLite backend of the solve store: one embedded file, the default for one process.

One connection in WAL mode, used by one thread at a time (calls run on a single-thread
executor, in submission order). Several processes may share the file on one host; the lease
and cancel rules work the same as on PostgreSQL.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from api.store.base import StoreError
from api.store.sql import SqlStore

T = TypeVar("T")

#: How long a connection waits for another's lock (and the switch to WAL mode is tried).
WAIT_S = 30.0


def _wal(db: sqlite3.Connection) -> None:
    """Put the file in WAL mode. Processes opening a new file at the same moment each read
    it and then need its exclusive lock for the switch; SQLite answers `database is locked`
    at once instead of waiting when waiting could deadlock, so the switch is tried again
    (for up to WAIT_S) until one has made it and the others find it done."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class SqliteStore(SqlStore):
    """The solve store in an SQLite file (created with its directory if missing)."""

    now_sql = "((julianday('now') - 2440587.5) * 86400.0)"
    placeholder = "?"

    def __init__(self, path: Path) -> None:
        super().__init__(threads=1)
        self.description = f"sqlite:///{path}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False,
                                       isolation_level=None, timeout=WAIT_S)
            _wal(self._db)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open {self.description}: {e}") from e
        self._lock = threading.Lock()
        self.migrate()

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[tuple[Any, ...]], int]:
        with self._lock:
            cur = self._db.execute(sql, tuple(params))
            return cur.fetchall(), cur.rowcount

    def _migrate_in_transaction(self, step: Callable[[Callable[..., Any]], None]) -> None:
        def execute(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
            return self._db.execute(sql, tuple(params)).fetchall()

        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one migrator at a time across processes
            try:
                step(execute)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _transaction(self, step: Callable[[Callable[..., tuple[list[tuple[Any, ...]], int]]], T]
                     ) -> T:
        def execute(sql: str, params: Sequence[Any] = ()) -> tuple[list[tuple[Any, ...]], int]:
            cur = self._db.execute(sql, tuple(params))
            return cur.fetchall(), cur.rowcount

        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # the write lock at once: no upgrade deadlock
            try:
                out = step(execute)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return out

    def _close_connections(self) -> None:
        with self._lock:
            self._db.close()
