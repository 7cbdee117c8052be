"""`gpuplan k8s snapshot` and `gpuplan k8s export`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from api.cli import app
from models import Plan, PlanRequest

FIXTURES = Path(__file__).parent / "fixtures"
runner = CliRunner()


def _snapshot(tmp_path: Path, *extra: str) -> Any:
    return runner.invoke(app, ["k8s", "snapshot", "--nodes", str(FIXTURES / "nodes.json"),
                               "--pods", str(FIXTURES / "pods.json"), *extra])


def test_snapshot_writes_request_and_warns(tmp_path: Path) -> None:
    out = tmp_path / "request.json"
    r = _snapshot(tmp_path, "-o", str(out))
    assert r.exit_code == 0, r.output
    req = PlanRequest.model_validate_json(out.read_text())
    assert any(j.name == "team-a/finetune-1" for j in req.jobs)
    lines = r.stderr.strip().splitlines()
    assert lines and all(line.startswith("gpuplan: warning: ") for line in lines)
    assert any("node/gpu-rtx-1 skipped" in line for line in lines)


def test_snapshot_strict_and_bad_inputs(tmp_path: Path) -> None:
    r = _snapshot(tmp_path, "--strict")
    assert r.exit_code == 2 and "--strict" in r.stderr.strip().splitlines()[-1]
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    r = runner.invoke(app, ["k8s", "snapshot", "--nodes", str(bad),
                            "--pods", str(FIXTURES / "pods.json")])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "expected a Kubernetes List" in r.stderr
    r = runner.invoke(app, ["k8s", "snapshot", "--nodes", str(FIXTURES / "pods.json"),
                            "--pods", str(FIXTURES / "pods.json")])
    assert r.exit_code == 2 and "expected a Node, got a Pod" in r.stderr
    r = _snapshot(tmp_path, "--alias", "no-equals-sign")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1


def test_export_writes_files(tmp_path: Path) -> None:
    req_path = tmp_path / "request.json"
    assert _snapshot(tmp_path, "-o", str(req_path)).exit_code == 0
    req = PlanRequest.model_validate_json(req_path.read_text())
    mixed = next(n for n in req.cluster.nodes if n.name == "gpu-a100-mixed-1")
    assert [m.profile for m in mixed.gpus[0].mig_instances] == ["1g.10gb"] * 7
    # A hand-made plan: finetune on the A100 node, the MPI gang split over two nodes,
    # and GPU 0 of the mixed node (seven 1g.10gb) turned into one 7g.80gb.
    plan = Plan.model_validate({
        "status": "heuristic", "solver": "test", "objective_value": 0.0,
        "assignments": [
            {"job": "team-a/finetune-1", "placements": [
                {"node": "gpu-a100-mixed-1", "gpu": 4}, {"node": "gpu-a100-mixed-1", "gpu": 5}]},
            {"job": "team-c/group:mpi-8c1d2", "placements": [
                {"node": "gpu-a100-mixed-1", "gpu": 6}, {"node": "gpu-h100-1", "gpu": 4},
                {"node": "gpu-h100-1", "gpu": 5}]},
        ],
        "mig_changes": [{"node": "gpu-a100-mixed-1", "gpu": 0,
                         "destroy": [{"profile": "1g.10gb", "start": s} for s in range(7)],
                         "create": [{"profile": "7g.80gb", "start": 0}]}],
    })
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan.model_dump_json())
    out = tmp_path / "out"
    r = runner.invoke(app, ["k8s", "export", str(plan_path), "--request", str(req_path),
                            "--pods", str(FIXTURES / "pods.json"), "--out", str(out)])
    assert r.exit_code == 0, r.output + r.stderr
    mig = yaml.safe_load((out / "mig-parted.yaml").read_text())
    entries = mig["mig-configs"]["gpuplan-gpu-a100-mixed-1"]
    gpu0 = next(e for e in entries if 0 in e["devices"])
    assert gpu0["mig-devices"] == {"7g.80gb": 1}
    whole = next(e for e in entries if 7 in e["devices"])
    assert whole == {"devices": [4, 5, 6, 7], "mig-enabled": False}
    bindings = list(yaml.safe_load_all((out / "bindings.yaml").read_text()))
    targets = {b["metadata"]["name"]: b["target"]["name"] for b in bindings}
    assert targets["finetune-1"] == "gpu-a100-mixed-1"
    mpi = [targets[f"mpi-worker-{i}"] for i in range(3)]
    assert sorted(mpi) == ["gpu-a100-mixed-1", "gpu-h100-1", "gpu-h100-1"]
    export = json.loads((out / "export.json").read_text())
    assert export["drain"][0]["pods"] == ["serving/llm-infer-5f7d8"]
    assert "kubectl create -f bindings.yaml" in (out / "apply.sh").read_text()


def test_export_bad_plan(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text('{"status": "maybe"}')
    r = runner.invoke(app, ["k8s", "export", str(bad)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1


def test_serve_k8s_watch_without_configuration(tmp_path: Path) -> None:
    r = runner.invoke(app, ["serve", "--k8s-watch", "--port", "1"],
                      env={"GPUPLAN_K8S_KUBECONFIG": str(tmp_path / "missing"),
                           "KUBERNETES_SERVICE_HOST": ""})
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--k8s-watch: no Kubernetes configuration" in lines[0]
