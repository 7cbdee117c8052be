"""`gpuplan bench latency` on the tiny instance: every stage timed, the HTTP path taken,
session rounds after random events that apply cleanly and plan validly."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from benchmarks.generator import generate
from benchmarks.latency import (
    STAGES,
    PlanLatency,
    format_plans,
    latency_command,
    parse_server_timing,
    random_events,
    service_parts,
)
from solver.session import apply_events


def test_random_events_apply_round_after_round() -> None:
    request = generate("S", 1)
    rng = random.Random(1)
    kinds: set[str] = set()
    for r in range(5):
        batch = random_events(request, rng, 12, f"r{r}")
        assert len(batch) == 12
        kinds |= {e.kind for e in batch}
        request = apply_events(request, batch)
    assert {"job_finished", "job_submitted", "node_added", "node_cordoned",
            "gpu_unhealthy"} <= kinds


def test_latency_command_reports_stages_http_and_sessions(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(latency_command)
    out = tmp_path / "lat.json"
    res = CliRunner().invoke(app, [
        "--sizes", "S", "--time-limits", "0.5", "--repeats", "1", "--sessions-size", "S",
        "--events", "6", "--rounds", "2", "--session-limit", "0.2", "--cold-limit", "0.5",
        "--session-http", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    (row,) = data["plans"]
    assert set(row["stages"]) == set(STAGES)
    assert row["stages"]["solve"] > 0 and row["total_s"] > 0
    assert set(row["cpu"]) == set(STAGES) and row["cpu"]["validate"] > 0
    assert row["http_s"] > 0 and row["http_solve_time_s"] > 0
    # the overhead split by the answers' Server-Timing: an idle worker validated each body
    assert {"http", "read", "queue", "hop", "validate", "beyond solve_time_s", "serialise",
            "back", "route"} == set(row["service"])
    assert row["service_cpu"]["validate"][0] > 0 and row["service_cpu"]["solve"][0] > 0
    for i, over in enumerate(row["overheads_s"]):
        assert abs(sum(v[i] for v in row["service"].values()) - over) < 1e-6
    assert "Service overhead by part" in res.output
    sess = data["sessions"]
    assert sess["via"] == "http"  # through the server's /v1/sessions routes
    assert len(sess["plan_s"]) == len(sess["apply_s"]) == len(sess["ratios"]) == 2
    assert all(p >= v > 0 for p, v in zip(sess["plan_s"], sess["solve_s"], strict=True))
    assert all(r > 0 for r in sess["ratios"])
    assert {"http", "session", "queue", "hop", "beyond solve_time_s", "serialise", "back",
            "commit", "store"} <= set(sess["service"])
    assert all(len(v) == 2 for v in sess["service"].values())
    assert "session plan" in res.output


def test_latency_command_rejects_bad_sizes() -> None:
    app = typer.Typer()
    app.command()(latency_command)
    res = CliRunner().invoke(app, ["--sizes", "Q"])
    assert res.exit_code == 2 and "unknown size" in res.output


def test_baseline_overheads_are_tabled_beside_this_servers() -> None:
    row = PlanLatency("M", 1.0, 0.6, dict.fromkeys(STAGES, 0.1), "heuristic", None,
                      http_s=1.2, http_solve_time_s=1.0, cpu=dict.fromkeys(STAGES, 0.05),
                      overheads_s=[0.2, 0.1, 0.3], baseline_overheads_s=[0.4, 0.5, 0.6])
    text = format_plans([row])
    assert "| M | this | 200 ms | 100 ms | 300 ms |" in text
    assert "| M | baseline | 500 ms | 400 ms | 600 ms |" in text
    assert "CPU 50 ms" in text


def test_server_timing_splits_the_overhead_into_parts_that_add_up() -> None:
    timing = parse_server_timing(
        'read;dur=1.00, queue;dur=0.50, hop;dur=2.00, validate;dur=40.00;desc="cpu=30.00", '
        'solve;dur=700.00;desc="cpu=650.00", serialise;dur=5.00;desc="cpu=4.00", '
        'back;dur=1.50, total;dur=751.00')
    assert timing["validate"] == (0.04, 0.03) and timing["back"] == (0.0015, None)
    parts = service_parts(0.761, 0.68, timing)
    assert parts["http"] == pytest.approx(0.010)
    assert parts["beyond solve_time_s"] == pytest.approx(0.020)
    assert parts["route"] == pytest.approx(0.001)
    assert sum(parts.values()) == pytest.approx(0.761 - 0.68)
