"""`bench run --contend N`: the busy processes run pinned during the run and are gone after."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from benchmarks import scale
from benchmarks.contend import contended, cores


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cpu_ticks(pid: int) -> int:
    """User + system CPU ticks of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux affinity")
def test_contenders_spin_pinned_and_stop() -> None:
    """Each contender runs on one core (round robin), burns CPU, and exits at the end."""
    avail = cores()
    with contended(3) as pids:
        assert len(pids) == 3
        for i, pid in enumerate(pids):
            assert os.sched_getaffinity(pid) == {avail[i % len(avail)]} or _wait_pinned(
                pid, avail[i % len(avail)])
        before = [_cpu_ticks(p) for p in pids]
        end = os.times().elapsed + 30
        while os.times().elapsed < end and not all(
                _cpu_ticks(p) > b for p, b in zip(pids, before, strict=True)):
            os.sched_yield()
        assert all(_cpu_ticks(p) > b for p, b in zip(pids, before, strict=True))
    assert not any(_alive(p) for p in pids)


def _wait_pinned(pid: int, core: int) -> bool:
    """The child pins itself just after it starts: wait for it (generously)."""
    end = os.times().elapsed + 30
    while os.times().elapsed < end:
        if os.sched_getaffinity(pid) == {core}:
            return True
        os.sched_yield()
    return False


def test_contenders_stop_when_the_body_raises() -> None:
    """An exception in the measured body still stops every contender."""
    pids: list[int] = []
    with pytest.raises(RuntimeError), contended(2) as started:
        pids = started
        raise RuntimeError("boom")
    assert len(pids) == 2
    assert not any(_alive(p) for p in pids)


def test_bench_run_records_contention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                      ) -> None:
    """`bench run --contend 2` on the tiny instance: a row with the contend column, and no
    contender left once the command returns."""
    seen: list[list[int]] = []
    real = scale.contended

    @contextlib.contextmanager
    def spy(n: int) -> Iterator[list[int]]:
        with real(n) as pids:
            seen.append(pids)
            yield pids

    monkeypatch.setattr(scale, "contended", spy)
    app = typer.Typer()
    app.command()(scale.run_command)
    out = tmp_path / "table.md"
    res = CliRunner().invoke(app, ["--sizes", "S", "--backends", "heuristic",
                                   "--time-limit", "1", "--contend", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "--contend 2" in text
    row = next(line for line in text.splitlines() if line.startswith("| S "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "heuristic" and cells[2] == "2" and cells[3] == "1"
    assert cells[4] == "heuristic"
    float(cells[9])   # solve_time_s - limit, a signed number
    assert len(seen) == 1 and len(seen[0]) == 2
    assert not any(_alive(p) for p in seen[0])
