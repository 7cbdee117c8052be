"""Planning sessions in the service: `SessionService`, on the shared store.

A session is a `solver.session.PlanningSession` (the current PlanRequest and its last
plan) kept by id in the store's `planning_sessions` table (api/store: SQLite or
PostgreSQL), so every replica sharing the database serves every session: the state lives in
the database, not in one process. `SessionService` is what the routes call: it applies event
batches (all or none; 409 naming the event otherwise), solves through the service's worker
pool like `POST /v1/plans` and commits each plan to the session.

Concurrency: each session's head row has a version, raised by one at every change, and a
change is written only over the version it was computed from (`SolveStore.session_append`).
Calls on one session in one replica wait for each other (a lock per session); across
replicas:

- an event batch that loses the race is applied again to the newer state (a few times),
  which is what applying the two batches one after the other means; if it no longer
  applies, the answer is the usual 409 naming the event;
- a plan whose session changed while it was solved is not committed: 409 `session_changed`
  (the plan answered a state that is no longer the session's; plan again).

The state is not written whole at every change: an event batch or a committed plan is
stored as one row of its own (the batch's JSON; the plan's JSON as the worker wrote it,
passed through), with the session's small head row (version, timestamps) in the same
transaction (api/store/sql.py), instead of serialising and writing the whole state (at
16,384 GPUs / 20,000 jobs about 80 ms of CPU and 12.5 MB); a replica that loads the
session replays the changes on the state written whole. Once the changes since would
outgrow the state itself (`PENDING_SHARE`, `MAX_PENDING`), the state is written whole
again at the version reached (a fold, `SolveStore.session_fold`) after the answer, off the
call's path: the fold changes nothing of the session, so it races with nothing.

A plan is committed here from what its worker's commit changed (`CommitDelta`,
api/session_worker.py), not by parsing the plan; the last plan is kept as its JSON.

The plans themselves are made by the solver workers, which keep the sessions they planned
between plans (api/session_worker.py): a plan sends the worker only the event batches since
its copy.

Recently used sessions stay parsed in memory, keyed by version: every call reads the row's
version (a small query) and reloads the state only when another replica changed it.
Sessions expire `GPUPLAN_SESSION_TTL_S` seconds after their last change: every replica
deletes the expired rows periodically and answers 404 for an expired one at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.errors import NotFound, ServiceError
from api.pool import PlanJSON
from api.session_worker import Holders, StaleSession
from api.store import (
    SessionHead,
    SessionRecord,
    SolveService,
    SolveStore,
    expire_periodically,
)
from models import Plan, PlanRequest
from models.events import Event, EventBatch
from solver.gcpause import gc_paused
from solver.session import EventError, PlanningSession

log = logging.getLogger("gpuplan.sessions")

#: Times an event batch is applied again after losing a race with another replica (each
#: lost race means another change was written: the session moves on, nothing livelocks).
EVENT_RETRIES = 20
#: Longest pause before a retry, in seconds, times the tries so far (with jitter).
RETRY_PAUSE_S = 0.01
#: A change is appended to the row while the changes pending there stay within this
#: share of the state as last written whole (in characters) and number at most
#: `MAX_PENDING`; otherwise the row is written whole again (and its changes dropped).
PENDING_SHARE = 1.0
MAX_PENDING = 32


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


class SessionChanged(ServiceError):
    """The session changed on another replica while this call worked on it (409)."""

    status = 409
    code = "session_changed"


# ---------------------------------------------------------------- the service


@dataclass
class LiveSession:
    """A session parsed in memory, at the version of its record (its `last_plan` is None:
    the last plan is `plan_json`, as its worker wrote it), with what is stored of it
    (module doc: how it is written)."""

    session: PlanningSession
    created_at: float
    updated_at: float
    plan_json: str | None = None
    #: the version of the state as last written whole, its characters, and (version,
    #: characters) of each change stored since
    whole_version: int = 0
    whole_chars: int = 0
    changes: tuple[tuple[int, int], ...] = ()

    def last_plan(self) -> Plan | None:
        """The last plan, parsed."""
        return Plan.model_validate_json(self.plan_json) if self.plan_json is not None \
            else None

    def after(self, session: PlanningSession, plan_json: str | None) -> LiveSession:
        """The session changed to `session` now (what is stored: as of this one)."""
        return LiveSession(session, self.created_at, time.time(), plan_json,
                           self.whole_version, self.whole_chars, self.changes)


class SessionService:
    """Sessions by id: create, read, apply events, plan on the pool, delete, expire."""

    def __init__(self, store: SolveStore, solves: SolveService,
                 settings: SessionSettings) -> None:
        self.store = store
        self.solves = solves
        self.settings = settings
        self._live: OrderedDict[str, LiveSession] = OrderedDict()
        #: which worker holds which session between plans (api/session_worker.py)
        self.holders = Holders()
        self._locks: dict[str, asyncio.Lock] = {}
        self._expiry: asyncio.Task[None] | None = None
        #: the folds under way, by session (one at a time per session)
        self._folds: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        """Drop expired sessions, then keep doing so periodically."""
        await self._expire_once()
        self._expiry = asyncio.create_task(self._expire_loop())

    async def stop(self) -> None:
        """Stop the expiry loop (the store is closed by the app, after this)."""
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        await asyncio.gather(*self._folds.values(), return_exceptions=True)

    def _expires_at(self, updated_at: float) -> float:
        return updated_at + self.settings.ttl_s

    async def create(self, request: PlanRequest) -> tuple[str, LiveSession]:
        """A new session holding `request` as its state."""
        now = time.time()
        sid = uuid.uuid4().hex
        live = LiveSession(PlanningSession(request), now, now)
        rec = await asyncio.to_thread(_record, sid, live)
        live.whole_chars = len(rec.request_json)
        await self.store.run(self.store.session_create, rec)
        self._remember(sid, live)
        return sid, live

    async def get(self, session_id: str) -> LiveSession:
        """The session at its stored version (reloaded when another replica changed it);
        404 when absent or expired."""
        head = await self.store.run(self.store.session_head, session_id)
        if head is None:
            self._live.pop(session_id, None)
            raise NotFound(f"no session with id {session_id!r}")
        if self._expires_at(head.updated_at) < time.time():
            self._live.pop(session_id, None)
            await self.store.run(self.store.session_delete, session_id)
            raise NotFound(f"no session with id {session_id!r} (expired)")
        live = self._live.get(session_id)
        if live is None or not _same(live, head):
            rec = await self.store.run(self.store.session_get, session_id)
            if rec is None:
                self._live.pop(session_id, None)
                raise NotFound(f"no session with id {session_id!r}")
            live = await asyncio.to_thread(_load, rec)
            self.holders.forget(session_id)
            self._remember(session_id, live)
        self._live.move_to_end(session_id)
        return live

    async def apply(self, session_id: str, events: Sequence[Event],
                    check: Callable[[PlanRequest], None]) -> LiveSession:
        """Apply a batch of events (all or none): 409 naming the first that does not
        apply; `check` may refuse the resulting state (e.g. over the server's limits).
        A batch that loses a race with another replica is applied to the newer state."""
        async with self._lock(session_id):
            for attempt in range(EVENT_RETRIES):
                if attempt:
                    await asyncio.sleep(random.uniform(0, RETRY_PAUSE_S * attempt))
                live = await self.get(session_id)
                draft = PlanningSession(live.session.request, None, live.session.version)
                try:
                    await asyncio.to_thread(draft.apply, events, check)
                except EventError as e:
                    raise EventConflict(str(e)) from None
                changed = live.after(draft, live.plan_json)
                line = "E" + EventBatch(events=list(events)).model_dump_json()
                if await self._write(session_id, changed, live, line):
                    self.holders.applied(session_id, draft.version, events)
                    return changed
                log.info("session %s changed on another replica; applying again", session_id)
        raise SessionChanged(f"session {session_id!r} kept changing on other replicas "
                             f"({EVENT_RETRIES} tries); send the events again")

    async def plan(self, session_id: str, time_limit_s: float | None) -> PlanJSON:
        """Plan the session's state on the worker pool (a worker that holds the session
        gets only the events since its copy: api/session_worker.py), commit the plan and
        return its JSON (as the worker wrote it); 409 when the session changed meanwhile.
        The answer's `stages`: `session` (waiting for the session's lock, loading it
        unless cached), `dispatch` (choosing what to send, a resend after a stale
        answer), the pool's (api/pool.py `task_stages`), `commit` (the worker's commit made
        here: api/session_worker.py `CommitDelta`) and `store` (the change written to the
        store)."""
        began = time.monotonic()
        async with self._lock(session_id):
            live = await self.get(session_id)
            version = live.session.version
            got = time.monotonic()
            result, pid = await self._solve(session_id, live, time_limit_s)
            solved = time.monotonic()
            # the worker validated the plan against this very state (same version)
            draft = await asyncio.to_thread(_commit, live.session, result)
            committed = time.monotonic()
            if not await self._write(session_id, live.after(draft, result.json), live,
                                     "P" + result.json):
                self.holders.forget(session_id)
                raise SessionChanged(
                    f"session {session_id!r} changed on another replica while it was "
                    f"planned (from version {version}); the plan was not committed: "
                    "plan again")
            self.holders.planned(session_id, pid, draft.version)
        stages = {"session": got - began,
                  "dispatch": max(0.0, solved - got - sum(result.stages.values())),
                  **result.stages,
                  "commit": committed - solved, "store": time.monotonic() - committed}
        return replace(result, stages=stages)

    async def _solve(self, session_id: str, live: LiveSession,
                     time_limit_s: float | None) -> tuple[PlanJSON, int]:
        """The plan of `live` from a worker, and that worker's process id; sent again
        whole when the worker did not hold the version assumed."""
        s = self.solves.settings
        session = live.session
        limit = min(time_limit_s if time_limit_s is not None
                    else session.request.policy.time_limit_s, s.max_time_limit_s)
        for whole in (False, True):
            dispatch = self.holders.dispatch(session_id, session, live.plan_json,
                                             time_limit_s, s.max_time_limit_s,
                                             s.threads_per_solve)
            dispatch.whole = whole
            try:
                result = await self.solves.solve_late(
                    dispatch, session.request.policy.solver, limit)
            except StaleSession:
                self.holders.forget(session_id)
                if whole:
                    raise
                log.info("session %s: its worker no longer held it; sent whole", session_id)
                continue
            except BaseException:
                self.holders.forget(session_id)
                raise
            assert dispatch.pid is not None
            return result, dispatch.pid
        raise AssertionError("unreachable: the whole state is never stale")

    async def delete(self, session_id: str) -> None:
        """Forget a session; 404 when there is none."""
        self._live.pop(session_id, None)
        self.holders.forget(session_id)
        if not await self.store.run(self.store.session_delete, session_id):
            raise NotFound(f"no session with id {session_id!r}")

    def expires_at(self, live: LiveSession) -> float:
        """Unix time at which `live` expires unless changed again."""
        return self._expires_at(live.updated_at)

    # -- internals

    def _lock(self, session_id: str) -> asyncio.Lock:
        """The lock serialising this replica's calls on one session (dropped when idle)."""
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        if len(self._locks) > 4 * self.settings.cache_size:
            for sid in [k for k, v in self._locks.items() if not v.locked() and k != session_id]:
                del self._locks[sid]
        return lock

    def _remember(self, session_id: str, live: LiveSession) -> None:
        self._live[session_id] = live
        self._live.move_to_end(session_id)
        while len(self._live) > self.settings.cache_size:
            self._live.popitem(last=False)

    async def _write(self, session_id: str, live: LiveSession, before: LiveSession,
                     change: str) -> bool:
        """Store `live`, one change (`change`, a line) after `before`, over `before`'s
        version: the change in a row of its own; then, when the changes since the state
        was written whole outgrow it (`PENDING_SHARE`, `MAX_PENDING`), a fold after the
        answer. False (and forgotten here) when another replica wrote first."""
        expected = before.session.version
        if not await self.store.run(self.store.session_append, session_id, expected,
                                    live.updated_at, change):
            self._live.pop(session_id, None)
            return False
        live.changes = (*before.changes, (live.session.version, len(change) + 1))
        self._remember(session_id, live)
        if (session_id not in self._folds
                and (len(live.changes) > MAX_PENDING
                     or sum(c for _, c in live.changes) > PENDING_SHARE * live.whole_chars)):
            fold = asyncio.create_task(self._fold(session_id, live))
            self._folds[session_id] = fold
            fold.add_done_callback(lambda _: self._folds.pop(session_id, None))
        return True

    async def _fold(self, session_id: str, live: LiveSession) -> None:
        """Write `live`'s state whole at its version (module doc); what is cached of the
        session then counts only the changes after it. A failure is logged: the changes
        stay, and the next change tries again."""
        version = live.session.version
        try:
            rec = await asyncio.to_thread(_record, session_id, live)
            if not await self.store.run(self.store.session_fold, session_id, version,
                                        rec.request_json, rec.plan_json):
                return
        except Exception:
            log.warning("could not write session %s whole", session_id, exc_info=True)
            return
        current = self._live.get(session_id)
        if current is not None and current.whole_version < version:
            current.whole_version, current.whole_chars = version, len(rec.request_json)
            current.changes = tuple(c for c in current.changes if c[0] > version)

    async def _expire_once(self) -> None:
        cutoff = time.time() - self.settings.ttl_s
        for sid in [k for k, v in self._live.items() if v.updated_at < cutoff]:
            self._live.pop(sid, None)
        n = await self.store.run(self.store.session_expire, cutoff)
        if n:
            log.info("expired %d planning sessions", n)

    async def _expire_loop(self) -> None:
        await expire_periodically(self.settings.ttl_s, self._expire_once, "old sessions")


def _commit(session: PlanningSession, result: PlanJSON) -> PlanningSession:
    """`session` once the worker's plan is committed, as the worker committed it
    (`CommitDelta`); when the worker sent no delta that fits, the plan parsed and
    committed as validated (the collector paused: a large plan's parse allocates hundreds
    of thousands of objects, and the collections it sets off cost 4x the parse)."""
    request = result.commit.apply(session.request) if result.commit is not None else None
    if request is not None:
        return PlanningSession(request, None, session.version + 1)
    draft = PlanningSession(session.request, None, session.version)
    with gc_paused():
        draft.commit(result.parse(), checked=True)
    draft.last_plan = None
    return draft


def _same(live: LiveSession, head: SessionHead) -> bool:
    """Whether the parsed session is the stored one (same version, same last change)."""
    return live.session.version == head.version and live.updated_at == head.updated_at


def _record(session_id: str, live: LiveSession) -> SessionRecord:
    """The session written whole (serialising its state: call it in a thread)."""
    s = live.session
    return SessionRecord(session_id, live.created_at, live.updated_at, s.version,
                         s.request.model_dump_json(), live.plan_json)


def _load(rec: SessionRecord) -> LiveSession:
    """A stored session, parsed back into memory (the collector paused: api/intake.py
    `load_payload`): its state as written whole, then its pending changes replayed (event
    batches applied, plans committed: each plan was validated against the state it
    answered, which the replay rebuilds)."""
    lines = rec.pending.splitlines()
    whole = rec.version - len(lines)
    plan_json = rec.plan_json
    with gc_paused():
        request = PlanRequest.model_validate_json(rec.request_json)
        session = PlanningSession(request, None, whole)
        for line in lines:
            if line.startswith("P"):
                plan_json = line[1:]
                session.commit(Plan.model_validate_json(plan_json), checked=True)
                session.last_plan = None
            else:  # applied and checked on this state when it was appended
                session.apply(EventBatch.model_validate_json(line[1:]).events, checked=True)
    return LiveSession(session, rec.created_at, rec.updated_at, plan_json, whole,
                       len(rec.request_json),
                       tuple((whole + k + 1, len(line) + 1) for k, line in enumerate(lines)))
