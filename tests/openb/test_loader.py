"""The OpenB loader on a slice of the real CSVs: the exact mapping to the contract."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks.openb.loader import load_nodes, load_pods, parse_spec, to_request

DATA = Path(__file__).parent / "data"


def _rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as f:
        return list(csv.DictReader(f))


def test_nodes_map_to_cluster_and_catalog() -> None:
    rows = _rows("nodes_slice.csv")
    nodes = load_nodes(DATA / "nodes_slice.csv")
    pods = load_pods(DATA / "pods_slice.csv")
    request, _ = to_request(nodes, pods)
    assert [n.name for n in request.cluster.nodes] == [r["sn"] for r in rows]
    for node, r in zip(request.cluster.nodes, rows, strict=True):
        assert node.cpu_millicores == float(r["cpu_milli"])
        assert node.memory_gib == pytest.approx(int(r["memory_mib"]) / 1024)
        assert [g.index for g in node.gpus] == list(range(int(r["gpu"])))
        assert {g.model for g in node.gpus} == {r["model"]}
    assert set(request.cluster.gpu_models) == {r["model"] for r in rows}
    for spec in request.cluster.gpu_models.values():
        assert spec.memory_gib is None
        assert spec.relative_speed == 1.0
        assert not spec.mig_capable
    assert nodes.capacity_milli == 1000 * sum(int(r["gpu"]) for r in rows)


def test_pods_map_to_jobs_exactly() -> None:
    rows = _rows("pods_slice.csv")
    request, cpu_only = to_request(load_nodes(DATA / "nodes_slice.csv"),
                                   load_pods(DATA / "pods_slice.csv"))
    jobs = {j.name: j for j in request.jobs}
    assert [rows[i]["name"] for i in cpu_only] == [r["name"] for r in rows if r["num_gpu"] == "0"]
    assert cpu_only, "the slice holds CPU-only pods"
    assert len(jobs) + len(cpu_only) == len(rows)
    kinds = set()
    for r in rows:
        if r["num_gpu"] == "0":
            assert r["name"] not in jobs
            continue
        job = jobs[r["name"]]
        n, m = int(r["num_gpu"]), int(r["gpu_milli"])
        if m < 1000:
            assert n == 1
            assert job.gpu_share == pytest.approx(m / 1000)
            assert job.gpus is None
            kinds.add("share")
        else:
            assert job.gpus == n
            assert job.gpu_share is None
            kinds.add("whole")
        assert job.cpu_millicores == float(r["cpu_milli"])
        assert job.host_memory_gib == pytest.approx(int(r["memory_mib"]) / 1024)
        spec = sorted(set(filter(None, r["gpu_spec"].split("|"))))
        assert job.allowed_models == (spec or None)
    assert kinds == {"share", "whole"}


def test_parse_spec_dedupes_and_sorts() -> None:
    assert parse_spec("V100M32|V100M16|V100M32") == ("V100M16", "V100M32")
    assert parse_spec("") == ()


def test_bad_shape_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1000,10,2,500,\n")
    with pytest.raises(ValueError, match="unsupported shape"):
        load_pods(bad)
