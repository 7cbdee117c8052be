"""`gpuplan validate` and `gpuplan catalog` through typer's CliRunner (plus one real
subprocess for the console script)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from models import BUILTIN_CATALOG, is_maximal_layout, valid_layouts
from tests.foundation.helpers import EXAMPLES, PLANS

runner = CliRunner()
SMALL = str(EXAMPLES / "small-mixed.request.json")


def run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), (
        res.exception)
    return res.exit_code, res.stdout, res.stderr


def test_validate_valid_plan_exits_0() -> None:
    code, out, _ = run("validate", SMALL, str(PLANS / "small-mixed.valid.plan.json"))
    assert (code, out.strip()) == (0, "valid")


@pytest.mark.parametrize("rule", ["accounting", "shared", "running", "objective"])
def test_validate_invalid_plan_exits_1_and_names_the_rule(rule: str) -> None:
    code, out, err = run("validate", SMALL, str(PLANS / f"small-mixed.invalid-{rule}.plan.json"))
    assert code == 1
    lines = out.strip().splitlines()
    assert lines and all(line.split("\t")[0] == rule for line in lines)
    assert "violation" in err


def test_validate_unreadable_file_exits_2(tmp_path: Path) -> None:
    code, out, err = run("validate", SMALL, str(tmp_path / "missing.json"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_validate_bad_json_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run("validate", SMALL, str(bad))
    assert code == 2 and "invalid JSON" in err


def test_validate_invalid_request_exits_2_with_field_path(tmp_path: Path) -> None:
    data = json.loads(Path(SMALL).read_text())
    data["jobs"][0]["gpus"] = -3
    req = tmp_path / "req.json"
    req.write_text(json.dumps(data))
    code, _, err = run("validate", str(req), str(PLANS / "small-mixed.valid.plan.json"))
    assert code == 2 and "jobs.0.gpus" in err and len(err.strip().splitlines()) == 1


def test_validate_invalid_plan_shape_exits_2(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"status": "done", "solver": "x", "objective_value": 0}))
    code, _, err = run("validate", SMALL, str(plan))
    assert code == 2 and "status" in err


def test_catalog_table_lists_every_model() -> None:
    code, out, _ = run("catalog")
    assert code == 0
    rows = out.strip().splitlines()[1:]
    assert [r.split()[0] for r in rows] == list(BUILTIN_CATALOG)
    a30 = next(r for r in rows if r.startswith("A30-24GB")).split()
    assert a30[3] == "yes" and int(a30[4]) == len(valid_layouts(BUILTIN_CATALOG["A30-24GB"]))


def test_catalog_json() -> None:
    code, out, _ = run("catalog", "--json")
    assert code == 0
    rows = json.loads(out)
    assert {r["model"] for r in rows} == set(BUILTIN_CATALOG)
    t4 = next(r for r in rows if r["model"] == "T4-16GB")
    assert (t4["memory_gib"], t4["mig_capable"], t4["layouts"]) == (16, False, 0)


def test_catalog_model_profiles() -> None:
    code, out, _ = run("catalog", "A100-SXM4-40GB")
    assert code == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:9]}
    assert rows["3g.20gb"] == ["3", "4", "20", "2", "0,4"]
    assert rows["1g.5gb"] == ["1", "1", "5", "7", "0,1,2,3,4,5,6"]
    model = BUILTIN_CATALOG["A100-SXM4-40GB"]
    layouts = valid_layouts(model)
    n_max = sum(is_maximal_layout(model, lay) for lay in layouts)
    assert f"{len(layouts)} valid layouts ({n_max} maximal)" in out


def test_catalog_model_json() -> None:
    code, out, _ = run("catalog", "A30-24GB", "--json")
    detail = json.loads(out)
    assert code == 0 and detail["compute_slices"] == 4 and detail["memory_slices"] == 4
    assert [p["name"] for p in detail["profiles"]] == [
        p.name for p in BUILTIN_CATALOG["A30-24GB"].mig_profiles]
    assert detail["valid_layouts"] == len(valid_layouts(BUILTIN_CATALOG["A30-24GB"]))


def test_catalog_non_mig_model() -> None:
    code, out, _ = run("catalog", "V100-32GB")
    assert code == 0 and "not MIG-capable" in out


def test_catalog_unknown_model_exits_2() -> None:
    code, out, err = run("catalog", "B300")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_console_script_reports_the_broken_rule() -> None:
    res = subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", "validate", SMALL,
         str(PLANS / "small-mixed.invalid-mig.plan.json")],
        capture_output=True, text=True, check=False)
    assert res.returncode == 1 and res.stdout.startswith("mig\t")
    assert "Traceback" not in res.stderr
