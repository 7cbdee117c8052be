"""The request intake (api/intake.py): bodies of /v1/plans and /v1/solves are validated and
capped in another process, which hands the worker the request pickled once; a dead intake
process costs one 503 and is replaced."""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import signal
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.intake import PreparedRequest, cap_request, prepare_body
from api.robustness import http_corpus
from api.routers.body import suspect
from api.settings import Settings
from benchmarks.generator import generate
from models import PlanRequest
from tests.api.conftest import Server, wait_for
from tests.api.test_service import state_of, submit, tiny


def test_a_body_is_prepared_once_capped_and_hashed() -> None:
    settings = Settings(max_time_limit_s=2, solver_threads=1, max_jobs=10_000)
    request = generate("S", 3)
    body = request.model_copy(update={"policy": request.policy.model_copy(
        update={"time_limit_s": 30, "threads": 8})}).model_dump_json().encode()
    out = prepare_body(body, settings, record=True)
    assert isinstance(out, PreparedRequest)
    loaded = out.load()
    assert loaded == cap_request(PlanRequest.model_validate_json(body), 2, 1)
    assert loaded.policy.time_limit_s == out.time_limit_s == 2 and loaded.policy.threads == 1
    assert out.solver == loaded.policy.solver
    assert out.request_json is not None and PlanRequest.model_validate_json(
        out.request_json) == loaded
    assert out.request_hash == hashlib.sha256(out.request_json.encode()).hexdigest()
    assert pickle.loads(out.payload) == loaded
    unrecorded = prepare_body(body, settings, record=False)
    assert isinstance(unrecorded, PreparedRequest) and unrecorded.request_json is None


@pytest.mark.parametrize(("body", "loc"), [
    (b'{"cluster": ', ("body", 12)),
    (json.dumps({**tiny(), "jobs": [{"name": f"j{i}", "gpus": 1} for i in range(11)]}
                ).encode(), ("body", "jobs")),
    (json.dumps({**tiny(), "policy": {"time_limit_s": "1"}}).encode(),
     ("body", "policy", "time_limit_s")),
    (b'{"jobs": [{"weight": NaN}]}', ("body", "jobs", 0, "weight")),
])
def test_a_bad_body_comes_back_as_the_routes_errors(body: bytes, loc: tuple[object, ...]
                                                    ) -> None:
    out = prepare_body(body, Settings(max_jobs=10), record=False)
    assert isinstance(out, list) and loc in [e["loc"] for e in out]
    pickle.loads(pickle.dumps(out))  # they cross the process boundary


@given(st.from_regex(r"-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?[eE][+-]?0{0,3}[0-9]{1,4}",
                     fullmatch=True), st.sampled_from(["{{\"w\": {}}}", "[1, {}]", "{}"]))
def test_every_number_python_reads_as_infinite_makes_a_body_suspect(number: str,
                                                                    where: str) -> None:
    body = where.format(number).encode()
    if not math.isfinite(float(number)):
        assert suspect(body)
    assert suspect(b'{"w": ' + number.encode() + b', "n": NaN}')


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"name": "Ee123", "e999": 1.0, "x": 1e-05, "y": 2.5E+99}', False),
    (b'{"a": -Infinity}', True),
    (b'{"a": [1, 2E+0400]}', True),
])
def test_suspect_bodies(body: bytes, expected: bool) -> None:
    assert suspect(body) is expected


def test_a_killed_intake_process_is_replaced(fake_server: Server) -> None:
    with fake_server.client() as c:
        assert c.post("/v1/plans", json=tiny()).status_code == 200
        pids = fake_server.intake_pids()
        assert len(pids) == 1
        os.kill(pids[0], signal.SIGKILL)
        wait_for(lambda: not set(fake_server.intake_pids()) & set(pids))
        codes = [c.post("/v1/plans", json=tiny()).status_code for _ in range(3)]
        assert codes in ([503, 200, 200], [200, 200, 200]), codes
        r = c.post("/v1/plans", json={**tiny(), "jobs": [{"name": "x", "gpus": "1"}]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == \
            ["body", "jobs", 0, "gpus"]
        # Plans that found a worker idle skipped the intake; it was replaced all the same.
        wait_for(lambda: len(fake_server.intake_pids()) == 1)
        assert not set(fake_server.intake_pids()) & set(pids)


def _bad_bodies() -> list[tuple[str, bytes, dict[str, str]]]:
    """The robustness corpus's PlanRequest bodies, and bodies FastAPI itself refuses."""
    js = {"Content-Type": "application/json"}
    out = [(c.name, c.body, {"Content-Type": c.content_type}) for c in http_corpus()
           if c.path in ("/v1/plans", "/v1/solves")]
    good = json.dumps(tiny()).encode()
    return [*out,
            ("empty", b"", js), ("empty, no type", b"", {}), ("text/plain", good,
                                                               {"Content-Type": "text/plain"}),
            ("form", b"a=1", {"Content-Type": "application/x-www-form-urlencoded"}),
            ("no content type", good, {}), ("null", b"null", js), ("list", b"[]", js),
            ("number", b"123", js), ("malformed", b'{"cluster": [1,', js),
            ("extra field", json.dumps({**tiny(), "zzz": 1}).encode(), js),
            ("over max_jobs", json.dumps(tiny(*(f"j{i}" for i in range(11)))).encode(), js),
            ("duplicate job", json.dumps(tiny("a", "a")).encode(), js)]


def test_the_intake_answers_the_same_422_as_an_in_process_parse(fake_server: Server) -> None:
    """`POST /v1/sessions` parses the same PlanRequest in the API process (api/routers/
    body.py): every bad body gets the very same answer from the intake of /v1/plans and
    /v1/solves."""
    with fake_server.client() as c:
        for name, body, headers in _bad_bodies():
            ref = c.post("/v1/sessions", content=body, headers=headers)
            assert ref.status_code in (413, 422), (name, ref.text)
            for path in ("/v1/plans", "/v1/solves"):
                r = c.post(path, content=body, headers=headers)
                assert (r.status_code, r.json()) == (ref.status_code, ref.json()), (name, path)


def test_intake_processes_end_with_a_killed_server(tmp_path: Path) -> None:
    server = Server(tmp_path, workers=1).start()
    try:
        intake = server.intake_pids()
        assert len(intake) == 1
    finally:
        server.stop(signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{intake[0]}").exists()
             or _state(intake[0]) == "Z", timeout=30)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_an_idle_worker_validates_the_body_itself(fake_server: Server) -> None:
    """A synchronous plan that finds a worker idle skips the intake: with the intake
    process stopped, plans are still answered, and bad bodies get the same 422s (field
    paths, server limits) from the worker."""
    with fake_server.client() as c:
        assert c.post("/v1/plans", json=tiny()).status_code == 200
        (pid,) = fake_server.intake_pids()
        os.kill(pid, signal.SIGSTOP)
        try:
            r = c.post("/v1/plans", json=tiny("a", "b"))
            assert r.status_code == 200, r.text
            assert sorted(u["job"] for u in r.json()["unplaced"]) == ["a", "b"]
            r = c.post("/v1/plans", json={**tiny(), "jobs": [{"name": "x", "gpus": "1"}]})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == \
                ["body", "jobs", 0, "gpus"]
            r = c.post("/v1/plans", json=tiny(*(f"j{i}" for i in range(11))))
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "jobs"]
        finally:
            os.kill(pid, signal.SIGCONT)
        assert c.post("/v1/plans", json=tiny()).status_code == 200


def _timing(r: httpx.Response) -> dict[str, float]:
    """The answer's Server-Timing as milliseconds by stage."""
    return {m.split(";")[0].strip(): float(m.split("dur=")[1].split(";")[0])
            for m in r.headers["server-timing"].split(",")}


def test_server_timing_names_the_path_a_plan_took(fake_server: Server) -> None:
    """An idle worker validates the body itself; with every worker busy the body goes
    through the intake and the worker unpickles it; either way the stages fit in the
    total."""
    with fake_server.client() as c:
        idle = _timing(c.post("/v1/plans", json=tiny()))
        busy = [submit(c, tiny("spin", time_limit=1.0)) for _ in range(2)]
        wait_for(lambda: all(state_of(c, b) == "running" for b in busy))
        queued = _timing(c.post("/v1/plans", json=tiny()))
    assert list(idle) == ["read", "queue", "hop", "validate", "solve", "serialise", "back",
                          "total"]
    assert list(queued) == ["read", "intake", "queue", "hop", "unpickle", "solve",
                            "serialise", "back", "total"]
    for stages in (idle, queued):
        assert stages["solve"] >= 50  # the fake planner spins for its 0.05 s limit
        assert sum(v for k, v in stages.items() if k != "total") <= stages["total"] + 0.1
