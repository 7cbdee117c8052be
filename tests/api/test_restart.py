"""Async solve records survive a restart (SQLite); the store itself is tested in
tests/api/store on both backends."""

from __future__ import annotations

from pathlib import Path

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
        server.stop()  # lifespan shutdown: live solves are stopped and recorded as failed
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
    assert [s["state"] for s in stopped] == ["failed", "failed"]
    assert "shut down before this solve finished" in stopped[0]["error"]
    assert "shut down before this solve started" in stopped[1]["error"]
    assert stopped[0]["started_at"] is not None and stopped[1]["started_at"] is None
    assert listed == [queued_id, running_id, done_id]
