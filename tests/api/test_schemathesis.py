"""Schemathesis against the live server's /openapi.json (real solver), every check on (the
configuration of `gpuplan bench robustness`): no 500s, every response matches its
documented status code, content type and schema, negative data is rejected, and Allow
lists the documented methods."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from api.robustness import SCHEMATHESIS_CONFIG
from tests.api.conftest import TOKEN, Server


def run_schemathesis(server: Server, tmp_path: Path, phases: str, max_examples: int) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(SCHEMATHESIS_CONFIG)
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
           f"{server.url}/openapi.json", "-H", f"Authorization: Bearer {TOKEN}",
           "--phases", phases, "-n", str(max_examples), "--seed", "20240601", "--workers", "1",
           "--request-timeout", "20", "--generation-database", "none", "--no-color",
           "--report", "json", "--report-json-path", str(report)]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          check=False)
    out = done.stdout[-6000:]
    assert done.returncode == 0, out
    result = json.loads(report.read_text())
    assert result["operations"]["tested"] >= 8, out
    assert result["test_cases"]["generated"] > 50, out
    # ignored_auth's extra requests without the token record no check of their own (up to
    # two per operation); every other case must have been checked.
    assert result["test_cases"]["without_checks"] <= 2 * result["operations"]["tested"], out
    assert result["test_cases"]["errored"] == 0, out
    assert result["failures"] == [], out


def test_schemathesis_examples_and_fuzzing(real_server: Server, tmp_path: Path) -> None:
    run_schemathesis(real_server, tmp_path, "examples,fuzzing", 10)


@pytest.mark.slow
def test_schemathesis_coverage(real_server: Server, tmp_path: Path) -> None:
    run_schemathesis(real_server, tmp_path, "examples,coverage,fuzzing", 25)
