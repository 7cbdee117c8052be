"""Solve records: SQLite persistence (`SolveStore`) and the solve service (`SolveService`).

`SolveStore` keeps one row per async solve (request hash, state, backend, timings, the plan
or the error) in an embedded SQLite file, so a restart loses no finished result; rows older
than the TTL are deleted. All database calls run on one dedicated thread, in submission
order, so the event loop never waits on disk.

`SolveService` is what the routes call: it caps each request's time limit and threads,
submits it to the `SolverPool`, keeps the live tasks (with their best plan so far) in memory
and writes every state change to the store.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from api.errors import NotFound, QueueFull, ServiceError, SolveCancelled, SolveTimeout
from api.metrics import Metrics
from api.pool import PlanJSON, SolverPool, SolveTask, TaskState
from api.settings import Settings
from models import PlanRequest

log = logging.getLogger("gpuplan.store")

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS solves (
    id TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    state TEXT NOT NULL,
    backend TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    plan TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS solves_created ON solves (created_at);
CREATE TABLE IF NOT EXISTS solve_requests (
    id TEXT PRIMARY KEY,
    request TEXT NOT NULL
);
"""

_COLUMNS = ("id", "request_hash", "state", "backend", "created_at", "started_at",
            "finished_at", "plan", "error")


@dataclass(frozen=True, slots=True)
class SolveRecord:
    """One async solve as stored (and as answered, with `plan_is_final`); `plan_json` is the
    final plan, or the best so far of a running or stopped solve."""

    id: str
    request_hash: str
    state: TaskState
    backend: str
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    plan_json: str | None = None
    error: str | None = None
    plan_is_final: bool = True


def request_hash(request: PlanRequest) -> str:
    """SHA-256 of the request's canonical JSON."""
    return hashlib.sha256(request.model_dump_json().encode()).hexdigest()


class SolveStore:
    """SQLite table of solve records; every method is blocking (use `run`)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuplan-db")

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking method on the store's single thread (keeps writes in order)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        """Finish pending writes and close the database."""
        self._executor.shutdown(wait=True)
        with self._lock:
            self._db.close()

    def ping(self) -> bool:
        """True when the database answers."""
        with self._lock:
            return self._db.execute("SELECT 1").fetchone() == (1,)

    def put(self, rec: SolveRecord) -> None:
        """Insert or replace a record."""
        row = (rec.id, rec.request_hash, rec.state.value, rec.backend, rec.created_at,
               rec.started_at, rec.finished_at,
               rec.plan_json, rec.error)
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO solves ({', '.join(_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_COLUMNS))})", row)

    def put_request(self, solve_id: str, request: PlanRequest) -> None:
        """Keep the request a solve answers (the plan view draws its cluster)."""
        text = request.model_dump_json()
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO solve_requests (id, request) VALUES (?, ?)",
                             (solve_id, text))

    def get_request(self, solve_id: str) -> PlanRequest | None:
        """The request of a solve, or None."""
        with self._lock:
            row = self._db.execute("SELECT request FROM solve_requests WHERE id = ?",
                                   (solve_id,)).fetchone()
        return PlanRequest.model_validate_json(row[0]) if row is not None else None

    def get(self, solve_id: str) -> SolveRecord | None:
        """The record with this id, or None."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM solves WHERE id = ?", (solve_id,)
            ).fetchone()
        return _record(row) if row is not None else None

    def recent(self, limit: int) -> list[SolveRecord]:
        """The `limit` most recent records, newest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM solves ORDER BY created_at DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [_record(r) for r in rows]

    def expire(self, older_than: float) -> int:
        """Delete finished records whose last change is before `older_than`; returns count."""
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM solves WHERE COALESCE(finished_at, created_at) < ? "
                "AND state NOT IN ('queued', 'running')", (older_than,))
            self._db.execute("DELETE FROM solve_requests WHERE id NOT IN (SELECT id FROM solves)")
        return cur.rowcount

    def abandon_unfinished(self, now: float) -> int:
        """Mark records left queued/running by a previous server process as failed."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE solves SET state = 'failed', finished_at = ?, "
                "error = 'the server restarted before this solve finished' "
                "WHERE state IN ('queued', 'running')", (now,))
        return cur.rowcount


def _record(row: tuple[object, ...]) -> SolveRecord:
    d = dict(zip(_COLUMNS, row, strict=True))
    plan = d["plan"]
    return SolveRecord(
        id=str(d["id"]), request_hash=str(d["request_hash"]), state=TaskState(str(d["state"])),
        backend=str(d["backend"]), created_at=float(d["created_at"]),  # type: ignore[arg-type]
        started_at=d["started_at"], finished_at=d["finished_at"],  # type: ignore[arg-type]
        plan_json=plan if isinstance(plan, str) else None,
        error=d["error"],  # type: ignore[arg-type]
    )


#: Metrics status of a solve that produced no plan, by error class (first match wins).
FAILURE_STATUSES: tuple[tuple[type[ServiceError], str], ...] = (
    (SolveTimeout, "timeout"),
    (SolveCancelled, "cancelled"),
)


def _failure_status(error: ServiceError | None) -> str:
    """Metrics status of a solve that produced no plan."""
    return next((name for cls, name in FAILURE_STATUSES if isinstance(error, cls)), "error")


class SolveService:
    """Synchronous and async solves on the pool, with records in the store."""

    def __init__(self, settings: Settings, store: SolveStore, metrics: Metrics) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.pool = SolverPool(
            size=settings.workers, queue_size=settings.queue_size, planner=settings.planner,
            grace_s=settings.kill_grace_s, retry_after_s=settings.retry_after_s,
            nice=settings.worker_nice, on_finish=self._on_finish,
        )
        metrics.bind_pool(lambda: self.pool.queue_depth, lambda: self.pool.in_flight)
        self._live: dict[str, tuple[SolveTask, SolveRecord]] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self._expiry: asyncio.Task[None] | None = None

    # -- life cycle

    async def start(self) -> None:
        """Recover the store, start the pool and the expiry loop."""
        n = await self.store.run(self.store.abandon_unfinished, time.time())
        if n:
            log.warning("%d solves were unfinished at the last shutdown; marked failed", n)
        await self._expire_once()
        await self.pool.start()
        self._expiry = asyncio.create_task(self._expire_loop())

    async def stop(self) -> None:
        """Stop the pool (cancelling live solves, whose state is written) and the expiry."""
        if self._expiry is not None:
            self._expiry.cancel()
        await self.pool.stop()
        await asyncio.gather(*self._writes, return_exceptions=True)

    @property
    def ready(self) -> bool:
        """True when the pool has all its workers."""
        return self.pool.ready

    # -- solving

    def effective_request(self, request: PlanRequest) -> PlanRequest:
        """The request with its time limit capped by the server and threads by the pool."""
        policy = request.policy
        threads = self.settings.threads_per_solve
        capped = policy.model_copy(update={
            "time_limit_s": min(policy.time_limit_s, self.settings.max_time_limit_s),
            "threads": min(policy.threads or threads, threads),
        })
        return request.model_copy(update={"policy": capped})

    def _task(self, request: PlanRequest) -> SolveTask:
        return SolveTask(id=uuid.uuid4().hex, request=request,
                         time_limit_s=request.policy.time_limit_s)

    def _submit(self, task: SolveTask) -> None:
        try:
            self.pool.submit(task)
        except QueueFull:
            self.metrics.rejected.inc()
            raise

    async def solve(self, request: PlanRequest) -> PlanJSON:
        """Solve on the pool and wait for the plan (raises a ServiceError on failure)."""
        task = self._task(self.effective_request(request))
        self._submit(task)
        return await asyncio.shield(task.future)

    async def submit(self, request: PlanRequest) -> SolveRecord:
        """Queue an async solve and record it; returns the queued record."""
        eff = self.effective_request(request)
        task = self._task(eff)
        task.on_start = self._on_start
        rec = SolveRecord(id=task.id, request_hash=request_hash(eff), state=TaskState.queued,
                          backend=eff.policy.solver, created_at=task.submitted_at)
        self._live[task.id] = (task, rec)
        try:
            self._submit(task)
        except ServiceError:
            del self._live[task.id]
            raise
        self._persist(rec)  # before any state change: the store's thread keeps writes in order
        self._track(self.store.run(self.store.put_request, task.id, eff))
        return rec

    async def get(self, solve_id: str) -> SolveRecord:
        """The record of a solve, live (with its best plan so far) or stored."""
        live = self._live.get(solve_id)
        if live is not None:
            task, rec = live
            best = task.incumbent
            return replace(rec, state=task.state, started_at=task.started_at,
                           plan_json=best.json if best is not None else None,
                           plan_is_final=False)
        rec_or_none = await self.store.run(self.store.get, solve_id)
        if rec_or_none is None or self._expired(rec_or_none):
            raise NotFound(f"no solve with id {solve_id!r}")
        return rec_or_none

    async def request_of(self, solve_id: str) -> PlanRequest:
        """The request (as solved: time limit and threads capped) of a known solve."""
        live = self._live.get(solve_id)
        if live is not None:
            return live[0].request
        await self.get(solve_id)  # 404 for unknown or expired ids
        request = await self.store.run(self.store.get_request, solve_id)
        if request is None:
            raise NotFound(f"the request of solve {solve_id!r} was not kept")
        return request

    async def cancel(self, solve_id: str) -> SolveRecord:
        """Cancel a queued or running solve (its worker is killed); returns the record."""
        live = self._live.get(solve_id)
        if live is not None:
            task, _ = live
            self.pool.cancel(task)
            await asyncio.wait({task.future}, timeout=10)
        return await self.get(solve_id)

    async def recent(self, limit: int) -> list[SolveRecord]:
        """The most recent solves, newest first (live state overrides stored state)."""
        rows = await self.store.run(self.store.recent, limit)
        out = []
        for r in rows:
            live = self._live.get(r.id)
            if live is not None:
                out.append(replace(r, state=live[0].state, started_at=live[0].started_at))
            elif not self._expired(r):
                out.append(r)
        return out

    # -- callbacks and background work

    def _expired(self, rec: SolveRecord) -> bool:
        last = rec.finished_at if rec.finished_at is not None else rec.created_at
        return rec.state not in (TaskState.queued, TaskState.running) and \
            last < time.time() - self.settings.ttl_s

    def _persist(self, rec: SolveRecord) -> None:
        self._track(self.store.run(self.store.put, rec))

    def _track(self, write: Awaitable[None]) -> None:
        t = asyncio.ensure_future(write)
        self._writes.add(t)
        t.add_done_callback(self._writes.discard)

    def _on_start(self, task: SolveTask) -> None:
        live = self._live.get(task.id)
        if live is not None:
            self._persist(replace(live[1], state=TaskState.running, started_at=task.started_at))

    def _on_finish(self, task: SolveTask, plan: PlanJSON | None,
                   error: ServiceError | None) -> None:
        backend = plan.solver if plan is not None else task.request.policy.solver
        status = plan.status if plan is not None else _failure_status(error)
        seconds = (task.finished_at - task.started_at
                   if task.started_at is not None and task.finished_at is not None else None)
        self.metrics.observe(backend, status, seconds)
        live = self._live.pop(task.id, None)
        if live is None:
            return
        best = plan if plan is not None else task.incumbent
        self._persist(replace(
            live[1], state=task.state, backend=backend, started_at=task.started_at,
            finished_at=task.finished_at, plan_json=best.json if best is not None else None,
            error=error.detail if error is not None else None,
        ))

    async def _expire_once(self) -> None:
        n = await self.store.run(self.store.expire, time.time() - self.settings.ttl_s)
        if n:
            log.info("expired %d solve records", n)

    async def _expire_loop(self) -> None:
        period = min(self.settings.ttl_s, 60.0)
        while True:
            await asyncio.sleep(period)
            await self._expire_once()
