"""`gpuplan bench elastic`: workload parsing, the published averages, the target lines, a
small run through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from benchmarks.elastic import parse_workloads, published_averages, target_lines
from benchmarks.paths import data_dir

needs_data = pytest.mark.skipif(not (data_dir() / "pollux").is_dir(),
                                reason="../shared/data/pollux is not available")


def test_parse_workloads() -> None:
    assert parse_workloads("1-8") == list(range(1, 9))
    assert parse_workloads("3,1,3") == [1, 3]
    for bad in ("0", "9", "", "2-9"):
        with pytest.raises(ValueError, match="1 to 8"):
            parse_workloads(bad)


def test_target_lines_say_met_or_missed() -> None:
    lines = target_lines({"gpuplan": 70.0, "gpuplan_fixed": 100.0, "afs_elastic": 69.0})
    assert lines[0].startswith("gpuplan vs gpuplan_fixed: 30.0% lower") and "met" in lines[0]
    assert lines[1].endswith("MISSED")
    assert target_lines({"afs_elastic": 1.0}) == []


@needs_data
def test_published_averages_are_the_papers_means() -> None:
    pub = published_averages()
    assert round(pub["Pollux"]["mean"]) == 2751
    assert round(pub["Tiresias+TunedJobs"]["mean"]) == 4038
    assert round(pub["Optimus+Oracle"]["mean"]) == 5682
    assert round(pub["Pollux"]["workload-6"]) == 2446


@needs_data
def test_cli_runs_a_small_comparison(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bench", "elastic", "--workloads", "2", "--jobs", "12",
                                   "--policies", "tiresias_las,afs_elastic",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "| 2 |" in res.output
    assert {p.name for p in tmp_path.iterdir()} == {"summary.json", "summary.md",
                                                   "jct_cdf.png"}


def test_cli_rejects_bad_input_with_exit_2() -> None:
    for args in (["--workloads", "9"], ["--policies", "nope"]):
        res = CliRunner().invoke(app, ["bench", "elastic", *args])
        assert res.exit_code == 2, res.output


@needs_data
def test_workers_give_the_same_results_as_one_process() -> None:
    from benchmarks.elastic import run

    kw = {"limit": 10, "round_s": 60.0}
    one = run([1, 2], ["tiresias_las", "afs_elastic"], workers=1, **kw)
    two = run([1, 2], ["tiresias_las", "afs_elastic"], workers=2, **kw)
    for k in (1, 2):
        for p in ("tiresias_las", "afs_elastic"):
            a, b = one[k].summaries[p], two[k].summaries[p]
            assert (a["avg_jct_s"], a["resizes"]) == (b["avg_jct_s"], b["resizes"])


def test_combine_merges_single_workload_runs(tmp_path: Path) -> None:
    import json

    from benchmarks.elastic import combine, markdown_table, mean_jcts

    def doc(k: int, jct: dict[str, float]) -> dict[str, object]:
        return {"meta": {"policies": list(jct), "round_s": 120.0, "workloads": [k]},
                "workloads": {str(k): {"summaries": {p: {"avg_jct_s": v} for p, v in jct.items()},
                                       "jct_s": {p: [v] for p, v in jct.items()}}}}

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text(json.dumps(doc(1, {"x": 10.0, "y": 30.0})))
    (tmp_path / "b.json").write_text(json.dumps(doc(2, {"x": 20.0, "y": 50.0, "z": 1.0})))
    docs, policies, meta = combine([tmp_path / "a", tmp_path / "b.json"])
    assert sorted(docs) == [1, 2] and policies == ["x", "y"]
    assert meta["workloads"] == [1, 2] and meta["round_s"] == 120.0
    assert mean_jcts(docs, policies) == {"x": 15.0, "y": 40.0}
    table = markdown_table(docs, policies, {"P": {"workload-1": 5.0, "workload-2": 7.0,
                                                   "mean": 9.0}})
    # Fewer than 8 workloads: the published mean is taken over the same workloads.
    assert table.splitlines()[-1] == "| **mean** | **15** | **40** | 6 |"
    # A rerun of one policy on both workloads replaces that policy's figures only.
    rerun = doc(1, {"y": 20.0})
    rerun["workloads"]["2"] = doc(2, {"y": 40.0})["workloads"]["2"]
    (tmp_path / "c.json").write_text(json.dumps(rerun))
    docs, policies, _ = combine([tmp_path / "a", tmp_path / "b.json", tmp_path / "c.json"])
    assert policies == ["x", "y"]
    assert mean_jcts(docs, policies) == {"x": 15.0, "y": 30.0}
    assert docs[2]["jct_s"]["y"] == [40.0] and docs[2]["jct_s"]["z"] == [1.0]


@needs_data
def test_gpuplan_in_deterministic_mode_reports_its_wall_cuts() -> None:
    from benchmarks.elastic import run_one

    cmp = run_one(3, ["gpuplan_fixed", "gpuplan"], limit=4, round_s=300.0)
    for p in ("gpuplan_fixed", "gpuplan"):
        s = cmp.summaries[p]
        assert isinstance(s["wall_cuts"], int) and 0 <= s["wall_cuts"] <= s["rounds"]
        assert all(r.finish is not None for r in cmp.results[p].jobs)
