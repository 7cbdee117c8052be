"""Plan requests parsed, validated and prepared for a solve outside the API process.

pydantic-core validates a request with the GIL held (tens of milliseconds for an M-sized
request of 650 KB, more on a loaded machine): done in the API process, forty such bodies at
once hold up every other request, `/healthz` included, however the parses are spread over
threads. So the bodies of `POST /v1/plans` and `POST /v1/solves` are parsed in an intake
process (`Intake`, a small process pool): the API process only moves bytes.

The intake process does what the route did: strict JSON validation with the wire checks
(`api.routers.body.parse_body`), the server's size limits (`check_limits`), and the
server's caps on the time limit and threads (`cap_request`). A bad body comes back as the
list of errors that the route would have raised, and the API process raises the same
`RequestValidationError`, so a 422 is the same answer, field paths included.

A good body comes back as a `PreparedRequest`: the capped request pickled (`payload`) and
the few fields the service reads (time limit, solver, hash). The payload goes to the
solver worker as it is, which unpickles it: the request is validated once, in the intake
process, never again in the worker (unpickling a validated model costs about half of a
validation). The payload only ever travels between gpuplan's own processes; no client
bytes are unpickled.

A synchronous plan that finds a solver worker idle skips the intake: the body goes to the
worker as a `RawRequest`, which runs the same checks (`validate_body`) and answers the
same errors; nothing is queued ahead of it, so the 422 comes as soon.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import logging
import multiprocessing as mp
import os
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter

from api.errors import Unavailable
from api.routers.body import parse_body
from api.settings import Settings
from models import PlanRequest
from solver.gcpause import gc_paused

log = logging.getLogger("gpuplan.intake")

_ADAPTER: TypeAdapter[PlanRequest] = TypeAdapter(PlanRequest)


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A validated request, capped by the server, ready for a solver worker.

    `payload` is the pickled PlanRequest; `request_json` its canonical JSON (what
    `request_hash` covers), kept only when the caller asked (async solves store it)."""

    payload: bytes
    time_limit_s: float
    solver: str
    request_hash: str | None = None
    request_json: str | None = None

    def load(self) -> PlanRequest:
        """The request itself (unpickled: call it off the event loop)."""
        return load_payload(self.payload)


def load_payload(payload: bytes) -> PlanRequest:
    """A pickled PlanRequest of the intake, unpickled with the cyclic collector paused
    (the hundreds of thousands of objects of a large request would otherwise trigger
    collections that find nothing: 4x the time at 16,384 GPUs)."""
    with gc_paused():
        request: PlanRequest = pickle.loads(payload)
    return request


def check_limits(request: PlanRequest, settings: Settings, loc: tuple[str, ...] = ("body",)
                 ) -> None:
    """422 naming the limit when the request has more nodes, GPUs or jobs than allowed."""
    nodes = len(request.cluster.nodes)
    gpus = sum(len(n.gpus) for n in request.cluster.nodes)
    counts = (
        ("max_nodes", settings.max_nodes, nodes, (*loc, "cluster", "nodes"), "nodes"),
        ("max_gpus", settings.max_gpus, gpus, (*loc, "cluster", "nodes"), "GPUs"),
        ("max_jobs", settings.max_jobs, len(request.jobs), (*loc, "jobs"), "jobs"),
    )
    errors = [
        {"type": "limit_exceeded", "loc": where,
         "msg": f"{n} {what} exceed the server limit {name}={limit}",
         "input": None, "ctx": {"limit": name, "max": limit, "actual": n}}
        for name, limit, n, where, what in counts if n > limit
    ]
    if errors:
        raise RequestValidationError(errors)


def cap_request(request: PlanRequest, max_time_limit_s: float, threads: int) -> PlanRequest:
    """The request with its time limit capped by the server and its threads by the pool."""
    policy = request.policy
    capped = policy.model_copy(update={
        "time_limit_s": min(policy.time_limit_s, max_time_limit_s),
        "threads": min(policy.threads or threads, threads),
    })
    return request.model_copy(update={"policy": capped})


def prepare_request(request: PlanRequest, settings: Settings, record: bool = False
                    ) -> PreparedRequest:
    """Cap a validated request and pickle it for a worker (blocking); with `record`, also
    its canonical JSON and that JSON's SHA-256."""
    capped = cap_request(request, settings.max_time_limit_s, settings.threads_per_solve)
    text = capped.model_dump_json() if record else None
    with gc_paused():  # pickling a large request triggers needless collections
        payload = pickle.dumps(capped, protocol=pickle.HIGHEST_PROTOCOL)
    return PreparedRequest(
        payload=payload,
        time_limit_s=capped.policy.time_limit_s, solver=capped.policy.solver,
        request_hash=hashlib.sha256(text.encode()).hexdigest() if text is not None else None,
        request_json=text,
    )


def validate_body(body: bytes, settings: Settings) -> PlanRequest | list[Any]:
    """A JSON body to the request capped by the server, or the list of its errors (as
    `RequestValidationError.errors()`, field paths from `body`): the intake's checks."""
    try:
        request = parse_body(_ADAPTER, body)  # with the collector paused: parse_body
        check_limits(request, settings)
    except RequestValidationError as e:
        return list(e.errors())
    return cap_request(request, settings.max_time_limit_s, settings.threads_per_solve)


def prepare_body(body: bytes, settings: Settings, record: bool) -> PreparedRequest | list[Any]:
    """In the intake process: a JSON body to a PreparedRequest, or the list of its errors
    (as `RequestValidationError.errors()`, field paths from `body`)."""
    checked = validate_body(body, settings)
    if isinstance(checked, list):
        return checked
    return prepare_request(checked, settings, record)


@dataclass(frozen=True, slots=True)
class RawRequest:
    """A JSON body sent to an idle solver worker as it came, with the server's settings:
    the worker runs `validate_body` itself and answers its errors (a 422) or solves.

    A synchronous plan that finds a worker idle takes this way: nothing waits ahead of it,
    so a bad body gets its 422 as soon as from the intake, and the request is validated
    where it is solved, without the intake's round trip and the pickled hand-over (their
    CPU is about that of a validation: benchmarks/LATENCY.md)."""

    body: bytes
    settings: Settings


#: The name an intake process gives itself (Linux `comm`: `ps`, `/proc/PID/comm`).
PROCESS_NAME = b"gpuplan-intake"
_PR_SET_NAME = 15


def _init_process() -> None:
    """Initializer of an intake process: exit as soon as the API process is gone (a
    process pool's workers would otherwise wait for work forever), and take the name
    `PROCESS_NAME`, so that operators (and the tests) can tell it from the solver workers
    forked from the same forkserver (Linux only; elsewhere the name stays)."""
    parent = mp.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True,
                         name="gpuplan-intake-lifeline").start()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_NAME, PROCESS_NAME, 0, 0, 0)


def _exit_with(sentinel: int) -> None:
    """Wait until the API process ends (its sentinel turns readable), then exit."""
    wait([sentinel])
    os._exit(1)


def _warm() -> None:
    """Nothing: submitted once at start so that the process exists before the first body."""


class Intake:
    """`size` intake processes, forked from the solver pool's forkserver (which has
    imported this module) like the solver workers; they name themselves `PROCESS_NAME`."""

    def __init__(self, settings: Settings, size: int) -> None:
        self.settings = settings
        self.size = size
        self._executor: ProcessPoolExecutor | None = None

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.size,
                                   mp_context=mp.get_context("forkserver"),
                                   initializer=_init_process)

    async def start(self) -> None:
        """Start the processes and wait until each has imported the validators."""
        self._executor = self._new_executor()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._executor, _warm)
                               for _ in range(self.size)))

    async def stop(self) -> None:
        """Stop the processes (bodies being parsed are dropped)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    def ensure_alive(self) -> None:
        """Replace the processes if one died (plans that skip the intake would not notice
        otherwise): a no-op task, which a broken pool refuses at once."""
        executor = self._executor
        if executor is None:
            return
        try:
            executor.submit(_warm)
        except BrokenProcessPool:
            log.error("an intake process died; starting new ones")
            self._executor = self._new_executor()
            self._executor.submit(_warm)
            executor.shutdown(wait=False, cancel_futures=True)

    async def prepare(self, body: bytes, record: bool) -> PreparedRequest:
        """Parse and validate a JSON body in an intake process; raises
        RequestValidationError (422) exactly as the route would have."""
        executor = self._executor
        if executor is None:
            raise Unavailable("the request intake is not running")
        loop = asyncio.get_running_loop()
        try:
            out = await loop.run_in_executor(executor, prepare_body, body, self.settings,
                                             record)
        except BrokenProcessPool:
            log.error("an intake process died; starting new ones")
            if self._executor is executor:
                self._executor = self._new_executor()
                executor.shutdown(wait=False, cancel_futures=True)
            raise Unavailable("the request intake process died; send the request again"
                              ) from None
        if isinstance(out, list):
            raise RequestValidationError(out)
        return out
