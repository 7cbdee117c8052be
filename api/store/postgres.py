"""PostgreSQL backend of the solve store: one database shared by every replica.

psycopg 3 with a `psycopg_pool.ConnectionPool` (autocommit connections; each call borrows
one), and as many executor threads as pooled connections, so concurrent requests do not
wait on each other. Schema migrations take a transaction-scoped advisory lock, so replicas
starting together migrate one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from api.store.base import StoreError
from api.store.sql import SqlStore

T = TypeVar("T")

#: Key of the advisory lock held while migrating (any constant unique to gpuplan).
MIGRATION_LOCK = 0x67707570_6C616E  # "gpuplan"


def redact(url: str) -> str:
    """The URL without its password (and without query parameters), safe to log."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


class PostgresStore(SqlStore):
    """The solve store in a PostgreSQL database (`postgresql://user:pw@host:port/db`)."""

    now_sql = "EXTRACT(EPOCH FROM clock_timestamp())::double precision"
    placeholder = "%s"

    def __init__(self, url: str, pool_size: int = 4, connect_timeout_s: float = 10.0) -> None:
        super().__init__(threads=pool_size)
        self.description = redact(url)
        self._pool = ConnectionPool(
            url, min_size=1, max_size=pool_size, kwargs={"autocommit": True},
            timeout=connect_timeout_s, open=False, name="gpuplan-store",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout_s)
        except PoolTimeout as e:
            self._pool.close()
            raise StoreError(f"cannot connect to {self.description} within "
                             f"{connect_timeout_s:g} s") from e
        try:
            self.migrate()
        except psycopg.Error as e:
            self._pool.close()
            raise StoreError(f"cannot migrate {self.description}: {_one_line(e)}") from e
        except BaseException:
            self._pool.close()
            raise

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[tuple[Any, ...]], int]:
        with self._pool.connection() as conn:
            cur = conn.execute(sql, tuple(params))
            rows = cur.fetchall() if cur.description is not None else []
            return rows, cur.rowcount

    def _migrate_in_transaction(self, step: Callable[[Callable[..., Any]], None]) -> None:
        with self._pool.connection() as conn, conn.transaction():
            def execute(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
                cur = conn.execute(sql, tuple(params))
                return cur.fetchall() if cur.description is not None else []

            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            step(execute)

    def _transaction(self, step: Callable[[Callable[..., tuple[list[tuple[Any, ...]], int]]], T]
                     ) -> T:
        with self._pool.connection() as conn, conn.transaction():
            def execute(sql: str, params: Sequence[Any] = ()
                        ) -> tuple[list[tuple[Any, ...]], int]:
                cur = conn.execute(sql, tuple(params))
                return (cur.fetchall() if cur.description is not None else []), cur.rowcount

            return step(execute)

    def _close_connections(self) -> None:
        self._pool.close()
