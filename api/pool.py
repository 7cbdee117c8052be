"""A bounded pool of solver worker processes that never blocks the event loop.

Each of the `size` slots owns one long-lived worker process (started from a forkserver that
has already imported the solver, so a replacement starts in milliseconds). A slot takes the
oldest waiting task, sends the request to its worker over a pipe (pickled once by the
intake, api/intake.py: the worker unpickles it, never validates it again; or, for a
synchronous plan that found a worker idle, the JSON body itself, which the worker
validates: `RawRequest`) and waits,
without blocking the loop, for the worker's messages: incumbents (the best plan so far,
forwarded from the planner's `on_incumbent` callback), then the final plan or an error. A
task that overruns its time limit plus the grace period, or that is cancelled while
running, has its worker killed (SIGKILL) and replaced: a stopped solve really stops.

At most `size + queue_size` tasks are admitted at once; beyond that `submit` raises
`QueueFull` (answered 429 with Retry-After).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any, Protocol, TypeVar, runtime_checkable

from api.errors import (
    InvalidBody,
    PlannerBug,
    QueueFull,
    ServiceError,
    ShuttingDown,
    SolveCancelled,
    SolveFailed,
    SolveTimeout,
)
from api.intake import RawRequest, load_payload, validate_body
from api.session_worker import (
    CommitDelta,
    SessionPlan,
    StaleSession,
    WorkerSessions,
)
from models import Plan, PlanRequest
from models.instance import forget_compiled
from solver.gcpause import gc_paused

log = logging.getLogger("gpuplan.pool")

Planner = Callable[..., Plan]
T = TypeVar("T")


@runtime_checkable
class LateBound(Protocol):
    """A payload decided when the worker that runs it is known (a session plan sends
    only what that worker lacks: api/session_worker.py)."""

    def resolve(self, pid: int) -> Any:
        """The payload to send to the worker whose process id is `pid`."""


class TaskState(StrEnum):
    """Life cycle of a pool task (and of an async solve record)."""

    queued = "queued"
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"


def load_planner(path: str) -> Planner:
    """Import `module:function` (the planning entry point, `solver:plan` by default)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"planner must be 'module:function', got {path!r}")
    planner: Planner = getattr(importlib.import_module(module_name), attr)
    return planner


# ---------------------------------------------------------------- worker process side


def _watch_lifeline(lifeline: Connection) -> None:
    """Exit the worker as soon as the server process is gone (its end of the pipe closes)."""
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv()
    os._exit(1)


def _worker_main(conn: Connection, lifeline: Connection, planner_path: str, nice: int) -> None:
    """Worker process loop: receive (task id, payload), solve, send messages back.

    Messages sent: ("incumbent", task_id, plan_json, solver, status), then ("done", ...) of
    the same shape plus the task's `WorkerTimes` and, of a session plan, the commit's
    `CommitDelta` (else None), or ("error", task_id, kind, message) with
    kind "planning" (PlanningError) or "internal". Plans travel as JSON text so that the
    server only parses them when someone asks. A `RawRequest` is validated first:
    ("invalid", task_id, errors) ends it, else ("accepted", task_id, time_limit_s, solver)
    precedes the rest. A `SessionPlan` plans a session this worker holds or is sent whole
    (api/session_worker.py); ("error", task_id, "stale", message) when it holds another
    version.

    The planner runs in the worker's solve thread, at the pool's niceness (`nice`), so
    that solves give way to the API process; the worker's own thread, which validates a
    raw body and serialises the plan on the way to the client, keeps the niceness it was
    started with (`_SolveThread`). A session plan runs in the worker's own thread; the LP
    its session solves after the answer runs in the solve thread, until the next task
    arrives.

    The cyclic collector is paused from the moment a task arrives until its answer is sent:
    validating a large body, solving and building the plan make hundreds of thousands of
    objects, and with the collector on, the first allocations after each of those steps
    set off collections that walk all of them and free nothing (at 1,024 GPUs some 10-50
    ms of CPU per request, between the solve and the client). The task's objects are freed
    by reference counting when `_serve` returns, and whatever the collector still has to
    do happens while the worker waits for its next task. What was imported before the
    first task is frozen out of the collector's walks (`gc.freeze`): it lives as long as
    the worker.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server owns shutdown
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    from solver import plan as solver_plan

    planner = load_planner(planner_path)
    solve_thread = _SolveThread(nice)
    sessions = WorkerSessions()
    send_lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        with send_lock:
            conn.send(msg)

    gc.freeze()
    while True:
        with gc_paused():
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return
            if msg is None:
                return
            _serve(msg, time.monotonic(), send, planner,
                   None if planner is solver_plan else planner, sessions, solve_thread,
                   conn.poll)
            del msg  # freed now, with the task's objects, while the collector is paused


@dataclass(frozen=True, slots=True)
class WorkerTimes:
    """Where a task's time went in its worker (`time.monotonic` is one clock for every
    process of the machine on Linux, so the server can set these against its own).

    `received_at` and `sent_at` are the instants the task was in hand and its answer was
    about to be sent; `stages` the steps between, in order, each as (name, wall seconds,
    CPU seconds of the worker process, all its threads): getting the request in hand,
    `validate` (a raw body) or `unpickle` (a request the intake prepared; a session plan
    applies its events in the planner call instead), `solve` (the planner call) and
    `serialise` (the plan's JSON)."""

    received_at: float
    sent_at: float
    stages: tuple[tuple[str, float, float], ...]


#: Linux gives each thread its own niceness (nice(2) changes the calling thread's only) and
#: a new thread its creator's; elsewhere niceness is the whole process's.
PER_THREAD_NICE = sys.platform == "linux"


class _SolveThread:
    """The worker's thread for planner calls, at niceness `nice` (raised once, when it
    starts; the threads a solver starts from it, CP-SAT's workers for one, inherit it).
    Where niceness is per process (not Linux), the whole worker is made that nice at once,
    as it was before solves had their own thread."""

    def __init__(self, nice: int) -> None:
        if not PER_THREAD_NICE:
            _be_nice(nice)
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="gpuplan-solve",
            initializer=functools.partial(_be_nice, nice if PER_THREAD_NICE else 0))

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in the solve thread; waits for it and returns (or
        raises) what it did."""
        return self.submit(fn, *args, **kwargs).result()

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """`fn(*args, **kwargs)` in the solve thread; its future."""
        return self._executor.submit(fn, *args, **kwargs)


#: How often (seconds) the worker looks for a new task while its solve thread works
#: between tasks (`_until_task`).
BETWEEN_POLL_S = 0.005


def _until_task(solve_thread: _SolveThread, fn: Callable[..., T],
                waiting: Callable[[float], bool]) -> T:
    """`fn(stop=...)` in `solve_thread`, between tasks: once a task arrives (`waiting`)
    the worker sets `stop`, which `fn` heeds (the LP between session plans gives up), and
    returns what `fn` returned then."""
    stop = threading.Event()
    future = solve_thread.submit(fn, stop=stop)
    while not future.done():
        if waiting(BETWEEN_POLL_S):
            stop.set()
            break
    return future.result()


def _be_nice(nice: int) -> None:
    """Raise the calling thread's (Linux) or process's niceness by `nice`."""
    with contextlib.suppress(OSError):
        os.nice(nice)


class _Laps:
    """Wall and CPU time of consecutive steps (`WorkerTimes.stages`)."""

    def __init__(self, start: float) -> None:
        self.wall, self.cpu = start, time.process_time()
        self.stages: list[tuple[str, float, float]] = []

    def lap(self, name: str) -> float:
        """End the step `name` now; returns the instant (`time.monotonic`)."""
        wall, cpu = time.monotonic(), time.process_time()
        self.stages.append((name, wall - self.wall, cpu - self.cpu))
        self.wall, self.cpu = wall, cpu
        return wall


def _serve(msg: tuple[str, Any], received_at: float, send: Callable[[tuple[Any, ...]], None],
           planner: Planner, session_planner: Planner | None,
           sessions: WorkerSessions, solve_thread: _SolveThread,
           waiting: Callable[[float], bool] = lambda timeout: False) -> None:
    """One task in the worker (`_worker_main` documents the messages); the planner call
    in `solve_thread`, a session plan's in this thread. After a session plan, the state
    its next plan starts from is made here and its LP in the solve thread, unless a task
    is `waiting` (`waiting(timeout)`: whether one arrives within `timeout` seconds); the
    LP gives up as soon as one arrives (`_until_task`)."""
    from solver import PlanningError

    task_id, payload = msg

    def incumbent(p: Plan) -> None:
        send(("incumbent", task_id, p.model_dump_json(), p.solver, p.status))

    laps = _Laps(received_at)
    try:
        commit: CommitDelta | None = None
        if isinstance(payload, SessionPlan):
            # here, at the server's niceness: a cluster manager waits for it in its cycle
            result, commit = sessions.plan(payload, session_planner)
        else:
            if isinstance(payload, RawRequest):  # an idle worker validates the body itself
                checked = validate_body(payload.body, payload.settings)
                if isinstance(checked, list):
                    send(("invalid", task_id, checked))
                    return
                request: PlanRequest = checked
                send(("accepted", task_id, request.policy.time_limit_s,
                      request.policy.solver))
                laps.lap("validate")
            else:
                request = load_payload(payload)  # validated by the intake
                laps.lap("unpickle")
            result = solve_thread.run(planner, request, on_incumbent=incumbent)
        laps.lap("solve")
        text = result.model_dump_json()
        sent = laps.lap("serialise")
        send(("done", task_id, text, result.solver, result.status,
              WorkerTimes(received_at, sent, tuple(laps.stages)), commit))
        if isinstance(payload, SessionPlan):
            # the state the session's next plan starts from (off the call's path), at the
            # server's niceness like the plan itself: the next cycle's plan would
            # otherwise wait for it at the pool's (L under load: 13.8 s against 5.5-6.8 s
            # for the other rounds); then the LP of it at the pool's, until a task comes
            if not waiting(0.0):
                sessions.prepare(payload.session_id, False)
                if not waiting(0.0):
                    _until_task(solve_thread, functools.partial(
                        sessions.prepare, payload.session_id), waiting)
        else:
            # What the solve cached on the request (its compiled jobs: 230,000 objects
            # at 16,384 GPUs) would otherwise outlive it until the next task's first
            # cache access frees them, on that task's way; now, after the answer.
            forget_compiled(request)
    except StaleSession as e:
        send(("error", task_id, "stale", str(e)))
    except PlanningError as e:
        send(("error", task_id, "planning", str(e)))
    except Exception as e:
        logging.getLogger("gpuplan.worker").exception("planner raised")
        send(("error", task_id, "internal", f"{type(e).__name__}: {e}"))


# ---------------------------------------------------------------- server side


@dataclass(frozen=True, slots=True)
class PlanJSON:
    """A plan as its worker serialised it, with the two fields the server reads and, for a
    final plan, where the task's time went: wall seconds by stage (`stages`, as
    `task_stages` lists them) and the worker's CPU seconds by stage (`cpu`)."""

    json: str
    solver: str
    status: str
    stages: dict[str, float] = field(default_factory=dict, compare=False)
    cpu: dict[str, float] = field(default_factory=dict, compare=False)
    #: of a session plan: what committing it changed in the worker's copy of the session
    #: (api/session_worker.py), which the API process makes in its own
    commit: CommitDelta | None = field(default=None, compare=False)

    def parse(self) -> Plan:
        """The Plan itself."""
        return Plan.model_validate_json(self.json)


@dataclass(eq=False)
class SolveTask:
    """One solve submitted to the pool; `future` resolves to the plan or a ServiceError.

    `payload` is the pickled PlanRequest (api/intake.py: `PreparedRequest`), `solver` its
    `policy.solver` and `time_limit_s` its time limit, capped by the server; or a
    `RawRequest`, whose worker validates it and then reports its limit and solver; or a
    `LateBound` payload (a session plan), resolved for the worker that takes it."""

    id: str
    payload: bytes | RawRequest | LateBound
    solver: str
    time_limit_s: float
    on_start: Callable[[SolveTask], None] | None = None
    state: TaskState = TaskState.queued
    submitted_at: float = field(default_factory=time.time)
    #: `time.monotonic` when submitted and when the slot began sending it to its worker
    queued_at: float = field(default_factory=time.monotonic)
    sent_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    incumbent: PlanJSON | None = None
    future: asyncio.Future[PlanJSON] = field(init=False)
    _cancel: asyncio.Event = field(init=False, default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.future = asyncio.get_running_loop().create_future()


class _Worker:
    """One worker process, its pipe and a reader thread feeding an asyncio queue."""

    def __init__(self, ctx: ForkServerContext, planner: str, nice: int,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.conn, child = ctx.Pipe()
        # The worker watches `life_r`: when this process dies, `life_w` closes and it exits.
        life_r, self._life_w = ctx.Pipe(duplex=False)
        self.proc: BaseProcess = ctx.Process(
            target=_worker_main, args=(child, life_r, planner, nice), daemon=True,
            name="gpuplan-worker",
        )
        self._child_ends = (child, life_r)
        self.messages: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._loop = loop
        #: Set by the reader when the pipe closes: the process died, even if not reaped yet.
        self.gone = False

    def start(self) -> None:
        """Start the process and the reader thread (blocking: call it in a thread)."""
        self.proc.start()
        for end in self._child_ends:
            end.close()
        threading.Thread(target=self._read, name="gpuplan-worker-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                msg = ("exit",)
            try:
                self._loop.call_soon_threadsafe(self.messages.put_nowait, msg)
            except RuntimeError:  # the loop is closed: the server is gone
                return
            if msg[0] == "exit":
                self.gone = True
                return

    @property
    def alive(self) -> bool:
        """True while the process runs (and its pipe is open)."""
        return not self.gone and self.proc.is_alive()

    def kill(self) -> None:
        """SIGKILL the process and reap it (blocking: call it in a thread)."""
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        self._life_w.close()

    def stop(self) -> None:
        """Ask an idle worker to exit, killing it if it does not (blocking)."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(1)
        self.kill()


class SolverPool:
    """`size` worker processes and a bounded FIFO of waiting tasks."""

    def __init__(self, *, size: int, queue_size: int, planner: str, grace_s: float,
                 retry_after_s: int = 5, nice: int = 5,
                 on_finish: Callable[[SolveTask, PlanJSON | None, ServiceError | None], None]
                 | None = None) -> None:
        self.size = size
        self.queue_size = queue_size
        self.planner = planner
        self.grace_s = grace_s
        self.retry_after_s = retry_after_s
        self.nice = nice
        self.on_finish = on_finish
        self._ctx = mp.get_context("forkserver")
        self._pending: deque[SolveTask] = deque()
        self._running: set[SolveTask] = set()
        self._wake = asyncio.Semaphore(0)  # released once per submitted task
        self._slots: list[asyncio.Task[None]] = []
        self._workers: list[_Worker | None] = [None] * size
        self._closing = False

    # -- life cycle

    async def start(self) -> None:
        """Start the forkserver and every worker; returns when all are up."""
        self._ctx.set_forkserver_preload(["models", "solver", "api.pool", "api.intake"])
        loop = asyncio.get_running_loop()
        workers = [_Worker(self._ctx, self.planner, self.nice, loop) for _ in range(self.size)]
        for w in workers:
            await asyncio.to_thread(w.start)
        self._workers = list(workers)
        self._slots = [asyncio.create_task(self._slot(i), name=f"gpuplan-slot-{i}")
                       for i in range(self.size)]

    def begin_close(self) -> None:
        """Refuse new tasks and end every queued and running one now (ShuttingDown).

        Called as soon as the server is asked to stop, so that requests waiting for a solve
        are answered (503) at once and the server does not wait for their time limits.
        """
        if self._closing:
            return
        self._closing = True
        for t in list(self._pending):
            self._finish(t, None, ShuttingDown("server shutting down"))
        self._pending.clear()
        for s in self._slots:
            s.cancel()

    async def stop(self) -> None:
        """Cancel every task, stop the slots and the worker processes."""
        self.begin_close()
        for s in self._slots:
            with contextlib.suppress(asyncio.CancelledError):
                await s
        for w in self._workers:
            if w is not None:
                await asyncio.to_thread(w.stop)

    # -- state

    @property
    def ready(self) -> bool:
        """True when the pool runs and has a live worker (dead ones are being replaced)."""
        return (not self._closing and bool(self._slots)
                and any(w is not None and w.alive for w in self._workers))

    @property
    def idle(self) -> bool:
        """True when a task submitted now goes to a live worker at once (none queued, a
        slot free)."""
        return (self.ready and not self._pending and len(self._running) < self.size
                and all(w is not None and w.alive for w in self._workers))

    @property
    def queue_depth(self) -> int:
        """Tasks waiting for a worker."""
        return len(self._pending)

    @property
    def in_flight(self) -> int:
        """Tasks running on a worker."""
        return len(self._running)

    # -- API

    def submit(self, task: SolveTask) -> None:
        """Admit `task` (raises QueueFull when size + queue_size tasks are admitted)."""
        if self._closing:
            raise ShuttingDown("server shutting down")
        if len(self._pending) + len(self._running) >= self.size + self.queue_size:
            raise QueueFull(
                f"all {self.size} workers busy and {self.queue_size} solves queued",
                self.retry_after_s,
            )
        self._pending.append(task)
        self._wake.release()

    def cancel(self, task: SolveTask) -> bool:
        """Cancel a queued or running task; False when it had already finished."""
        if task.future.done():
            return False
        if task in self._pending:
            self._pending.remove(task)
            self._finish(task, None, SolveCancelled("cancelled while queued"))
        else:
            task._cancel.set()
        return True

    # -- internals

    def _finish(self, task: SolveTask, plan: PlanJSON | None,
                error: ServiceError | None) -> None:
        if task.future.done():
            return
        task.finished_at = time.time()
        if plan is not None:
            task.state = TaskState.done
            task.future.set_result(plan)
        else:
            assert error is not None
            task.state = (TaskState.cancelled if isinstance(error, SolveCancelled)
                          else TaskState.failed)
            task.future.set_exception(error)
            task.future.exception()  # mark retrieved: nobody may await an async solve
        if self.on_finish is not None:
            self.on_finish(task, plan, error)

    async def _next(self) -> SolveTask:
        while True:
            await self._wake.acquire()
            if self._pending:  # empty when the task was cancelled while queued
                return self._pending.popleft()

    async def _replace(self, index: int) -> _Worker:
        old = self._workers[index]
        self._workers[index] = None
        if old is not None:
            await asyncio.to_thread(old.kill)
        w = _Worker(self._ctx, self.planner, self.nice, asyncio.get_running_loop())
        await asyncio.to_thread(w.start)
        self._workers[index] = w
        return w

    async def _slot(self, index: int) -> None:
        while True:
            task = await self._next()
            self._running.add(task)
            worker = self._workers[index]
            try:
                if worker is None or not worker.alive:
                    worker = await self._replace(index)
                if task._cancel.is_set():  # cancelled while its worker was being replaced
                    self._finish(task, None, SolveCancelled("cancelled while queued"))
                    continue
                keep = await self._run(worker, task)
            except asyncio.CancelledError:
                self._finish(task, None, ShuttingDown("server shutting down"))
                raise
            except Exception:  # a pool bug or a failed process start: fail this task only
                log.exception("solver slot %d failed", index)
                self._finish(task, None, SolveFailed("internal error in the solver pool"))
                keep = False
            finally:
                self._running.discard(task)
            if not keep:
                try:
                    await self._replace(index)
                except Exception:  # retried when the next task arrives
                    log.exception("could not restart solver worker %d", index)

    async def _run(self, worker: _Worker, task: SolveTask) -> bool:
        """Run `task` on `worker`; False when the worker had to be killed."""
        task.state = TaskState.running
        task.started_at = time.time()
        if task.on_start is not None:
            task.on_start(task)
        payload = task.payload
        if isinstance(payload, LateBound):
            payload = payload.resolve(worker.proc.pid or 0)
        # Writing a large payload to the pipe may wait for the worker: in a thread.
        task.sent_at = time.monotonic()
        await asyncio.to_thread(_send, worker.conn, (task.id, payload))
        deadline = time.monotonic() + task.time_limit_s + self.grace_s
        cancel_wait = asyncio.ensure_future(task._cancel.wait())
        try:
            while True:
                get = asyncio.ensure_future(worker.messages.get())
                remaining = max(0.0, deadline - time.monotonic())
                done, _ = await asyncio.wait({get, cancel_wait}, timeout=remaining,
                                             return_when=asyncio.FIRST_COMPLETED)
                if get not in done:
                    get.cancel()
                    if cancel_wait in done:
                        self._finish(task, None, SolveCancelled("cancelled while running"))
                    else:
                        self._finish(task, None, SolveTimeout(
                            f"solve exceeded its {task.time_limit_s:g} s limit "
                            f"(+{self.grace_s:g} s grace) and was stopped"))
                    return False
                msg = get.result()
                if msg[0] == "exit":
                    self._finish(task, None, SolveFailed("worker process died"))
                    return False
                if msg[1] != task.id:  # a late message of an earlier task
                    continue
                if msg[0] == "accepted":  # a RawRequest, validated: its own limit counts
                    task.time_limit_s, task.solver = msg[2], msg[3]
                    deadline = time.monotonic() + task.time_limit_s + self.grace_s
                elif msg[0] == "invalid":
                    self._finish(task, None, InvalidBody(msg[2]))
                    return True
                elif msg[0] == "incumbent":
                    task.incumbent = PlanJSON(*msg[2:5])
                elif msg[0] == "done":
                    final = PlanJSON(msg[2], msg[3], msg[4], *task_stages(task, msg[5]),
                                     commit=msg[6])
                    self._finish(task, final, None)
                    return True
                else:
                    self._finish(task, None, _worker_error(msg[2], msg[3]))
                    return True
        finally:
            cancel_wait.cancel()


def task_stages(task: SolveTask, times: WorkerTimes, answered_at: float | None = None
                ) -> tuple[dict[str, float], dict[str, float]]:
    """Wall seconds by stage of a finished task, in order, and the worker's CPU seconds of
    its own stages: `queue` (submitted to sent to its worker), `hop` (pickled, through the
    pipe, in the worker's hands), the worker's stages (`WorkerTimes`), `back` (through the
    pipe to this process's event loop, at `answered_at`, default now)."""
    answered_at = time.monotonic() if answered_at is None else answered_at
    sent_at = task.sent_at if task.sent_at is not None else times.received_at
    wall = {"queue": sent_at - task.queued_at, "hop": times.received_at - sent_at}
    wall.update((name, seconds) for name, seconds, _ in times.stages)
    wall["back"] = answered_at - times.sent_at
    return ({k: max(0.0, v) for k, v in wall.items()},
            {name: cpu for name, _, cpu in times.stages})


def _send(conn: Connection, msg: tuple[Any, ...]) -> None:
    """Send `msg` to a worker, pickled with the cyclic collector paused (a session sent
    whole is a large object graph: api/intake.py `load_payload`)."""
    with gc_paused():
        conn.send(msg)


def _worker_error(kind: str, message: str) -> ServiceError:
    if kind == "stale":
        return StaleSession(message)
    if kind == "planning":
        return PlannerBug(f"planner error: {message}")
    return SolveFailed(f"planner raised {message}")
