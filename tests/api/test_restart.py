"""Async solve records survive a restart (SQLite); the store's recovery and expiry."""

from __future__ import annotations

import time
from pathlib import Path

from api.pool import TaskState
from api.store import SolveRecord, SolveStore
from models import Plan
from tests.api.conftest import Server, wait_for
from tests.api.test_service import state_of, submit, tiny


def test_restart_keeps_finished_results(tmp_path: Path) -> None:
    server = Server(tmp_path, workers=1, queue_size=4, kill_grace_s=0.5)
    server.start()
    try:
        with server.client() as c:
            done_id = submit(c, tiny("kept", time_limit=0.1))
            done = wait_for(lambda: (s := c.get(f"/v1/solves/{done_id}").json())["state"]
                            == "done" and s)
            running_id = submit(c, tiny("hang-at-stop", time_limit=30))
            queued_id = submit(c, tiny("hang-queued", time_limit=30))
            wait_for(lambda: state_of(c, running_id) == "running")
        server.stop()  # graceful: live solves are stopped and recorded as cancelled
        server.start()
        with server.client() as c:
            again = c.get(f"/v1/solves/{done_id}").json()
            stopped = [c.get(f"/v1/solves/{i}").json() for i in (running_id, queued_id)]
            listed = [s["id"] for s in c.get("/v1/solves").json()["solves"]]
    finally:
        server.stop()
    assert again["state"] == "done"
    assert again["plan"] == done["plan"]
    assert again["plan_is_final"] is True
    assert again["finished_at"] == done["finished_at"]
    assert [s["state"] for s in stopped] == ["cancelled", "cancelled"]
    assert stopped[0]["started_at"] is not None and stopped[1]["started_at"] is None
    assert listed == [queued_id, running_id, done_id]


def _rec(solve_id: str, state: TaskState, created: float,
         finished: float | None = None) -> SolveRecord:
    plan = Plan(status="heuristic", solver="fake", objective_value=1.5).model_dump_json()
    return SolveRecord(id=solve_id, request_hash="h" * 64, state=state, backend="auto",
                       created_at=created, finished_at=finished,
                       plan_json=plan if state == TaskState.done else None)


def test_store_recovery_and_expiry(tmp_path: Path) -> None:
    now = time.time()
    store = SolveStore(tmp_path / "sub" / "solves.db")
    store.put(_rec("old", TaskState.done, now - 100, now - 90))
    store.put(_rec("new", TaskState.done, now - 5, now - 1))
    store.put(_rec("run", TaskState.running, now - 200))
    store.close()

    store = SolveStore(tmp_path / "sub" / "solves.db")  # as after a crash
    assert store.ping()
    new = store.get("new")
    assert new is not None and new.plan_json is not None
    assert Plan.model_validate_json(new.plan_json).objective_value == 1.5
    assert store.abandon_unfinished(now) == 1
    run = store.get("run")
    assert run is not None and run.state == TaskState.failed and "restarted" in str(run.error)
    assert store.expire(now - 50) == 1  # "old" only; "run" finished just now
    assert store.get("old") is None
    assert [r.id for r in store.recent(10)] == ["new", "run"]
    assert [r.id for r in store.recent(1)] == ["new"]
    store.close()
