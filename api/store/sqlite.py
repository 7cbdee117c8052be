"""SQLite backend of the solve store: one embedded file, the default for one process.

One connection in WAL mode, used by one thread at a time (calls run on a single-thread
executor, in submission order). Several processes may share the file on one host; the lease
and cancel rules work the same as on PostgreSQL.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from api.store.base import StoreError
from api.store.sql import SqlStore


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
                                       isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
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

    def _close_connections(self) -> None:
        with self._lock:
            self._db.close()
