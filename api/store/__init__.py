"""Async solve records, planning sessions and the service that runs solves, on SQLite or
PostgreSQL.

`open_store(url)` picks the backend from the URL (`sqlite:///path` or `postgresql://...`)
and migrates its schema; `SolveService` runs solves on the worker pool and writes every
state change to the store, so any replica sharing the database can answer for them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from api.store.base import (
    LIVE_STATES,
    SchemaTooNew,
    SessionHead,
    SessionRecord,
    SolveRecord,
    SolveStore,
    StoreError,
)
from api.store.service import FAILURE_STATUSES, SolveService, expire_periodically

__all__ = [
    "FAILURE_STATUSES",
    "LIVE_STATES",
    "SchemaTooNew",
    "SessionHead",
    "SessionRecord",
    "SolveRecord",
    "SolveService",
    "SolveStore",
    "StoreError",
    "expire_periodically",
    "open_store",
]


def _sqlite(url: str, pool_size: int) -> SolveStore:
    from api.store.sqlite import SqliteStore

    return SqliteStore(Path(url.removeprefix("sqlite:///")))


def _postgres(url: str, pool_size: int) -> SolveStore:
    from api.store.postgres import PostgresStore

    return PostgresStore(url, pool_size=pool_size)


#: Backends by URL scheme.
BACKENDS: dict[str, Callable[[str, int], SolveStore]] = {
    "sqlite": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
}


def open_store(url: str, pool_size: int = 4) -> SolveStore:
    """Open (and migrate) the store at `url`; raises StoreError with a one-line message."""
    scheme, sep, _ = url.partition("://")
    opener = BACKENDS.get(scheme) if sep else None
    if opener is None or (scheme == "sqlite" and not url.startswith("sqlite:///")):
        raise StoreError("database URL must be sqlite:///PATH or postgresql://..., got "
                         f"{url.split('://')[0]}://...")
    return opener(url, pool_size)
