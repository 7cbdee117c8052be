"""Planning sessions across two `gpuplan serve` replicas sharing one real PostgreSQL: a
session opened on A is served by B (events, plans, reads), concurrent event batches on both
replicas all land, a plan whose session changed on the other replica meanwhile is refused
(409, nothing committed), and a session expires for every replica."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.api.conftest import Server, wait_for
from tests.api.store.conftest import PgServer
from tests.api.store.test_replicas import replica
from tests.api.test_service import tiny
from tests.api.test_sessions import _state

TTL_S = 10.0  # sliding: each step below renews it; the expiry test ages its row past it


@pytest.fixture(scope="module")
def pair(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[Server, Server]]:
    """Replicas A and B (fake planner, one worker each) on one fresh database."""
    url = pg_server.new_database()
    tmp: Path = tmp_path_factory.mktemp("session-replicas")
    a = replica(tmp, url, "a", session_ttl_s=TTL_S).start()
    b = replica(tmp, url, "b", session_ttl_s=TTL_S).start()
    yield a, b
    a.stop()
    b.stop()


def _open(c: httpx.Client, *jobs: str) -> str:
    r = c.post("/v1/sessions", json=tiny(*jobs, time_limit=0.1))
    assert r.status_code == 201, r.text
    sid: str = r.json()["id"]
    return sid


def _submit(name: str) -> dict[str, Any]:
    return {"events": [{"kind": "job_submitted", "job": {"name": name, "gpus": 1}}]}


def test_a_session_opened_on_a_is_served_by_b(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with a.client() as ca, b.client() as cb:
        sid = _open(ca, "first")
        assert _state(cb, sid)["version"] == 0
        r = cb.post(f"/v1/sessions/{sid}/events", json=_submit("second"))
        assert r.status_code == 200 and r.json()["version"] == 1
        plan = cb.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": 0.1})
        assert plan.status_code == 200, plan.text
        assert {u["job"] for u in plan.json()["unplaced"]} == {"first", "second"}
        on_a = _state(ca, sid)  # A had the session parsed at version 0: it reloads
        assert on_a["version"] == 2 and on_a["last_plan"] == plan.json()
        assert [j["name"] for j in on_a["request"]["jobs"]] == ["first", "second"]
        r = ca.post(f"/v1/sessions/{sid}/events", json=_submit("second"))
        assert r.status_code == 409 and r.json()["code"] == "event_conflict"
        assert "event 0 (job_submitted)" in r.json()["detail"]
        assert cb.delete(f"/v1/sessions/{sid}").status_code == 204
        assert ca.get(f"/v1/sessions/{sid}").status_code == 404
        assert ca.post(f"/v1/sessions/{sid}/plan", json={}).status_code == 404


def test_concurrent_batches_on_both_replicas_all_land(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with a.client() as ca, b.client() as cb:
        sid = _open(ca, "seed")
        _state(cb, sid)  # both replicas hold the session parsed at version 0

        def post(i: int) -> tuple[int, str]:
            c = ca if i % 2 else cb
            r = c.post(f"/v1/sessions/{sid}/events", json=_submit(f"j{i}"))
            return r.status_code, r.text

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(post, range(24)))
        assert [code for code, _ in answers] == [200] * 24, answers
        state = _state(ca, sid)
        assert state["version"] == 24
        assert sorted(j["name"] for j in state["request"]["jobs"]) == \
            sorted(["seed", *(f"j{i}" for i in range(24))])
        assert _state(cb, sid) == state


def test_a_plan_is_not_committed_over_a_change_made_meanwhile(
        pair: tuple[Server, Server]) -> None:
    a, b = pair
    with a.client() as ca, b.client() as cb:
        sid = _open(ca, "slow")
        with ThreadPoolExecutor(1) as pool:
            # the fake planner spins for the whole limit: the change lands meanwhile
            planning = pool.submit(ca.post, f"/v1/sessions/{sid}/plan",
                                   json={"time_limit_s": 3})
            wait_for(lambda: "gpuplan_solves_in_flight 1.0" in ca.get("/metrics").text
                     or planning.done(), timeout=30)
            r = cb.post(f"/v1/sessions/{sid}/events", json=_submit("meanwhile"))
            assert r.status_code == 200 and r.json()["version"] == 1
            answer = planning.result(60)
        assert answer.status_code == 409, answer.text
        assert answer.json()["code"] == "session_changed"
        assert "not committed" in answer.json()["detail"]
        state = _state(ca, sid)
        assert state["version"] == 1 and state["last_plan"] is None
        assert [j["name"] for j in state["request"]["jobs"]] == ["slow", "meanwhile"]
        again = ca.post(f"/v1/sessions/{sid}/plan", json={"time_limit_s": 0.1})
        assert again.status_code == 200 and _state(cb, sid)["version"] == 2


def test_a_session_expires_for_every_replica(pair: tuple[Server, Server]) -> None:
    """Reads do not renew a session; once its stored last change is `TTL_S` old, every
    replica answers 404. The row is aged by `TTL_S` (plus a second) in the database, which
    is what the replicas compare with their clock, instead of waiting `TTL_S` (10 s of
    wall time) out: a TTL longer than the setting, or one counted from anything but the
    row's last change, leaves the session alive and fails the test."""
    a, b = pair
    with a.client() as ca, b.client() as cb:
        sid = _open(ca, "idle")
        expires_at = _state(ca, sid)["expires_at"]
        for c in (cb, ca, cb):
            assert _state(c, sid)["expires_at"] == pytest.approx(expires_at, rel=0, abs=1e-6)
        with psycopg.connect(a.settings["db_url"], autocommit=True) as conn:
            conn.execute("UPDATE planning_sessions SET updated_at = updated_at - %s "
                         "WHERE id = %s", (TTL_S + 1.0, sid))
        assert cb.get(f"/v1/sessions/{sid}").status_code == 404
        assert ca.get(f"/v1/sessions/{sid}").status_code == 404
        r = ca.post(f"/v1/sessions/{sid}/events", json=_submit("late"))
        assert r.status_code == 404
