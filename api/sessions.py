"""Planning sessions in the service: their persistence (`SessionStore`) and `SessionService`.

A session is a `solver.session.PlanningSession` (the current PlanRequest and its last
plan) kept by id. `SessionStore` is the persistence interface: one row per session in its
own table `planning_sessions` (id, timestamps, version, the state as request JSON, the last
plan as JSON) of the service's SQLite file, with five blocking methods (`put`, `get`,
`delete`, `expire`, `close`) run on one dedicated thread; another backend only has to
provide those. `SessionService` is what the routes call: it keeps recently used sessions in
memory (reloaded from the store after a restart), serialises the calls on one session,
applies event batches (all or none; 409 naming the event otherwise), solves through the
service's worker pool like `POST /v1/plans` and commits each plan to the session. Sessions
expire `GPUPLAN_SESSION_TTL_S` seconds after their last change.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.errors import NotFound, ServiceError
from api.store import SolveService
from models import Plan, PlanRequest
from models.events import Event
from solver.session import EventError, PlanningSession

log = logging.getLogger("gpuplan.sessions")

T = TypeVar("T")


class SessionSettings(BaseSettings):
    """`GPUPLAN_SESSION_*` settings, read when the service starts."""

    model_config = SettingsConfigDict(env_prefix="GPUPLAN_SESSION_", extra="ignore")

    ttl_s: float = Field(default=3600.0, gt=0,
                         description="A session expires this long after its last change.")
    cache_size: int = Field(default=32, ge=1,
                            description="Sessions kept parsed in memory (others are reloaded).")


class EventConflict(ServiceError):
    """A delta that does not apply to the session (answered 409, naming the event)."""

    status = 409
    code = "event_conflict"


# ---------------------------------------------------------------- persistence

_SCHEMA = """
CREATE TABLE IF NOT EXISTS planning_sessions (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    version INTEGER NOT NULL,
    request TEXT NOT NULL,
    last_plan TEXT
);
CREATE INDEX IF NOT EXISTS planning_sessions_updated ON planning_sessions (updated_at);
"""

_COLUMNS = ("id", "created_at", "updated_at", "version", "request", "last_plan")


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session as stored: its state as request JSON and its last plan as JSON."""

    id: str
    created_at: float
    updated_at: float
    version: int
    request_json: str
    plan_json: str | None = None


class SessionStore:
    """The `planning_sessions` table of an SQLite file; every method is blocking (`run`)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuplan-sessions")

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking method on the store's single thread (keeps writes in order)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def put(self, rec: SessionRecord) -> None:
        """Insert or replace a session."""
        row = (rec.id, rec.created_at, rec.updated_at, rec.version, rec.request_json,
               rec.plan_json)
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO planning_sessions ({', '.join(_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_COLUMNS))})", row)

    def get(self, session_id: str) -> SessionRecord | None:
        """The session with this id, or None."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM planning_sessions WHERE id = ?",
                (session_id,)).fetchone()
        return SessionRecord(*row) if row is not None else None

    def delete(self, session_id: str) -> bool:
        """Delete a session; True when it existed."""
        with self._lock:
            cur = self._db.execute("DELETE FROM planning_sessions WHERE id = ?", (session_id,))
        return cur.rowcount > 0

    def expire(self, older_than: float) -> int:
        """Delete the sessions last changed before `older_than`; returns how many."""
        with self._lock:
            cur = self._db.execute("DELETE FROM planning_sessions WHERE updated_at < ?",
                                   (older_than,))
        return cur.rowcount

    def close(self) -> None:
        """Finish pending writes and close the database."""
        self._executor.shutdown(wait=True)
        with self._lock:
            self._db.close()


# ---------------------------------------------------------------- the service


@dataclass
class LiveSession:
    """A session in memory, with its record's timestamps."""

    session: PlanningSession
    created_at: float
    updated_at: float
    lock: asyncio.Lock


class SessionService:
    """Sessions by id: create, read, apply events, plan on the pool, delete, expire."""

    def __init__(self, store: SessionStore, solves: SolveService,
                 settings: SessionSettings) -> None:
        self.store = store
        self.solves = solves
        self.settings = settings
        self._live: OrderedDict[str, LiveSession] = OrderedDict()
        self._expiry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Drop expired sessions, then keep doing so periodically."""
        await self._expire_once()
        self._expiry = asyncio.create_task(self._expire_loop())

    async def stop(self) -> None:
        """Stop the expiry loop and close the store."""
        if self._expiry is not None:
            self._expiry.cancel()
        await asyncio.to_thread(self.store.close)

    def _expires_at(self, updated_at: float) -> float:
        return updated_at + self.settings.ttl_s

    async def create(self, request: PlanRequest) -> tuple[str, LiveSession]:
        """A new session holding `request` as its state."""
        now = time.time()
        sid = uuid.uuid4().hex
        live = LiveSession(PlanningSession(request), now, now, asyncio.Lock())
        await self._save(sid, live)
        self._remember(sid, live)
        return sid, live

    async def get(self, session_id: str) -> LiveSession:
        """The live session (loaded from the store if needed); 404 when absent or expired."""
        live = self._live.get(session_id)
        if live is None:
            rec = await self.store.run(self.store.get, session_id)
            if rec is None:
                raise NotFound(f"no session with id {session_id!r}")
            loaded = await asyncio.to_thread(_load, rec)
            live = self._live.get(session_id)  # another call may have loaded it meanwhile
            if live is None:
                live = loaded
                self._remember(session_id, live)
        if self._expires_at(live.updated_at) < time.time():
            self._live.pop(session_id, None)
            await self.store.run(self.store.delete, session_id)
            raise NotFound(f"no session with id {session_id!r} (expired)")
        self._live.move_to_end(session_id)
        return live

    async def apply(self, session_id: str, events: Sequence[Event],
                    check: Callable[[PlanRequest], None]) -> LiveSession:
        """Apply a batch of events (all or none): 409 naming the first that does not
        apply; `check` may refuse the resulting state (e.g. over the server's limits)."""
        live = await self.get(session_id)
        async with live.lock:
            try:
                await asyncio.to_thread(live.session.apply, events, check)
            except EventError as e:
                raise EventConflict(str(e)) from None
            live.updated_at = time.time()
            await self._save(session_id, live)
        return live

    async def plan(self, session_id: str, time_limit_s: float | None) -> str:
        """Solve the session's state on the worker pool, commit the plan and return its
        JSON (as the worker wrote it)."""
        live = await self.get(session_id)
        async with live.lock:
            request = live.session.planning_request(time_limit_s)
            result = await self.solves.solve(request)
            plan = result.parse()
            await asyncio.to_thread(live.session.commit, plan)
            live.updated_at = time.time()
            await self._save(session_id, live)
        return result.json

    async def delete(self, session_id: str) -> None:
        """Forget a session; 404 when there is none."""
        self._live.pop(session_id, None)
        if not await self.store.run(self.store.delete, session_id):
            raise NotFound(f"no session with id {session_id!r}")

    def expires_at(self, live: LiveSession) -> float:
        """Unix time at which `live` expires unless changed again."""
        return self._expires_at(live.updated_at)

    # -- internals

    def _remember(self, session_id: str, live: LiveSession) -> None:
        self._live[session_id] = live
        while len(self._live) > self.settings.cache_size:
            self._live.popitem(last=False)

    async def _save(self, session_id: str, live: LiveSession) -> None:
        s = live.session
        request_json, plan_json = await asyncio.to_thread(
            lambda: (s.request.model_dump_json(),
                     s.last_plan.model_dump_json() if s.last_plan is not None else None))
        rec = SessionRecord(session_id, live.created_at, live.updated_at, s.version,
                            request_json, plan_json)
        await self.store.run(self.store.put, rec)

    async def _expire_once(self) -> None:
        cutoff = time.time() - self.settings.ttl_s
        for sid in [k for k, v in self._live.items() if v.updated_at < cutoff]:
            self._live.pop(sid, None)
        n = await self.store.run(self.store.expire, cutoff)
        if n:
            log.info("expired %d planning sessions", n)

    async def _expire_loop(self) -> None:
        period = min(self.settings.ttl_s, 60.0)
        while True:
            await asyncio.sleep(period)
            await self._expire_once()


def _load(rec: SessionRecord) -> LiveSession:
    """A stored session, parsed back into memory."""
    request = PlanRequest.model_validate_json(rec.request_json)
    plan = Plan.model_validate_json(rec.plan_json) if rec.plan_json is not None else None
    return LiveSession(PlanningSession(request, plan, rec.version), rec.created_at, rec.updated_at,
                 asyncio.Lock())
