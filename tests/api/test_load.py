"""The load benchmark's machinery, briefly, against the fake-planner server."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys

import pytest

from benchmarks.load import format_table, percentile, require_loopback, run_level
from tests.api.conftest import REPO, Server
from tests.api.test_service import tiny


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0
    assert math.isnan(percentile([], 50))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:1",
                                 "http://127.8.9.10", "http://[::1]:80"])
def test_loopback_accepted(url: str) -> None:
    require_loopback(url)


@pytest.mark.parametrize("url", ["http://10.0.0.1:8000", "http://192.168.1.2",
                                 "http://example.com", "http://0.0.0.0:8000"])
def test_non_loopback_refused(url: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        require_loopback(url)


def test_cli_refuses_remote_targets() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", "bench", "load",
         "--url", "http://10.1.2.3:8000"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "loopback" in done.stderr


def test_level_is_bounded_and_measured(fake_server: Server) -> None:
    bodies = [tiny(f"load-{i}", time_limit=0.05) for i in range(3)]
    result = asyncio.run(run_level(fake_server.url, bodies, clients=3, max_requests=9,
                                   max_seconds=30))
    assert (result.ok, result.rejected, result.failed) == (9, 0, 0)
    assert 0 < result.p50_ms <= result.p99_ms <= result.max_ms
    assert result.p50_ms >= 50  # each fake solve spins for 50 ms
    assert result.throughput_rps == pytest.approx(9 / result.elapsed_s)
    # bounded by its time, not its count: 3 s leaves a loaded machine time for one
    # 50 ms solve (0.5 s once got none, beside two busy processes and another worker)
    short = asyncio.run(run_level(fake_server.url, bodies, clients=2, max_requests=1000,
                                  max_seconds=3.0))
    assert 0 < short.ok < 1000
    assert short.elapsed_s < 15
    assert "p99 ms" in format_table([result, short])
