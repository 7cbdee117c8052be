"""The solve service: what the routes call to run solves and read their records.

`SolveService` parses request bodies in its intake processes (api/intake.py: validated,
capped in time limit and threads, pickled once), submits them to the `SolverPool`,
keeps the tasks it runs (with their best plan so far) in memory and writes every state
change to the store. Several replicas may share one store: each record names its owner, the
owner renews the leases of its live records and stores their incumbents every
`lease_s / 4` seconds, and picks up cancel requests made on other replicas; every replica
fails the live records whose owner stopped renewing (`reap`). A replica that is told to
stop (`drain`) turns unready, refuses new solves, gives its running ones a grace period and
fails what is left with a message saying why.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError

from api.errors import (
    InvalidBody,
    NotFound,
    QueueFull,
    ServiceError,
    ShuttingDown,
    SolveCancelled,
    SolveTimeout,
    Unavailable,
)
from api.intake import Intake, PreparedRequest, RawRequest, prepare_request
from api.metrics import Metrics
from api.pool import LateBound, PlanJSON, SolverPool, SolveTask, TaskState
from api.settings import Settings
from api.store.base import LIVE_STATES, SolveRecord, SolveStore
from models import PlanRequest

log = logging.getLogger("gpuplan.store")

T = TypeVar("T")

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
        self.intake = Intake(settings, settings.intake_workers)
        #: This process's name in the `owner` column (the host is the pod in Kubernetes).
        self.replica_id = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self._live: dict[str, tuple[SolveTask, SolveRecord]] = {}
        self._requests: dict[str, PreparedRequest] = {}  # of the live async solves
        self._writes: set[asyncio.Future[Any]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._stored_incumbent: dict[str, PlanJSON] = {}
        self._stopping: dict[str, str] = {}  # task id -> why the replica fails it
        self._draining = False

    # -- life cycle

    async def start(self) -> None:
        """Fail solves whose replica died, start the pool, the intake, the lease and
        expiry loops."""
        await self._reap_once()
        await self._expire_once()
        await self.pool.start()  # first: it starts the forkserver the intake forks from
        await self.intake.start()
        self._background = [asyncio.create_task(self._expire_loop()),
                            asyncio.create_task(self._lease_loop())]
        log.info("replica %s uses store %s (lease %g s)", self.replica_id,
                 self.store.description, self.settings.lease_s)

    async def stop(self) -> None:
        """Stop the pool (live solves are failed as shut down, and written) and the loops."""
        self._draining = True
        for t in self._background:
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.pool.stop()
        await self.intake.stop()
        await asyncio.gather(*self._writes, return_exceptions=True)

    async def drain(self) -> None:
        """Turn unready and refuse new solves; let live ones finish within
        `shutdown_grace_s`, then fail the rest; stay up at least `shutdown_delay_s` (so the
        load balancer sees /readyz fail before the listener closes)."""
        if self._draining:
            return
        self._draining = True
        grace, delay = self.settings.shutdown_grace_s, self.settings.shutdown_delay_s
        began = time.monotonic()
        log.info("draining: %d live solves, %g s grace", len(self._live), grace)
        futures = [task.future for task, _ in self._live.values()]
        if futures:
            await asyncio.wait(futures, timeout=grace)
        left = [task for task, _ in self._live.values()]
        for task in left:
            self._stopping[task.id] = (
                f"the replica shut down and this solve did not finish within its {grace:g} s "
                "grace period; submit it again")
            self.pool.cancel(task)
        if left:
            await asyncio.wait([t.future for t in left], timeout=10)
        await asyncio.sleep(max(0.0, delay - (time.monotonic() - began)))
        await asyncio.gather(*self._writes, return_exceptions=True)

    @property
    def ready(self) -> bool:
        """True when the pool has all its workers and the replica is not draining."""
        return self.pool.ready and not self._draining

    @property
    def draining(self) -> bool:
        """True once the replica was told to stop."""
        return self._draining

    # -- solving

    async def prepare(self, body: bytes, record: bool = False) -> PreparedRequest:
        """Parse, validate and cap a JSON request body in an intake process (422 as the
        route would answer it); `record` keeps its JSON for an async solve's record."""
        return await self.intake.prepare(body, record)

    def _task(self, prepared: PreparedRequest) -> SolveTask:
        return SolveTask(id=uuid.uuid4().hex, payload=prepared.payload,
                         solver=prepared.solver, time_limit_s=prepared.time_limit_s)

    def _submit(self, task: SolveTask) -> None:
        if self._draining:
            raise ShuttingDown("this replica is shutting down; send the request again")
        try:
            self.pool.submit(task)
        except QueueFull:
            self.metrics.rejected.inc()
            raise

    @property
    def takes_raw_bodies(self) -> bool:
        """Whether a synchronous plan submitted now would start on an idle worker (it may
        then skip the intake: `solve_body`)."""
        return not self._draining and self.pool.idle

    async def solve_body(self, body: bytes) -> PlanJSON:
        """Solve a JSON body that an idle worker validates itself (api/intake.py
        `RawRequest`); raises RequestValidationError (422) as the intake would."""
        self.intake.ensure_alive()  # the intake is not used here: notice if it died
        task = SolveTask(id=uuid.uuid4().hex, payload=RawRequest(body, self.settings),
                         solver="unknown", time_limit_s=self.settings.max_time_limit_s)
        self._submit(task)
        try:
            return await asyncio.shield(task.future)
        except InvalidBody as e:
            raise RequestValidationError(e.errors) from None

    async def solve(self, request: PlanRequest | PreparedRequest) -> PlanJSON:
        """Solve on the pool and wait for the plan (raises a ServiceError on failure)."""
        if isinstance(request, PlanRequest):
            request = await asyncio.to_thread(prepare_request, request, self.settings)
        task = self._task(request)
        self._submit(task)
        return await asyncio.shield(task.future)

    async def solve_late(self, payload: LateBound, solver: str, time_limit_s: float
                         ) -> PlanJSON:
        """Solve a payload decided when its worker is known (a session plan:
        api/session_worker.py) and wait for the plan (raises a ServiceError on failure)."""
        task = SolveTask(id=uuid.uuid4().hex, payload=payload, solver=solver,
                         time_limit_s=time_limit_s)
        self._submit(task)
        return await asyncio.shield(task.future)

    async def submit(self, request: PlanRequest | PreparedRequest) -> SolveRecord:
        """Queue an async solve and record it; returns the queued record."""
        if isinstance(request, PlanRequest) or request.request_json is None:
            loaded = request if isinstance(request, PlanRequest) else request.load()
            request = await asyncio.to_thread(prepare_request, loaded, self.settings, True)
        assert request.request_hash is not None and request.request_json is not None
        task = self._task(request)
        task.on_start = self._on_start
        rec = SolveRecord(id=task.id, request_hash=request.request_hash,
                          state=TaskState.queued, backend=request.solver,
                          created_at=task.submitted_at, owner=self.replica_id)
        self._live[task.id] = (task, rec)
        self._requests[task.id] = request
        try:
            self._submit(task)
        except ServiceError:
            del self._live[task.id]
            self._requests.pop(task.id, None)
            raise
        try:  # written before the answer, so that any replica can find it at once
            await self.store.run(self.store.put, rec)
        except Exception as e:
            self.pool.cancel(task)
            raise Unavailable("the solve store is not answering; try again") from e
        self._track(self.store.run(self.store.put_request, task.id, request.request_json))
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
        prepared = self._requests.get(solve_id)
        if prepared is not None:
            return await asyncio.to_thread(prepared.load)
        await self.get(solve_id)  # 404 for unknown or expired ids
        request = await self.store.run(self.store.get_request, solve_id)
        if request is None:
            raise NotFound(f"the request of solve {solve_id!r} was not kept")
        return request

    async def cancel(self, solve_id: str) -> SolveRecord:
        """Cancel a queued or running solve (its worker is killed); returns the record.

        A solve of another replica gets a cancel request in the store, which its owner
        reads with its next heartbeat; the answer waits (up to 10 s) for it to end."""
        live = self._live.get(solve_id)
        if live is not None:
            task, _ = live
            self.pool.cancel(task)
            await asyncio.wait({task.future}, timeout=10)
            return await self.get(solve_id)
        rec = await self.get(solve_id)
        if rec.state in LIVE_STATES and await self.store.run(self.store.request_cancel,
                                                             solve_id):
            deadline = time.monotonic() + 10
            while rec.state in LIVE_STATES and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                rec = await self.get(solve_id)
        return rec

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
        self._track(self.store.run(self.store.put, rec)).add_done_callback(_warn_if_refused)

    def _track(self, write: Awaitable[T]) -> asyncio.Future[T]:
        t = asyncio.ensure_future(write)
        self._writes.add(t)
        t.add_done_callback(self._writes.discard)
        return t

    def _on_start(self, task: SolveTask) -> None:
        live = self._live.get(task.id)
        if live is not None:
            self._persist(replace(live[1], state=TaskState.running, started_at=task.started_at))

    def _on_finish(self, task: SolveTask, plan: PlanJSON | None,
                   error: ServiceError | None) -> None:
        backend = plan.solver if plan is not None else task.solver
        status = plan.status if plan is not None else _failure_status(error)
        seconds = (task.finished_at - task.started_at
                   if task.started_at is not None and task.finished_at is not None else None)
        if not isinstance(error, InvalidBody):  # a 422, as from the intake: not a solve
            self.metrics.observe(backend, status, seconds)
        live = self._live.pop(task.id, None)
        self._stored_incumbent.pop(task.id, None)
        self._requests.pop(task.id, None)
        if live is None:
            return
        state, detail = task.state, error.detail if error is not None else None
        why = self._stopping.pop(task.id, None)
        if why is None and isinstance(error, ShuttingDown):
            why = ("the replica shut down before this solve "
                   f"{'finished' if task.started_at is not None else 'started'}; "
                   "submit it again")
        if why is not None and isinstance(error, SolveCancelled):
            state, detail = TaskState.failed, why
        best = plan if plan is not None else task.incumbent
        self._persist(replace(
            live[1], state=state, backend=backend, started_at=task.started_at,
            finished_at=task.finished_at, plan_json=best.json if best is not None else None,
            error=detail,
        ))

    async def _expire_once(self) -> None:
        n = await self.store.run(self.store.expire, time.time() - self.settings.ttl_s)
        if n:
            log.info("expired %d solve records", n)

    async def _expire_loop(self) -> None:
        await expire_periodically(self.settings.ttl_s, self._expire_once, "old solves")

    async def _reap_once(self) -> None:
        n = await self.store.run(self.store.reap, self.settings.lease_s, self.replica_id)
        if n:
            log.warning("%d solves lost their replica (no heartbeat for %g s); marked failed",
                        n, self.settings.lease_s)

    async def _heartbeat(self) -> None:
        """Renew this replica's leases, store new incumbents, act on remote cancels."""
        incumbents = {}
        for task_id, (task, _) in self._live.items():
            best = task.incumbent
            if best is not None and self._stored_incumbent.get(task_id) is not best:
                incumbents[task_id] = best.json
                self._stored_incumbent[task_id] = best
        for task_id in await self.store.run(self.store.heartbeat, self.replica_id, incumbents):
            live = self._live.get(task_id)
            if live is not None:
                log.info("solve %s cancelled through the store", task_id)
                self.pool.cancel(live[0])

    async def _lease_loop(self) -> None:
        """Every tick (a quarter lease, at most 0.5 s: the delay of a remote cancel) beat
        for the live solves; every half lease fail those of dead replicas."""
        lease = self.settings.lease_s
        tick = min(lease / 4, 0.5)
        next_reap = time.monotonic() + lease / 2
        while True:
            await asyncio.sleep(tick)
            try:
                if self._live:
                    await self._heartbeat()
                if time.monotonic() >= next_reap:
                    next_reap = time.monotonic() + lease / 2
                    await self._reap_once()
            except Exception:  # the database may be away for a while; try again next tick
                log.warning("store unreachable for the lease loop", exc_info=True)


async def expire_periodically(ttl_s: float, expire_once: Callable[[], Awaitable[None]],
                              what: str) -> None:
    """Call `expire_once` every `ttl_s` seconds (at most 60) until cancelled; a failure is
    logged (naming `what`) and tried again next time: the database may be away a while."""
    period = min(ttl_s, 60.0)
    while True:
        await asyncio.sleep(period)
        try:
            await expire_once()
        except Exception:
            log.warning("could not expire %s", what, exc_info=True)


def _warn_if_refused(t: asyncio.Future[bool]) -> None:
    """Log a record write that the store refused or that failed (it is not retried)."""
    if t.cancelled():
        return
    if t.exception() is not None:
        log.error("could not write a solve record: %s", t.exception())
    elif not t.result():
        log.warning("a solve record was already final in the store (its lease had run out)")
