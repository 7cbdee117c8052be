"""The batch runner with the local backend and fake solve functions."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from api.batch import (
    BatchOptions,
    CsvSink,
    Row,
    build_variants,
    default_threads,
    expand,
    run_batch,
)
from api.batch.backends.local import LocalBackend
from models import Plan, PlanRequest
from solver.validate import validate_plan
from tests.batch.conftest import BAD, GOOD
from tests.batch.fakes import PAD_BYTES, failing_solve, greedy_solve, padded_solve


def _plans(out: Path) -> dict[str, Plan]:
    return {p.name.removesuffix(".plan.json"): Plan.model_validate_json(p.read_text())
            for p in out.glob("*.plan.json")}


def _run(files: list[Path], out: Path, solve: Callable[[PlanRequest], Plan] = greedy_solve,
         jobs: int = 1, **options: Any) -> tuple[Any, list[Row]]:
    rows: list[Row] = []
    summary = run_batch(files, BatchOptions(out_dir=out, jobs=jobs, **options), solve=solve,
                        backend=LocalBackend(jobs), on_row=rows.append)
    return summary, rows


def test_default_threads() -> None:
    assert default_threads(1, cpus=8) == 8
    assert default_threads(3, cpus=8) == 2
    assert default_threads(16, cpus=8) == 1


def test_example_directory(mixed_dir: Path, tmp_path: Path) -> None:
    summary, rows = _run(expand([mixed_dir]), tmp_path)
    plans = _plans(tmp_path)
    assert set(plans) == GOOD
    for name, plan in plans.items():
        source = {"queue-1": "tiny.json"}.get(name, f"{name}.json")
        path = mixed_dir / source
        if not path.exists():
            path = mixed_dir / f"{name}.request.json"
        request = PlanRequest.model_validate(json.loads(path.read_text()))
        assert validate_plan(request, plan) == []
    failed = {r.name: r for r in rows if r.failed}
    assert set(failed) == BAD
    assert failed["queue-3"].origin.endswith("queue.jsonl:3")
    assert failed["queue-4"].error.startswith("policy.objective:")
    assert failed["bad-gpus"].error.startswith("jobs.1.gpus:")
    assert summary.total.requests == summary.expected == 8
    assert summary.total.failed == 4
    assert summary.total.statuses["heuristic"] == 4
    assert summary.total.placed == sum(len(p.assignments) for p in plans.values())
    assert summary.total.unplaced == sum(len(p.unplaced) for p in plans.values())
    assert summary.exit_code == 1
    assert not list(tmp_path.glob(".*.tmp"))


def test_threads_capped_unless_request_asks_fewer(tmp_path: Path,
                                                  tiny_doc: dict[str, Any]) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "free.json").write_text(json.dumps(tiny_doc))
    tiny_doc["policy"]["threads"] = 1
    (tmp_path / "in" / "one.json").write_text(json.dumps(tiny_doc))
    _run(expand([tmp_path / "in"]), tmp_path / "out", threads=3)
    plans = _plans(tmp_path / "out")
    assert plans["free"].explanation[0] == "threads=3"
    assert plans["one"].explanation[0] == "threads=1"
    assert BatchOptions(out_dir=tmp_path, jobs=2).solve_threads == default_threads(2)


def test_process_pool_gives_the_same_plans(mixed_dir: Path, tmp_path: Path) -> None:
    files = expand([mixed_dir])
    _run(files, tmp_path / "one", threads=1)
    summary, _ = _run(files, tmp_path / "two", jobs=2, threads=1)
    one, two = _plans(tmp_path / "one"), _plans(tmp_path / "two")
    assert set(one) == set(two) == GOOD
    pids = {p.explanation[1] for p in two.values()}
    assert f"pid={os.getpid()}" not in pids
    for name in one:
        a, b = (p.model_dump(exclude={"solve_time_s", "explanation"})
                for p in (one[name], two[name]))
        assert a == b
    assert summary.exit_code == 1 and summary.total.failed == len(BAD)


def test_resume_keeps_valid_plans_only(mixed_dir: Path, tmp_path: Path) -> None:
    files = [mixed_dir / "tiny.json", mixed_dir / "small-mixed.request.json",
             mixed_dir / "mig-puzzle.request.json"]
    _run(files, tmp_path)
    broken = _plans(tmp_path)["small-mixed"]
    broken.assignments = broken.assignments[1:]  # a job now appears nowhere: invalid
    (tmp_path / "small-mixed.plan.json").write_text(broken.model_dump_json())
    (tmp_path / "mig-puzzle.plan.json").unlink()
    solved: list[str] = []

    def counting(request: PlanRequest) -> Plan:
        solved.append(request.jobs[0].name)
        return greedy_solve(request)

    summary, rows = _run(files, tmp_path, solve=counting, resume=True)
    assert len(solved) == 2
    assert {r.name for r in rows if r.resumed} == {"tiny"}
    assert summary.total.resumed == 1 and summary.exit_code == 0
    assert set(_plans(tmp_path)) == {"tiny", "small-mixed", "mig-puzzle"}
    fixed = _plans(tmp_path)["small-mixed"]
    assert len(fixed.assignments) == len(broken.assignments) + 1


def test_failures_do_not_stop_the_others(tmp_path: Path, tiny_doc: dict[str, Any],
                                         mixed_dir: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "ok.json").write_text(json.dumps(tiny_doc))
    tiny_doc["jobs"][0]["name"] = "boom"
    (tmp_path / "in" / "boom.json").write_text(json.dumps(tiny_doc))
    (tmp_path / "in" / "tiny.json").write_text("{}")  # same stem as mixed/tiny.json
    files = expand([tmp_path / "in", mixed_dir / "tiny.json"])
    summary, rows = _run(files, tmp_path / "out", solve=failing_solve, jobs=2)
    failed = {r.origin: r.error for r in rows if r.failed}
    assert failed[str(tmp_path / "in" / "boom.json")] == (
        "solver failed: RuntimeError: boom requested")
    assert failed[str(tmp_path / "in" / "tiny.json")].startswith("cluster: Field required")
    assert "duplicate output name" in failed[str(mixed_dir / "tiny.json")]
    assert set(_plans(tmp_path / "out")) == {"ok"}
    assert summary.exit_code == 1


def test_grid_sweep(mixed_dir: Path, data_dir: Path, tmp_path: Path) -> None:
    variants = build_variants(["policy.objective=throughput,fairness", "jobs.0.gpus=1,0"],
                              [data_dir / "extra-nodes.json"], [])
    sink_text = io.StringIO()
    sink = CsvSink(sink_text)
    summary = run_batch([mixed_dir / "tiny.json"],
                        BatchOptions(out_dir=tmp_path, variants=variants),
                        solve=greedy_solve, backend=LocalBackend(1), on_row=sink.write)
    plans = _plans(tmp_path)
    assert set(plans) == {f"tiny@objective={o},jobs.0.gpus=1{e}"
                          for o in ("throughput", "fairness") for e in ("", ",add=extra-nodes")}
    for name, plan in plans.items():
        # The added H200 node is used only in its variants.
        on_h200 = any(p.node == "h200-extra-1" for a in plan.assignments for p in a.placements)
        assert on_h200 == name.endswith("add=extra-nodes")
    rows = list(csv.DictReader(io.StringIO(sink_text.getvalue())))
    assert len(rows) == 8 == summary.total.requests
    bad = [r for r in rows if r["status"] == "failed"]
    assert len(bad) == 4
    assert all(r["variant"].startswith("objective=") and ",jobs.0.gpus=0" in r["variant"]
               and r["error"].startswith("jobs.0.gpus:") for r in bad)
    assert summary.per_variant["objective=fairness,jobs.0.gpus=1"].statuses["heuristic"] == 1
    text = io.StringIO()
    from rich.console import Console
    Console(file=text, width=200).print(summary.table())
    assert "objective=fairness,jobs.0.gpus=0,add=extra-nodes" in text.getvalue()
    assert "total" in text.getvalue()


def test_keyboard_interrupt_keeps_what_was_done(write_jsonl: Callable[[int, str], Path],
                                                tmp_path: Path) -> None:
    calls = 0

    def interrupted_at_third(request: PlanRequest) -> Plan:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt
        return greedy_solve(request)

    summary, _ = _run([write_jsonl(10, "q")], tmp_path / "out", solve=interrupted_at_third)
    assert summary.interrupted and summary.exit_code == 130
    assert set(_plans(tmp_path / "out")) == {"q-1", "q-2"}
    assert summary.total.requests == 2 and summary.expected == 10


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_memory_stays_flat(write_jsonl: Callable[[int, str], Path], tmp_path: Path) -> None:
    n = 200
    path = write_jsonl(n, "many")
    _run([write_jsonl(20, "warm")], tmp_path / "warm", solve=padded_solve)
    base = _rss_bytes()
    peak = base

    def track(_row: Row) -> None:
        nonlocal peak
        peak = max(peak, _rss_bytes())

    summary = run_batch([path], BatchOptions(out_dir=tmp_path / "out"), solve=padded_solve,
                        backend=LocalBackend(1), on_row=track)
    assert summary.total.requests == n and summary.exit_code == 0
    assert len(list((tmp_path / "out").glob("*.plan.json"))) == n
    # Holding every plan would cost n * PAD_BYTES (80 MB); streaming keeps well under it.
    assert peak - base < n * PAD_BYTES / 4, f"RSS grew by {(peak - base) / 2**20:.1f} MiB"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_two_thousand_requests_with_the_real_solver(write_jsonl: Callable[[int, str], Path],
                                                    tmp_path: Path) -> None:
    from solver import plan

    n = 2000
    path = write_jsonl(n, "day")
    base = _rss_bytes()
    peak = base

    def track(_row: Row) -> None:
        nonlocal peak
        peak = max(peak, _rss_bytes())

    summary = run_batch([path], BatchOptions(out_dir=tmp_path / "out", jobs=2), solve=plan,
                        backend=LocalBackend(2), on_row=track)
    assert summary.exit_code == 0 and summary.total.requests == n
    assert len(list((tmp_path / "out").glob("*.plan.json"))) == n
    assert peak - base < 64 * 2**20, f"RSS grew by {(peak - base) / 2**20:.1f} MiB"
