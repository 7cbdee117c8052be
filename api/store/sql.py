"""The SQL both backends share: the versioned schema and the statements of `SolveStore`.

SQLite and PostgreSQL run the same statements; a backend supplies its placeholder style,
its expression for the database clock (Unix seconds) and how to execute. The schema is a
list of migrations; `schema_version` records each one applied, and a replica refuses to
start on a database whose version is newer than the last migration it knows.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from api.pool import TaskState
from api.store.base import SchemaTooNew, SessionHead, SessionRecord, SolveRecord, StoreError
from models import PlanRequest

log = logging.getLogger("gpuplan.store")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step; statements run in one transaction with the version bump."""

    version: int
    summary: str
    statements: tuple[str, ...]


#: The schema, oldest first (version 1 is the single-process SQLite table of old).
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "solves table", (
        """CREATE TABLE IF NOT EXISTS solves (
            id TEXT PRIMARY KEY,
            request_hash TEXT NOT NULL,
            state TEXT NOT NULL,
            backend TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            started_at DOUBLE PRECISION,
            finished_at DOUBLE PRECISION,
            plan TEXT,
            error TEXT
        )""",
        "CREATE INDEX IF NOT EXISTS solves_created ON solves (created_at)",
    )),
    Migration(2, "owner, lease and cancel flag of live solves", (
        "ALTER TABLE solves ADD COLUMN owner TEXT",
        "ALTER TABLE solves ADD COLUMN heartbeat_at DOUBLE PRECISION",
        "ALTER TABLE solves ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX IF NOT EXISTS solves_live ON solves (state, owner)",
    )),
    Migration(3, "the request of each solve (the plan view draws its cluster)", (
        "CREATE TABLE IF NOT EXISTS solve_requests (id TEXT PRIMARY KEY, request TEXT NOT NULL)",
    )),
    # The columns of the table the single-process session store of old created in the
    # SQLite file (IF NOT EXISTS keeps its rows).
    Migration(4, "planning sessions, versioned", (
        """CREATE TABLE IF NOT EXISTS planning_sessions (
            id TEXT PRIMARY KEY,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            version INTEGER NOT NULL,
            request TEXT NOT NULL,
            last_plan TEXT
        )""",
        "CREATE INDEX IF NOT EXISTS planning_sessions_updated ON planning_sessions (updated_at)",
    )),
    Migration(5, "planning sessions: the changes since the state was last written whole", (
        "ALTER TABLE planning_sessions ADD COLUMN pending TEXT NOT NULL DEFAULT ''",
    )),
    # A change rewrote the whole row (the state, megabytes at 16,384 GPUs, with the pending
    # changes growing beside it): the head (version, timestamps) now has its own small row,
    # the state written whole another, and each change a row of its own. A state's
    # `version` counts its `pending` lines (changes appended before this migration, kept).
    Migration(6, "planning sessions: head, state written whole and each change in its own row", (
        """CREATE TABLE IF NOT EXISTS planning_session_states (
            id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            request TEXT NOT NULL,
            last_plan TEXT,
            pending TEXT NOT NULL DEFAULT ''
        )""",
        "INSERT INTO planning_session_states (id, version, request, last_plan, pending) "
        "SELECT id, version, request, last_plan, pending FROM planning_sessions",
        """CREATE TABLE IF NOT EXISTS planning_session_changes (
            session_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            change TEXT NOT NULL,
            PRIMARY KEY (session_id, version)
        )""",
        "ALTER TABLE planning_sessions DROP COLUMN request",
        "ALTER TABLE planning_sessions DROP COLUMN last_plan",
        "ALTER TABLE planning_sessions DROP COLUMN pending",
    )),
)

#: The newest schema version this code knows.
LATEST = MIGRATIONS[-1].version

_COLUMNS = ("id", "request_hash", "state", "backend", "created_at", "started_at",
            "finished_at", "plan", "error", "owner")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM solves"
_LIVE = "('queued', 'running')"
_SESSION_HEAD = ("id", "created_at", "updated_at", "version")
_SESSION_STATE = ("version", "request", "last_plan", "pending")
#: Times `session_get` reads a session again when a fold came between its statements.
READ_TRIES = 10


class SqlStore(ABC):
    """`SolveStore` over a DB-API connection; subclasses say how to connect and execute.

    Statements are written with `?` placeholders and `{now}` for the database clock.
    """

    #: SQL expression of the database's current time in Unix seconds.
    now_sql: str = ""
    #: The backend's placeholder (`?` or `%s`).
    placeholder: str = "?"
    description: str = ""

    def __init__(self, threads: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gpuplan-db")

    # -- backend hooks

    @abstractmethod
    def _execute(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[tuple[Any, ...]], int]:
        """Run one statement in autocommit; (rows, rowcount)."""

    @abstractmethod
    def _migrate_in_transaction(self, step: Callable[[Callable[..., Any]], None]) -> None:
        """Call `step(execute)` inside one exclusive transaction (one migrator at a time)."""

    @abstractmethod
    def _transaction(self, step: Callable[[Callable[..., tuple[list[tuple[Any, ...]], int]]], T]
                     ) -> T:
        """`step(execute)` in one transaction (`execute(sql, params)` -> (rows, rowcount),
        statements as `_execute` takes them): committed when `step` returns, rolled back
        when it raises."""

    @abstractmethod
    def _close_connections(self) -> None:
        """Close the backend's connections."""

    # -- shared

    def _sql(self, sql: str) -> str:
        return sql.replace("{now}", self.now_sql).replace("?", self.placeholder)

    def _run(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[tuple[Any, ...]], int]:
        return self._execute(self._sql(sql), params)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking method on the store's threads."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        """Finish pending calls and close the database."""
        self._executor.shutdown(wait=True)
        self._close_connections()

    def migrate(self) -> int:
        """Create or upgrade the schema to `LATEST`; the version found before.

        Raises SchemaTooNew when the database is newer than this code."""
        found: list[int] = []

        def step(execute: Callable[..., Any]) -> None:
            execute(self._sql("CREATE TABLE IF NOT EXISTS schema_version ("
                              "version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION)"))
            rows = execute(self._sql("SELECT MAX(version) FROM schema_version"))
            current = int(rows[0][0] or 0)
            found.append(current)
            if current > LATEST:
                raise SchemaTooNew(
                    f"database {self.description} has schema version {current}, newer than "
                    f"the {LATEST} this gpuplan knows: upgrade gpuplan (refusing to start)")
            for m in MIGRATIONS[current:]:
                for stmt in m.statements:
                    execute(self._sql(stmt))
                execute(self._sql("INSERT INTO schema_version (version, applied_at) "
                                  "VALUES (?, {now})"), (m.version,))
                log.info("store schema migrated to version %d (%s)", m.version, m.summary)

        self._migrate_in_transaction(step)
        return found[0]

    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        rows, _ = self._run("SELECT MAX(version) FROM schema_version")
        return int(rows[0][0] or 0)

    def ping(self) -> bool:
        """True when the database answers."""
        try:
            rows, _ = self._run("SELECT 1")
        except Exception:  # any driver error means "not answering"
            log.warning("store ping failed", exc_info=True)
            return False
        return rows == [(1,)]

    def put(self, rec: SolveRecord) -> bool:
        """Insert or move a record forward (see `SolveStore.put`)."""
        live = rec.state in (TaskState.queued, TaskState.running)
        _, n = self._run(
            f"INSERT INTO solves ({', '.join(_COLUMNS)}, heartbeat_at) "
            f"VALUES ({', '.join('?' * len(_COLUMNS))}, {'{now}' if live else 'NULL'}) "
            "ON CONFLICT (id) DO UPDATE SET state = excluded.state, "
            "backend = excluded.backend, started_at = excluded.started_at, "
            "finished_at = excluded.finished_at, plan = excluded.plan, "
            "error = excluded.error, owner = excluded.owner, "
            "heartbeat_at = excluded.heartbeat_at "
            f"WHERE solves.state IN {_LIVE} "
            "AND NOT (solves.state = 'running' AND excluded.state = 'queued')",
            (rec.id, rec.request_hash, rec.state.value, rec.backend, rec.created_at,
             rec.started_at, rec.finished_at, rec.plan_json, rec.error, rec.owner))
        return n > 0

    def put_request(self, solve_id: str, request_json: str) -> None:
        """Keep the request a solve answers, as JSON (written once)."""
        self._run("INSERT INTO solve_requests (id, request) VALUES (?, ?) "
                  "ON CONFLICT (id) DO NOTHING", (solve_id, request_json))

    def get_request(self, solve_id: str) -> PlanRequest | None:
        """The request of a solve, or None."""
        rows, _ = self._run("SELECT request FROM solve_requests WHERE id = ?", (solve_id,))
        return PlanRequest.model_validate_json(rows[0][0]) if rows else None

    def get(self, solve_id: str) -> SolveRecord | None:
        """The record with this id, or None."""
        rows, _ = self._run(f"{_SELECT} WHERE id = ?", (solve_id,))
        return _record(rows[0]) if rows else None

    def recent(self, limit: int) -> list[SolveRecord]:
        """The `limit` most recent records, newest first."""
        rows, _ = self._run(f"{_SELECT} ORDER BY created_at DESC, id LIMIT ?", (limit,))
        return [_record(r) for r in rows]

    def expire(self, older_than: float) -> int:
        """Delete finished records whose last change is before `older_than`; the count."""
        _, n = self._run("DELETE FROM solves WHERE COALESCE(finished_at, created_at) < ? "
                         f"AND state NOT IN {_LIVE}", (older_than,))
        self._run("DELETE FROM solve_requests WHERE id NOT IN (SELECT id FROM solves)")
        return n

    def heartbeat(self, owner: str, incumbents: Mapping[str, str]) -> list[str]:
        """Renew `owner`'s leases, store incumbents, return ids with a cancel request."""
        self._run(f"UPDATE solves SET heartbeat_at = {{now}} WHERE owner = ? "
                  f"AND state IN {_LIVE}", (owner,))
        for solve_id, plan in incumbents.items():
            self._run("UPDATE solves SET plan = ? WHERE id = ? AND owner = ? "
                      "AND state = 'running'", (plan, solve_id, owner))
        rows, _ = self._run(f"SELECT id FROM solves WHERE owner = ? AND cancel_requested = 1 "
                            f"AND state IN {_LIVE}", (owner,))
        return [str(r[0]) for r in rows]

    def request_cancel(self, solve_id: str) -> bool:
        """Flag a live solve for its owner to cancel; False when it is not live."""
        _, n = self._run(f"UPDATE solves SET cancel_requested = 1 WHERE id = ? "
                         f"AND state IN {_LIVE}", (solve_id,))
        return n > 0

    def reap(self, lease_s: float, reaper: str) -> int:
        """Fail other owners' live records whose lease ran out; the count."""
        _, n = self._run(
            "UPDATE solves SET state = 'failed', finished_at = {now}, heartbeat_at = NULL, "
            "error = 'the replica running this solve (' || COALESCE(owner, 'unknown') || "
            "') stopped renewing its lease for ' || ? || ' s; marked failed by replica ' "
            f"|| ? WHERE state IN {_LIVE} AND (owner IS NULL OR owner <> ?) "
            "AND (heartbeat_at IS NULL OR heartbeat_at < {now} - ?)",
            (f"{lease_s:g}", reaper, reaper, lease_s))
        return n


    # -- planning sessions
    #
    # A session is three kinds of rows: its head in `planning_sessions` (version and
    # timestamps: the row every change rewrites, and the one that decides a race), its
    # state as last written whole in `planning_session_states` (at the state's `version`,
    # its `pending` lines included), and one row per change since in
    # `planning_session_changes`. A change writes its head and its own row in one
    # transaction; the state is written only by `session_create`, `session_update` and
    # `session_fold`, which drop the changes it then contains.

    def _tx(self, *steps: tuple[str, Sequence[Any]]) -> bool:
        """Run `steps` in one transaction; the first must change a row, else nothing is
        written and the answer is False."""
        def step(execute: Callable[..., tuple[list[tuple[Any, ...]], int]]) -> bool:
            (sql, params), *rest = steps
            if execute(self._sql(sql), params)[1] <= 0:
                return False
            for sql, params in rest:
                execute(self._sql(sql), params)
            return True

        return self._transaction(step)

    def session_create(self, rec: SessionRecord) -> None:
        """Insert a new planning session (its head and its state, in one transaction)."""
        self._tx((f"INSERT INTO planning_sessions ({', '.join(_SESSION_HEAD)}) "
                  "VALUES (?, ?, ?, ?)", (rec.id, rec.created_at, rec.updated_at, rec.version)),
                 (f"INSERT INTO planning_session_states (id, {', '.join(_SESSION_STATE)}) "
                  "VALUES (?, ?, ?, ?, ?)",
                  (rec.id, rec.version, rec.request_json, rec.plan_json, rec.pending)))

    def session_head(self, session_id: str) -> SessionHead | None:
        """A session's version and timestamps, or None."""
        rows, _ = self._run(f"SELECT {', '.join(_SESSION_HEAD)} FROM planning_sessions "
                            "WHERE id = ?", (session_id,))
        if not rows:
            return None
        sid, created, updated, version = rows[0]
        return SessionHead(str(sid), float(created), float(updated), int(version))

    def session_get(self, session_id: str) -> SessionRecord | None:
        """The session with this id, or None: its state as written whole, then its changes
        since as `pending` lines. Three statements without a transaction; a fold between
        them (which drops the changes it wrote into the state) shows as a change missing,
        and the session is read again."""
        for _ in range(READ_TRIES):
            head = self.session_head(session_id)
            if head is None:
                return None
            rows, _ = self._run(f"SELECT {', '.join(_SESSION_STATE)} FROM "
                                "planning_session_states WHERE id = ?", (session_id,))
            if not rows:
                return None
            base, request, plan, pending = rows[0]
            changes, _ = self._run("SELECT change FROM planning_session_changes WHERE "
                                   "session_id = ? AND version > ? AND version <= ? "
                                   "ORDER BY version", (session_id, base, head.version))
            if len(changes) == head.version - int(base):
                lines = "".join(f"{c}\n" for (c,) in changes)
                return SessionRecord(head.id, head.created_at, head.updated_at, head.version,
                                     str(request), plan if isinstance(plan, str) else None,
                                     str(pending or "") + lines)
        raise StoreError(f"session {session_id} kept changing while it was read "
                         f"({READ_TRIES} tries)")

    def session_update(self, rec: SessionRecord, expected_version: int) -> bool:
        """Write `rec` whole if the stored version is still `expected_version` (the head's
        compare and set decides; its state and changes follow in the same transaction)."""
        return self._tx(
            _head_step(rec.id, expected_version, rec.version, rec.updated_at),
            ("UPDATE planning_session_states SET version = ?, request = ?, last_plan = ?, "
             "pending = ? WHERE id = ?",
             (rec.version, rec.request_json, rec.plan_json, rec.pending, rec.id)),
            ("DELETE FROM planning_session_changes WHERE session_id = ?", (rec.id,)))

    def session_append(self, session_id: str, expected_version: int, updated_at: float,
                       change: str) -> bool:
        """Raise the session's version by one if it is still `expected_version` and write
        `change` as that version's row (one transaction; the state is not touched)."""
        return self._tx(
            _head_step(session_id, expected_version, expected_version + 1, updated_at),
            ("INSERT INTO planning_session_changes (session_id, version, change) "
             "VALUES (?, ?, ?)", (session_id, expected_version + 1, change)))

    def session_fold(self, session_id: str, version: int, request_json: str,
                     plan_json: str | None) -> bool:
        """Write the session's state at `version` whole and drop the changes up to it, if
        the stored state is older (the head is not touched: a fold changes nothing of the
        session, and may come after newer changes); False otherwise."""
        return self._tx(
            ("UPDATE planning_session_states SET version = ?, request = ?, last_plan = ?, "
             "pending = '' WHERE id = ? AND version < ?",
             (version, request_json, plan_json, session_id, version)),
            ("DELETE FROM planning_session_changes WHERE session_id = ? AND version <= ?",
             (session_id, version)))

    def session_delete(self, session_id: str) -> bool:
        """Delete a session; True when it existed."""
        return self._tx(
            ("DELETE FROM planning_sessions WHERE id = ?", (session_id,)),
            ("DELETE FROM planning_session_states WHERE id = ?", (session_id,)),
            ("DELETE FROM planning_session_changes WHERE session_id = ?", (session_id,)))

    def session_expire(self, older_than: float) -> int:
        """Delete the sessions last changed before `older_than` (their heads, then the
        states and changes no head names); the count."""
        _, n = self._run("DELETE FROM planning_sessions WHERE updated_at < ?", (older_than,))
        self._run("DELETE FROM planning_session_states WHERE id NOT IN "
                  "(SELECT id FROM planning_sessions)")
        self._run("DELETE FROM planning_session_changes WHERE session_id NOT IN "
                  "(SELECT id FROM planning_sessions)")
        return n


def _head_step(session_id: str, expected_version: int, version: int, updated_at: float
               ) -> tuple[str, tuple[Any, ...]]:
    """The compare and set on a session's head that opens every write of it: `version`
    and `updated_at` are written only if the stored version is still `expected_version`
    (`SqlStore._tx` then writes nothing else when no row changed)."""
    return ("UPDATE planning_sessions SET updated_at = ?, version = ? "
            "WHERE id = ? AND version = ?", (updated_at, version, session_id, expected_version))


def _record(row: tuple[Any, ...]) -> SolveRecord:
    d = dict(zip(_COLUMNS, row, strict=True))
    return SolveRecord(
        id=str(d["id"]), request_hash=str(d["request_hash"]), state=TaskState(str(d["state"])),
        backend=str(d["backend"]), created_at=float(d["created_at"]),
        started_at=_float(d["started_at"]), finished_at=_float(d["finished_at"]),
        plan_json=d["plan"] if isinstance(d["plan"], str) else None,
        error=d["error"], owner=d["owner"],
    )


def _float(v: Any) -> float | None:
    return float(v) if v is not None else None
