"""`gpuplan batch` end to end: files, summary, CSV, exit codes, resume and Ctrl-C."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import api.cli.batch as batch_cli
from api.cli import app
from models import Plan, PlanRequest
from solver.validate import validate_plan
from tests.batch.conftest import BAD, GOOD
from tests.batch.fakes import greedy_solve

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


@pytest.fixture
def fake_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_cli, "solve_function", lambda: greedy_solve)


def _names(out: Path) -> set[str]:
    return {p.name.removesuffix(".plan.json") for p in out.glob("*.plan.json")}


def test_example_directory_with_the_real_solver(cli: CliRunner, mixed_dir: Path,
                                                tmp_path: Path) -> None:
    res = cli.invoke(app, ["batch", str(mixed_dir), "--out", str(tmp_path), "--jobs", "1",
                           "--summary-csv", str(tmp_path / "s.csv")])
    assert res.exit_code == 1, res.output
    assert _names(tmp_path) == GOOD
    tiny = PlanRequest.model_validate_json((mixed_dir / "tiny.json").read_text())
    plan = Plan.model_validate_json((tmp_path / "tiny.plan.json").read_text())
    assert validate_plan(tiny, plan) == []
    assert "queue.jsonl:3: invalid JSON" in res.stderr
    assert "bad-gpus.json: jobs.1.gpus:" in res.stderr
    rows = list(csv.DictReader((tmp_path / "s.csv").read_text().splitlines()))
    assert {r["name"] for r in rows} == GOOD | BAD
    assert {r["name"] for r in rows if r["status"] == "failed"} == BAD
    assert "8 of 8 requests" in res.stdout
    assert "gpuplan batch" in res.stdout


def test_all_good_exits_zero_then_resume_skips(cli: CliRunner, mixed_dir: Path,
                                               tmp_path: Path, fake_solver: None) -> None:
    args = ["batch", str(mixed_dir / "tiny.json"), str(mixed_dir / "mig-puzzle.request.json"),
            "--out", str(tmp_path), "--jobs", "1"]
    res = cli.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert _names(tmp_path) == {"tiny", "mig-puzzle"}
    res = cli.invoke(app, [*args, "--resume"])
    assert res.exit_code == 0
    assert res.stderr.count("kept from earlier run") == 2


@pytest.mark.parametrize(("extra", "message"), [
    (["--set", "policy.objective"], "expected FIELD=VALUE"),
    (["--backend", "spark"], "unknown backend 'spark'"),
    (["--add-nodes", "/nonexistent.json"], "cannot read"),
    (["--set", "policy.seed=1,1"], "share the label"),
])
def test_bad_arguments_exit_2(cli: CliRunner, mixed_dir: Path, tmp_path: Path,
                              extra: list[str], message: str) -> None:
    res = cli.invoke(app, ["batch", str(mixed_dir / "tiny.json"), "--out", str(tmp_path),
                           *extra])
    assert res.exit_code == 2
    assert message in res.stderr
    assert not list(tmp_path.glob("*.plan.json"))


def test_bad_input_paths_and_usage_exit_2(cli: CliRunner, tmp_path: Path) -> None:
    res = cli.invoke(app, ["batch", str(tmp_path / "missing"), "--out", str(tmp_path)])
    assert res.exit_code == 2 and "no such file or directory" in res.stderr
    res = cli.invoke(app, ["batch", str(tmp_path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "no request files" in res.stderr
    res = cli.invoke(app, ["batch", str(tmp_path), "--out", str(tmp_path), "--jobs", "0"])
    assert res.exit_code == 2


def test_grid_sweep_from_the_command_line(cli: CliRunner, mixed_dir: Path, data_dir: Path,
                                          tmp_path: Path) -> None:
    res = cli.invoke(app, [
        "batch", str(mixed_dir / "tiny.json"), "--out", str(tmp_path / "out"), "--jobs", "1",
        "--set", "policy.objective=throughput,fairness", "--set", "policy.time_limit_s=1,2",
        "--add-nodes", str(data_dir / "extra-nodes.json"), "--drain", "n2", "--no-baseline",
        "--summary-csv", str(tmp_path / "sweep.csv"),
    ])
    assert res.exit_code == 0, res.output
    expected = {f"tiny@objective={o},time_limit_s={t},{e}"
                for o in ("throughput", "fairness") for t in (1, 2)
                for e in ("add=extra-nodes", "drain=n2")}
    assert _names(tmp_path / "out") == expected
    rows = list(csv.DictReader((tmp_path / "sweep.csv").read_text().splitlines()))
    assert {f"{r['name']}@{r['variant']}" for r in rows} == expected
    for r in rows:
        plan = Plan.model_validate_json(Path(r["plan_path"]).read_text())
        nodes = {p.node for a in plan.assignments for p in a.placements}
        assert ("n2" in nodes) != ("drain=n2" in r["variant"]), r
    for label in ("objective=fairness,time_limit_s=2,add=extra-nodes", "total"):
        assert label in res.stdout


def _spawn(args: list[str], solve: str) -> subprocess.Popen[str]:
    code = (
        "import sys; import api.cli.batch as b; from tests.batch import fakes; "
        f"b.solve_function = lambda: fakes.{solve}; "
        "from api.cli import main; sys.argv = ['gpuplan', *sys.argv[1:]]; main()"
    )
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_ctrl_c_stops_cleanly_and_resume_finishes(tmp_path: Path,
                                                  tiny_doc: dict[str, Any]) -> None:
    n, sleep_s = 40, 1.5
    tiny_doc["policy"]["time_limit_s"] = sleep_s  # slow_solve sleeps this long
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text("".join(json.dumps(tiny_doc) + "\n" for _ in range(n)))
    out = tmp_path / "out"
    args = ["batch", str(jsonl), "--out", str(out), "--jobs", "2"]
    proc = _spawn(args, "slow_solve")
    assert proc.stderr is not None
    first = proc.stderr.readline()  # blocks until the first solve is reported
    assert first.startswith(f"[1/{n}] q-"), first
    proc.send_signal(signal.SIGINT)
    interrupted_at = time.monotonic()
    _, err = proc.communicate(timeout=60)
    # Workers are terminated: no waiting for the queued solves (38 x 1.5 s on 2 workers
    # would take 28.5 s more; a prompt stop takes well under a second: a bound generous
    # for a loaded machine, and still far from the queue's time).
    assert time.monotonic() - interrupted_at < 15.0
    assert proc.returncode == 130, err
    assert "interrupted after" in err and "Traceback" not in err
    done = _names(out)
    assert 1 <= len(done) < n
    assert not list(out.glob(".*.tmp"))

    proc = _spawn([*args, "--resume"], "greedy_solve")
    stdout, err = proc.communicate(timeout=120)
    assert f"{n} of {n} requests" in stdout
    assert proc.returncode == 0, err
    assert err.count("kept from earlier run") == len(done)
    assert len(_names(out)) == n
