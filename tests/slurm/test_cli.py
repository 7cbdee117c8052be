"""`gpuplan slurm snapshot|apply|sync` on recorded files, and planning through the service."""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from api.slurm import (
    SnapshotOptions,
    file_source,
    live_source,
    local_planner,
    service_planner,
    sync_once,
)
from api.slurm.sync import (
    PlannerUnavailable,
    SlurmUnavailable,
    parse_interval,
    read_command_json,
    sync_loop,
)
from models import Plan, PlanRequest
from tests.k8s.conftest import server_url  # noqa: F401  (the live-service fixture, shared)
from tests.slurm.conftest import FIXTURES

runner = CliRunner()
SINFO = str(FIXTURES / "sinfo_22.05.json")
SQUEUE = str(FIXTURES / "squeue_22.05.json")


def test_snapshot_writes_request_and_warns(tmp_path: Path) -> None:
    out = tmp_path / "request.json"
    r = runner.invoke(app, ["slurm", "snapshot", "--sinfo", SINFO, "--squeue", SQUEUE,
                            "-o", str(out)])
    assert r.exit_code == 0, r.output
    req = PlanRequest.model_validate_json(out.read_text())
    assert {j.name for j in req.jobs} == {"1", "2#0", "2#1", "2#2", "3"}
    lines = r.stderr.strip().splitlines()
    assert lines and all(line.startswith("gpuplan: warning: ") for line in lines)
    r = runner.invoke(app, ["slurm", "snapshot", "--sinfo", SINFO, "--squeue", SQUEUE,
                            "--strict"])
    assert r.exit_code == 2 and "--strict" in r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(("args", "message"), [
    (["--sinfo", SINFO], "--squeue FILE"),
    (["--live", "--sinfo", SINFO], "not both"),
    (["--sinfo", SQUEUE, "--squeue", SQUEUE], "sinfo: nodes: expected sinfo --json"),
    (["--sinfo", SINFO, "--squeue", SINFO], "squeue: jobs: expected squeue --json"),
    (["--sinfo", SINFO, "--squeue", SQUEUE, "--gres-type", "a100"], "TYPE=MODEL"),
    (["--sinfo", SINFO, "--squeue", SQUEUE, "--qos-weight", "high=-1"], "> 0"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str,
                                          tmp_path: Path) -> None:
    r = runner.invoke(app, ["slurm", "snapshot", *args])
    assert r.exit_code == 2, r.output
    assert message in r.stderr and "Traceback" not in r.stderr


def test_unreadable_file_exits_1_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = runner.invoke(app, ["slurm", "snapshot", "--sinfo", str(bad), "--squeue", SQUEUE])
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1


def test_apply_prints_the_commands(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    req = tmp_path / "req.json"
    assert runner.invoke(app, ["slurm", "snapshot", "--sinfo", SINFO, "--squeue", SQUEUE,
                               "-o", str(req)]).exit_code == 0
    assert runner.invoke(app, ["solve", str(req), "-o", str(plan)]).exit_code == 0
    r = runner.invoke(app, ["slurm", "apply", str(plan), "--sinfo", SINFO, "--squeue", SQUEUE])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("scontrol update JobId=3 'Comment=gpuplan: insufficient_capacity")
    r = runner.invoke(app, ["slurm", "apply", str(plan), "--sinfo", SINFO, "--squeue", SQUEUE,
                            "--json"])
    assert json.loads(r.stdout)["actions"][0]["kind"] == "comment"


def test_apply_rejects_a_bad_plan(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"status": "nope"}')
    r = runner.invoke(app, ["slurm", "apply", str(plan), "--sinfo", SINFO, "--squeue", SQUEUE])
    assert r.exit_code == 2 and "status" in r.stderr


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("2m", 120), ("1h", 3600),
                                               ("90", 90), ("0.5s", 0.5)])
def test_parse_interval(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["0s", "-1m", "soon", "nan", "inf"])
def test_sync_rejects_bad_intervals(text: str) -> None:
    with pytest.raises(ValueError):
        parse_interval(text)
    r = runner.invoke(app, ["slurm", "sync", "--every", text])
    assert r.exit_code == 2 and "--every" in r.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_sync_plans_through_the_service(server_url: str) -> None:  # noqa: F811
    source = file_source(FIXTURES / "sinfo_22.05.json", FIXTURES / "squeue_22.05.json")
    remote = sync_once(source, service_planner(server_url), SnapshotOptions())
    local = sync_once(source, local_planner(), SnapshotOptions())
    assert isinstance(remote.plan, Plan)
    assert [u.job for u in remote.plan.unplaced] == [u.job for u in local.plan.unplaced] == ["3"]
    assert [a.line() for a in remote.actions.actions] == [a.line() for a in
                                                          local.actions.actions]
    closed = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(PlannerUnavailable):
        service_planner(closed, timeout=5)(remote.snapshot.request)


def test_sync_loop_survives_failed_rounds(tmp_path: Path) -> None:
    missing = file_source(tmp_path / "no-sinfo.json", tmp_path / "no-squeue.json")
    rounds: list[object] = []
    failures = sync_loop(missing, local_planner(), SnapshotOptions(), every=0.01, rounds=3,
                         on_round=rounds.append)
    assert failures == 3 and rounds == []
    good = file_source(FIXTURES / "sinfo_22.05.json", FIXTURES / "squeue_22.05.json")
    assert sync_loop(good, local_planner(), SnapshotOptions(), every=0.01, rounds=2,
                     on_round=rounds.append) == 0
    assert len(rounds) == 2


def test_slurm_unreachable_is_one_line_and_exit_1(tmp_path: Path) -> None:
    fake = tmp_path / "sinfo"
    fake.write_text("#!/bin/sh\necho 'sinfo: error: first' >&2\necho 'sinfo: fatal: second' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SlurmUnavailable) as err:
        read_command_json([str(fake), "--json"])
    assert "\n" not in str(err.value) and "first sinfo: fatal: second" in str(err.value)


def test_live_source_falls_back_to_scontrol_for_nodes() -> None:
    sinfo = json.loads((FIXTURES / "sinfo_22.05.json").read_text())
    squeue = json.loads((FIXTURES / "squeue_22.05.json").read_text())
    outputs = {"sinfo": {"sinfo": []}, "scontrol": sinfo, "squeue": squeue}
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> tuple[int, str]:
        calls.append(list(argv))
        return 0, json.dumps(outputs[argv[0]])

    nodes, jobs = live_source(runner=runner)()
    assert (nodes, jobs) == (sinfo, squeue)
    assert calls == [["sinfo", "--json"], ["scontrol", "--json", "show", "nodes"],
                     ["squeue", "--json"]]
