"""The CLI never shows a traceback: hostile files and unexpected errors are one line.

Every case runs the real command in a subprocess and reads its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
REQUEST = EXAMPLES / "mig-puzzle.request.json"
PLAN = EXAMPLES / "mig-puzzle.plan.json"
DEPTH = 10_000


def gpuplan(*args: str, code: str = "", env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `gpuplan ARGS` in a fresh interpreter (after `code`, e.g. a patch)."""
    script = (f"{code}\nimport sys\nfrom api.cli import main\n"
              "sys.argv = ['gpuplan', *sys.argv[1:]]\nmain()")
    return subprocess.run([sys.executable, "-c", script, *args], cwd=REPO, text=True,
                          capture_output=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})})


def assert_one_line(res: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """Exit `code`, no traceback, exactly one line on stderr containing `words`."""
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.returncode == code, (res.returncode, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuplan: error: "), res.stderr
    assert all(w in lines[0] for w in words), lines[0]


@pytest.fixture(scope="module")
def deep_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("deep")
    files = {"array": "[" * DEPTH + "]" * DEPTH,
             "object": '{"a":' * DEPTH + "1" + "}" * DEPTH,
             # well-formed request whose `jobs` field hides the nesting
             "field": json.dumps({"cluster": {"nodes": []}})[:-1]
             + ', "jobs": ' + "[" * DEPTH + "]" * DEPTH + "}"}
    out = {}
    for name, text in files.items():
        out[name] = d / f"{name}.json"
        out[name].write_text(text)
    return out


@pytest.mark.parametrize("kind", ["array", "object", "field"])
def test_solve_on_deeply_nested_json(kind: str, deep_files: dict[str, Path]) -> None:
    assert_one_line(gpuplan("solve", str(deep_files[kind])), 2, str(deep_files[kind]),
                    "nested too deeply")


def test_validate_on_deeply_nested_request_or_plan(deep_files: dict[str, Path]) -> None:
    deep = str(deep_files["object"])
    assert_one_line(gpuplan("validate", deep, str(PLAN)), 2, "nested too deeply")
    assert_one_line(gpuplan("validate", str(REQUEST), deep), 2, "nested too deeply")


def test_k8s_snapshot_on_deeply_nested_json(deep_files: dict[str, Path]) -> None:
    deep = str(deep_files["array"])
    assert_one_line(gpuplan("k8s", "snapshot", "--nodes", deep, "--pods", deep), 2,
                    "nested too deeply")


def test_batch_reports_deeply_nested_files_as_failed_requests(
        deep_files: dict[str, Path], tmp_path: Path) -> None:
    lines = tmp_path / "deep.jsonl"
    lines.write_text(deep_files["array"].read_text() + "\n")
    res = gpuplan("batch", str(deep_files["object"]), str(lines), "--out", str(tmp_path / "o"),
                  "--jobs", "1")
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    # batch's contract: 1 when a request failed; each failure is one line with its origin
    assert res.returncode == 1, res.stderr
    failures = [x for x in res.stderr.splitlines() if "FAILED" in x]
    assert len(failures) == 2 and all("nested too deeply" in x for x in failures), res.stderr
    assert f"{lines}:1" in res.stderr


def test_an_unexpected_error_in_a_command_is_one_line() -> None:
    boom = ("import solver.driver\n"
            "def boom(request, **kw):\n    raise RuntimeError('boom\\nsecond line')\n"
            "solver.driver.plan = boom")
    res = gpuplan("solve", str(REQUEST), code=boom)
    assert_one_line(res, 1, "internal error: RuntimeError: boom second line")
    shown = gpuplan("solve", str(REQUEST), code=boom, env={"GPUPLAN_TRACEBACK": "1"})
    assert shown.returncode == 1 and "Traceback" in shown.stderr  # the debugging escape hatch


def test_a_recursion_error_outside_input_loading_is_still_one_line() -> None:
    patch = ("import solver.validate\n"
             "def deep(*a, **kw):\n    return deep()\n"
             "solver.validate.validate_plan = deep\n"
             "import api.cli.validate\napi.cli.validate.validate_plan = deep")
    assert_one_line(gpuplan("validate", str(REQUEST), str(PLAN), code=patch), 1,
                    "internal error: RecursionError")


@pytest.mark.parametrize("args", [
    ["solve", "/nonexistent/request.json"],
    ["validate", str(REQUEST), "/nonexistent/plan.json"],
    ["solve", str(REQUEST), "--threads", "100000"],
    ["solve", str(REQUEST), "-o", "/nonexistent/dir/plan.json", "--time-limit", "1"],
])
def test_bad_paths_and_values_are_one_line(args: list[str]) -> None:
    assert_one_line(gpuplan(*args), 2)


@pytest.mark.parametrize("text", [
    '{"cluster": {"nodes": []}, "jobs": [{"name": "a", "gpus": 1, "weight": NaN}]}',
    '{"cluster": {"nodes": []}, "jobs": [{"name": "a", "gpus": 1, "weight": Infinity}]}',
    '{"cluster": {"nodes": []}, "jobs": [{"name": "\\ud800", "gpus": 1}]}',
    '{"cluster": {"nodes": [{"name": "n", "cpu_millicores": 1e400, "gpus": []}]}, "jobs": []}',
    # huge finite numbers reach the planner (the boundary's checks decide the exit code)
    '{"cluster": {"nodes": [{"name": "n", "cpu_millicores": 1e308, "gpus": [{"index": 0, '
    '"model": "T4-16GB"}]}]}, "jobs": [{"name": "a", "gpus": 1, "cpu_millicores": 1e308}]}',
    '{"cluster": {"nodes": [{"name": "n", "gpus": [{"index": 0, "model": "T4-16GB"}]}]}, '
    '"jobs": [{"name": "a", "gpus": 1, "weight": 1e308}]}',
    "\ufeff{}",
    "",
])
def test_odd_json_never_shows_a_traceback(text: str, tmp_path: Path) -> None:
    path = tmp_path / "odd.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    res = gpuplan("solve", str(path), "--time-limit", "1")
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    if res.returncode != 0:
        assert len(res.stderr.splitlines()) == 1, res.stderr


@pytest.mark.parametrize(("edit", "where"), [
    (lambda r: r["jobs"][0].__setitem__("name", "\ud800"), "jobs.0.name"),
    (lambda r: r["policy"].__setitem__("allow_preemption", "yes"), "policy.allow_preemption"),
    (lambda r: r["policy"].__setitem__("seed", "2"), "policy.seed"),
    (lambda r: r["jobs"][0].__setitem__("weight", float("nan")), "jobs.0.weight"),
])
def test_the_cli_reads_requests_as_strictly_as_the_service(
        edit: object, where: str, tmp_path: Path) -> None:
    request = json.loads(REQUEST.read_text())
    request.setdefault("policy", {})
    edit(request)  # type: ignore[operator]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(request, ensure_ascii=True))
    assert_one_line(gpuplan("solve", str(path)), 2, where)
