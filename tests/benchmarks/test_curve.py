"""`gpuplan bench curve`: one real run per point, the table, CSV and plot written."""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from api.cli import app
from benchmarks.curve import plot
from benchmarks.scale import Row

PNG = b"\x89PNG\r\n\x1a\n"


def test_curve_on_the_small_instance_writes_table_csv_and_plot(tmp_path: Path) -> None:
    """Two limits on S, quiet: each point a real solve with its gap and overrun."""
    prefix = tmp_path / "curve"
    res = CliRunner().invoke(app, ["bench", "curve", "--sizes", "S", "--time-limits",
                                   "0.5,1", "--contend", "0", "--out", str(prefix)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(Path(f"{prefix}.csv").read_text().splitlines()))
    assert [float(r["limit_s"]) for r in rows] == [0.5, 1.0]
    for r in rows:
        assert r["status"] in ("optimal", "feasible", "heuristic"), r
        assert 0.0 <= float(r["gap"]) <= 1.0
        assert float(r["solve_s"]) > 0.0
        assert r["contend"] == "0"
        load = float(r["note"].rsplit("host load ", 1)[1])   # how quiet "quiet" was
        assert load >= 0.0
    assert Path(f"{prefix}.png").read_bytes().startswith(PNG)
    table = Path(f"{prefix}.md").read_text()
    assert "gpuplan bench curve --sizes S --time-limits 0.5,1 --contend 0" in table
    assert table.count("| S (") == 2


def test_plot_draws_missing_points_and_contended_lines(tmp_path: Path) -> None:
    """A crashed run (no gap, no solve time) and a contended series still draw."""
    rows = [Row("M (1024 GPUs / 1500 jobs)", "auto", "heuristic", 10.0, 11.0, 1 / 11, 1.0,
                100.0, contend=c, solve_s=lim + 0.05, limit_s=lim)
            for c in (0, 4) for lim in (1.0, 2.0)]
    rows.append(Row("M (1024 GPUs / 1500 jobs)", "auto", "crashed or timed out", None, None,
                    None, 3.0, 0.0, contend=4, limit_s=3.0))
    out = plot(rows, tmp_path / "p.png", "t")
    assert out.read_bytes().startswith(PNG)


def test_bad_limits_are_a_usage_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bench", "curve", "--sizes", "S", "--time-limits", "0,x",
                                   "--out", str(tmp_path / "c")])
    assert res.exit_code == 2
    assert "--time-limits" in res.output
