"""`gpuplan view` and `gpuplan solve --html`: the page is written, bad input exits 2 with
one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "api.cli", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)


def test_view_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "plan.html"
    r = _cli("view", EXAMPLES / "mig-puzzle.request.json",
             EXAMPLES / "plans" / "mig-puzzle.valid.plan.json", "-o", out)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "svc-3g" in html
    assert html.count('<g class="gpu">') == 1


def test_view_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"status": "great"}')
    r = _cli("view", EXAMPLES / "mig-puzzle.request.json", bad, "-o", tmp_path / "x.html")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "status" in r.stderr and "Traceback" not in r.stderr
    r = _cli("view", EXAMPLES / "mig-puzzle.request.json",
             EXAMPLES / "plans" / "mig-puzzle.valid.plan.json", "-o", tmp_path / "no" / "x")
    assert r.returncode == 2 and "cannot write" in r.stderr


def test_solve_html_writes_the_plan_and_its_view(tmp_path: Path) -> None:
    out, page = tmp_path / "plan.json", tmp_path / "plan.html"
    r = _cli("solve", EXAMPLES / "mig-puzzle.request.json", "--time-limit", "5",
             "-o", out, "--html", page)
    assert r.returncode == 0, r.stderr
    assert out.exists()
    html = page.read_text()
    for job in ("svc-3g", "svc-2g", "svc-1g-a", "svc-1g-b"):
        assert job in html
