"""The store's interface: `SolveRecord`, `SessionRecord`, the `SolveStore` Protocol, errors.

A store keeps one row per async solve and one per planning session, shared by every replica
that points at the same database. The rules of solves, which every implementation enforces
in the database itself:

- a record only moves forward (queued -> running -> done/failed/cancelled); a finished
  record is written once and never changed again, so a late write of a replica that lost
  its lease cannot overwrite the verdict of another;
- a queued or running record carries its owner (the replica running it) and a heartbeat
  time taken from the database's clock (so replicas never compare their own clocks); a
  record whose heartbeat is older than the lease is failed by any other replica (`reap`);
- a cancel asked of a replica that does not run the solve sets a flag that the owner reads
  with its heartbeat (`request_cancel`, then `heartbeat` returns the id).

A planning session's head row carries a version, raised by one at every change; a change
is written only over the version it was made from (`session_update` writes the session
whole, `session_append` adds one change in a row of its own, `session_fold` writes the
state whole at a version already reached; optimistic concurrency),
so two replicas changing one session at once never lose either change silently: the
second write finds another version and its replica re-reads the session.

Every method is blocking; async code calls them through `run`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from api.pool import TaskState
from models import PlanRequest

T = TypeVar("T")

#: States of a solve that is not finished yet.
LIVE_STATES: tuple[TaskState, ...] = (TaskState.queued, TaskState.running)


class StoreError(Exception):
    """The store cannot be opened or used; the message is one line meant for an operator."""


class SchemaTooNew(StoreError):
    """The database was migrated by a newer gpuplan than this one."""


@dataclass(frozen=True, slots=True)
class SolveRecord:
    """One async solve as stored (and as answered, with `plan_is_final`); `plan_json` is the
    final plan, or the best so far of a running or stopped solve; `owner` is the replica
    that runs (or ran) it."""

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
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class SessionHead:
    """A planning session's version and timestamps, without its state."""

    id: str
    created_at: float
    updated_at: float
    version: int


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One planning session as stored: its state as request JSON and its last plan as JSON,
    as last written whole, then `pending`: the changes made since, one line each (an event
    batch or a committed plan, api/sessions.py), which give the current state when
    replayed on it (so the state written whole is at `version` minus their number)."""

    id: str
    created_at: float
    updated_at: float
    version: int
    request_json: str
    plan_json: str | None = None
    pending: str = ""

    @property
    def head(self) -> SessionHead:
        """The version and timestamps alone."""
        return SessionHead(self.id, self.created_at, self.updated_at, self.version)


class SolveStore(Protocol):
    """What the solve and session services need of a database (SQLite or PostgreSQL)."""

    #: Where the data lives, safe to log (no password).
    description: str

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking method of the store off the event loop."""

    def close(self) -> None:
        """Finish pending calls and close every connection."""

    def ping(self) -> bool:
        """True when the database answers."""

    def schema_version(self) -> int:
        """The schema version recorded in the database."""

    def put(self, rec: SolveRecord) -> bool:
        """Insert or move a record forward (renewing its lease while it is live); False
        when the stored record is already further along (finished records never change)."""

    def put_request(self, solve_id: str, request_json: str) -> None:
        """Keep the request a solve answers, as JSON (the plan view draws its cluster)."""

    def get_request(self, solve_id: str) -> PlanRequest | None:
        """The request of a solve, or None."""

    def get(self, solve_id: str) -> SolveRecord | None:
        """The record with this id, or None."""

    def recent(self, limit: int) -> list[SolveRecord]:
        """The `limit` most recent records, newest first."""

    def expire(self, older_than: float) -> int:
        """Delete finished records whose last change is before `older_than`; the count."""

    def heartbeat(self, owner: str, incumbents: Mapping[str, str]) -> list[str]:
        """Renew the lease of `owner`'s live records, store the best plans so far of its
        running ones (id -> plan JSON), and return the ids of those with a cancel request."""

    def request_cancel(self, solve_id: str) -> bool:
        """Ask the owner of a live solve to cancel it; False when it is not live."""

    def reap(self, lease_s: float, reaper: str) -> int:
        """Fail the live records of other owners whose lease (`lease_s` since the last
        heartbeat) ran out; the count."""

    def session_create(self, rec: SessionRecord) -> None:
        """Insert a new planning session."""

    def session_head(self, session_id: str) -> SessionHead | None:
        """A session's version and timestamps (no state), or None."""

    def session_get(self, session_id: str) -> SessionRecord | None:
        """The session with this id, or None."""

    def session_update(self, rec: SessionRecord, expected_version: int) -> bool:
        """Write `rec` over the stored session if its version is still `expected_version`;
        False when another change came first (or the session is gone)."""

    def session_append(self, session_id: str, expected_version: int, updated_at: float,
                       change: str) -> bool:
        """Add `change` (one line) to the session's pending changes and raise its version
        by one if it is still `expected_version` (the state written whole is not
        rewritten); False otherwise."""

    def session_fold(self, session_id: str, version: int, request_json: str,
                     plan_json: str | None) -> bool:
        """Write the session's state at `version` (request and last plan JSON) whole and
        drop its changes up to that version, if the state stored whole is older; the
        version and timestamps stay. False when nothing was written."""

    def session_delete(self, session_id: str) -> bool:
        """Delete a session; True when it existed."""

    def session_expire(self, older_than: float) -> int:
        """Delete the sessions last changed before `older_than`; the count."""
