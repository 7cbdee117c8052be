"""Planning sessions over HTTP, against real uvicorn servers running the real solver:
create, events of every kind, 409s that change nothing, plans, TTL and restarts."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from models import Plan, PlanRequest
from solver.validate import validate_plan
from tests.api.conftest import Server, wait_for
from tests.solver.test_session import snapshot as solver_snapshot


def snapshot() -> dict[str, Any]:
    """The solver tests' session snapshot as wire JSON, with a short CP-SAT limit."""
    return solver_snapshot(time_limit_s=2).model_dump(mode="json", exclude_none=True)


#: One event of every kind, applying cleanly to `snapshot()` in this order.
EVERY_KIND: list[dict[str, Any]] = [
    {"kind": "job_submitted", "job": {"name": "big", "gpus": 3, "weight": 2.0}},
    {"kind": "job_finished", "job": "run"},
    {"kind": "job_cancelled", "job": "wait"},
    {"kind": "job_resized", "job": "big", "gpus": 2},
    {"kind": "node_added", "node": {"name": "n3", "gpus": [
        {"index": 0, "model": "A100-SXM4-80GB"}, {"index": 1, "model": "A100-SXM4-80GB"}]}},
    {"kind": "node_cordoned", "node": "n3"},
    {"kind": "node_cordoned", "node": "n3", "cordoned": False},
    {"kind": "gpu_unhealthy", "node": "n1", "gpu": 3},
    {"kind": "gpu_healthy", "node": "n1", "gpu": 3},
    {"kind": "gpu_unhealthy", "node": "n1", "gpu": 2},
    {"kind": "mig_layout_changed", "node": "n2", "gpu": 1, "mig_instances": [
        {"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]},
    {"kind": "job_submitted", "job": {"name": "half", "gpu_share": 0.5}},
    {"kind": "node_removed", "node": "n3"},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The real solver on one worker."""
    srv = Server(tmp_path_factory.mktemp("sessions"), workers=1, planner="solver:plan",
                 max_time_limit_s=5, kill_grace_s=5, queue_size=4)
    srv.start()
    yield srv
    srv.stop()


def _open(c: httpx.Client, body: dict[str, Any] | None = None) -> str:
    r = c.post("/v1/sessions", json=body or snapshot())
    assert r.status_code == 201, r.text
    sid: str = r.json()["id"]
    assert r.json()["url"] == f"/v1/sessions/{sid}"
    return sid


def _state(c: httpx.Client, sid: str) -> dict[str, Any]:
    r = c.get(f"/v1/sessions/{sid}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_events_of_every_kind_then_a_plan_equal_to_a_cold_solve(server: Server) -> None:
    with server.client() as c:
        sid = _open(c)
        r = c.post(f"/v1/sessions/{sid}/events", json={"events": EVERY_KIND})
        assert r.status_code == 200, r.text
        assert r.json()["version"] == 1
        state = PlanRequest.model_validate(_state(c, sid)["request"])
        assert [j.name for j in state.jobs] == ["small", "big", "half"]
        assert [n.name for n in state.cluster.nodes] == ["n1", "n2"]
        assert next(j for j in state.jobs if j.name == "big").gpus == 2
        r = c.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": 3})
        assert r.status_code == 200, r.text
        plan = Plan.model_validate(r.json())
        assert validate_plan(state, plan) == []
        assert {a.job for a in plan.assignments} | {u.job for u in plan.unplaced} == \
            {"small", "big", "half"}
        cold = c.post("/v1/plans", json=state.model_dump(mode="json", exclude_none=True))
        assert cold.status_code == 200, cold.text
        assert plan.status == cold.json()["status"] == "optimal"
        assert plan.objective_value == pytest.approx(cold.json()["objective_value"], abs=1e-6)
        after = _state(c, sid)
        assert after["version"] == 2
        assert Plan.model_validate(after["last_plan"]) == plan
        placed = {a.job: a.placements for a in plan.assignments}
        for j in PlanRequest.model_validate(after["request"]).jobs:
            assert j.current == placed.get(j.name)  # the next plan starts from this one


@pytest.mark.parametrize(("batch", "index", "says"), [
    ([{"kind": "job_finished", "job": "ghost"}], 0, "no job 'ghost'"),
    ([{"kind": "job_submitted", "job": {"name": "x", "gpus": 1}},
      {"kind": "job_finished", "job": "run"}, {"kind": "job_finished", "job": "run"}],
     2, "event 2 (job_finished)"),
    ([{"kind": "job_cancelled", "job": "wait"}, {"kind": "node_removed", "node": "n9"}],
     1, "no node 'n9'"),
    ([{"kind": "gpu_unhealthy", "node": "n2", "gpu": 5}], 0, "no GPU 5"),
])
def test_a_batch_that_does_not_apply_is_409_and_changes_nothing(
        server: Server, batch: list[dict[str, Any]], index: int, says: str) -> None:
    with server.client() as c:
        sid = _open(c)
        before = _state(c, sid)
        r = c.post(f"/v1/sessions/{sid}/events", json={"events": batch})
        assert r.status_code == 409, r.text
        assert r.json()["code"] == "event_conflict"
        assert f"event {index} ({batch[index]['kind']})" in r.json()["detail"]
        assert says in r.json()["detail"]
        after = _state(c, sid)
        assert after["request"] == before["request"] and after["version"] == 0


def test_double_finish_across_batches_is_409(server: Server) -> None:
    with server.client() as c:
        sid = _open(c)
        finish = {"events": [{"kind": "job_finished", "job": "run"}]}
        assert c.post(f"/v1/sessions/{sid}/events", json=finish).status_code == 200
        r = c.post(f"/v1/sessions/{sid}/events", json=finish)
        assert r.status_code == 409 and "no job 'run'" in r.json()["detail"]


def test_bad_bodies_missing_sessions_and_delete(server: Server) -> None:
    with server.client() as c:
        sid = _open(c)
        r = c.post(f"/v1/sessions/{sid}/events",
                   json={"events": [{"kind": "job_finished", "job": "run", "extra": 1}]})
        assert r.status_code == 422
        assert r.json()["detail"][0]["loc"][:3] == ["body", "events", 0]
        r = c.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": -1})
        assert r.status_code == 422
        assert c.get("/v1/sessions/nope").status_code == 404
        assert c.post("/v1/sessions/nope/plan", json={}).status_code == 404
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        assert c.get(f"/v1/sessions/{sid}").status_code == 404
        assert c.delete(f"/v1/sessions/{sid}").status_code == 404
        r = c.post("/v1/sessions", json={**snapshot(), "jobs": [{"name": "j"}]})
        assert r.status_code == 422


def test_sessions_expire_after_their_ttl(tmp_path: Path) -> None:
    srv = Server(tmp_path, workers=1, session_ttl_s=1).start()
    try:
        with srv.client() as c:
            sid = _open(c)
            assert c.get(f"/v1/sessions/{sid}").status_code == 200
            wait_for(lambda: c.get(f"/v1/sessions/{sid}").status_code == 404, timeout=60)
            r = c.post(f"/v1/sessions/{sid}/events",
                       json={"events": [{"kind": "job_cancelled", "job": "wait"}]})
            assert r.status_code == 404
    finally:
        srv.stop()


def test_sessions_survive_a_restart(tmp_path: Path) -> None:
    first = Server(tmp_path, workers=1, planner="solver:plan", max_time_limit_s=5,
                   kill_grace_s=5).start()
    try:
        with first.client() as c:
            sid = _open(c)
            assert c.post(f"/v1/sessions/{sid}/events", json={"events": EVERY_KIND[:3]}
                          ).status_code == 200
            plan = c.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": 2})
            assert plan.status_code == 200, plan.text
            before = _state(c, sid)
    finally:
        first.stop()
    second = Server(tmp_path, workers=1, planner="solver:plan", max_time_limit_s=5,
                    kill_grace_s=5).start()
    try:
        with second.client() as c:
            after = _state(c, sid)
            assert after["version"] == before["version"] == 2
            assert after["request"] == before["request"]
            assert after["last_plan"] == plan.json()
            r = c.post(f"/v1/sessions/{sid}/events",
                       json={"events": [{"kind": "job_cancelled", "job": "big"}]})
            assert r.status_code == 200 and r.json()["version"] == 3
            again = c.post(f"/v1/sessions/{sid}/plan", json={})
            assert again.status_code == 200, again.text
            state = PlanRequest.model_validate(after["request"])
            # the restarted session plans from the stored state (big cancelled)
            assert "big" not in {a.job for a in Plan.model_validate(again.json()).assignments}
            assert len(state.jobs) == 2
    finally:
        second.stop()


def test_concurrent_plans_on_one_session_are_serialised(server: Server) -> None:
    """Two plans sent at once on one session both answer and both are committed."""
    with server.client() as c:
        sid = _open(c)

        def plan_once(_: int) -> int:
            return c.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": 1}).status_code

        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(plan_once, range(2))) == [200, 200]
        assert _state(c, sid)["version"] == 2


def test_changes_appended_to_the_row_replay_after_a_restart(tmp_path: Path) -> None:
    """Event batches and plans are stored as changes (the state is not written whole) and
    the state is written whole again (folded) once they outgrow it; a restarted server
    replays the changes since into the same state, and its plans continue from there."""
    from api.store import open_store

    first = Server(tmp_path, workers=1, planner="solver:plan", max_time_limit_s=5,
                   kill_grace_s=5).start()
    seen_pending = False
    try:
        with first.client() as c:
            sid = _open(c, solver_snapshot(solver="heuristic", time_limit_s=1).model_dump(
                mode="json", exclude_none=True))
            for r in range(4):
                batch = [{"kind": "job_submitted", "job": {"name": f"j{r}", "gpus": 1}},
                         {"kind": "job_cancelled", "job": "wait" if r == 0 else f"j{r - 1}"}]
                assert c.post(f"/v1/sessions/{sid}/events", json={"events": batch}
                              ).status_code == 200
                store = open_store(f"sqlite:///{tmp_path / 'gpuplan.db'}")
                try:
                    rec = store.session_get(sid)
                finally:
                    store.close()
                assert rec is not None and rec.version == 2 * r + 1
                seen_pending = seen_pending or rec.pending != ""
                plan = c.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": 1})
                assert plan.status_code == 200, plan.text
            before = _state(c, sid)
    finally:
        first.stop()  # waits for the folds under way
    assert seen_pending
    store = open_store(f"sqlite:///{tmp_path / 'gpuplan.db'}")
    try:
        rec = store.session_get(sid)
    finally:
        store.close()
    # folded at least once: the state written whole is past the snapshot's version 0
    assert rec is not None and 0 < rec.version - len(rec.pending.splitlines()) <= 8
    second = Server(tmp_path, workers=1, planner="solver:plan", max_time_limit_s=5,
                    kill_grace_s=5).start()
    try:
        with second.client() as c:
            after = _state(c, sid)
            assert after["version"] == before["version"] == 8
            assert after["request"] == before["request"]
            assert after["last_plan"] == before["last_plan"]
            again = c.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": 1})
            assert again.status_code == 200, again.text
            state = PlanRequest.model_validate(after["request"])
            assert validate_plan(state, Plan.model_validate(again.json())) == []
    finally:
        second.stop()


def test_a_session_the_worker_no_longer_holds_is_sent_whole(server: Server) -> None:
    """The worker keeps the last few sessions it planned: after it planned more than that,
    the first session's next plan finds it gone (a stale answer), is sent again with the
    whole state, and answers as usual from the session's current state."""
    from api.session_worker import HELD

    with server.client() as c:
        sids = [_open(c) for _ in range(HELD + 1)]
        for sid in sids:
            r = c.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": 1})
            assert r.status_code == 200, r.text
        first = sids[0]
        assert c.post(f"/v1/sessions/{first}/events", json={"events": EVERY_KIND[:2]}
                      ).status_code == 200
        state = PlanRequest.model_validate(_state(c, first)["request"])
        r = c.post(f"/v1/sessions/{first}/plan", json={"time_limit_s": 1})
        assert r.status_code == 200, r.text
        plan = Plan.model_validate(r.json())
        assert validate_plan(state, plan) == []
        assert {a.job for a in plan.assignments} | {u.job for u in plan.unplaced} == \
            {j.name for j in state.jobs}
        assert _state(c, first)["version"] == 3
