"""The Ray backend on a local Ray runtime gives the same plans as the local backend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import api.cli.batch as batch_cli
from api.batch import BatchOptions, Row, build_variants, expand, run_batch
from api.batch.backends.local import LocalBackend
from api.batch.backends.ray_backend import RayBackend
from api.cli import app
from solver import plan as solver_plan
from tests.batch.conftest import BAD, GOOD
from tests.batch.fakes import failing_solve

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    """One local Ray runtime for the module (the backend reuses an initialised Ray)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=128 * 1024**2, logging_level="warning")
    yield
    ray.shutdown()


def _plan_texts(out: Path) -> dict[str, dict[str, Any]]:
    texts = {}
    for p in out.glob("*.plan.json"):
        doc = json.loads(p.read_text())
        doc.pop("solve_time_s")
        texts[p.name] = doc
    return texts


def test_ray_gives_the_same_plans_as_local(ray_runtime: None, mixed_dir: Path,
                                           tmp_path: Path) -> None:
    files = expand([mixed_dir])
    # deterministic mode: the same plan on both backends however loaded the machine is
    # (with the wall clock, a 2 s solve starved beside Ray's workers once ended
    # `heuristic` on one backend and `optimal` on the other)
    variants = build_variants(["policy.seed=1,2", "policy.deterministic=true"])
    results = {}
    for name, backend in (("local", LocalBackend(2)), ("ray", RayBackend(2, 1))):
        rows: list[Row] = []
        options = BatchOptions(out_dir=tmp_path / name, jobs=2, threads=1, variants=variants)
        summary = run_batch(files, options, solve=solver_plan, backend=backend,
                            on_row=rows.append)
        results[name] = summary, {(r.name, r.variant, r.status) for r in rows}
    (local, local_rows), (remote, remote_rows) = results["local"], results["ray"]
    assert local_rows == remote_rows
    assert {n for n, _, s in remote_rows if s == "failed"} == BAD
    assert remote.total.failed == local.total.failed == 2 * len(BAD)
    local_plans, ray_plans = _plan_texts(tmp_path / "local"), _plan_texts(tmp_path / "ray")
    assert len(ray_plans) == 2 * len(GOOD)
    assert local_plans == ray_plans


def test_ray_reports_solver_failures(ray_runtime: None, tmp_path: Path,
                                     tiny_doc: dict[str, Any]) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "ok.json").write_text(json.dumps(tiny_doc))
    tiny_doc["jobs"][0]["name"] = "boom"
    (tmp_path / "in" / "boom.json").write_text(json.dumps(tiny_doc))
    rows: list[Row] = []
    summary = run_batch(expand([tmp_path / "in"]), BatchOptions(out_dir=tmp_path / "out"),
                        solve=failing_solve, backend=RayBackend(2, 1), on_row=rows.append)
    assert summary.exit_code == 1
    assert {r.name: r.error for r in rows} == {
        "boom": "solver failed: RuntimeError: boom requested", "ok": ""}
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["ok.plan.json"]


def test_cli_ray_backend(ray_runtime: None, mixed_dir: Path, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_cli, "solve_function", lambda: solver_plan)
    res = CliRunner().invoke(app, ["batch", str(mixed_dir / "tiny.json"), "--out",
                                   str(tmp_path), "--backend", "ray", "--jobs", "2"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "tiny.plan.json").exists()
    assert ray.is_initialized()  # an existing runtime is reused, not shut down
