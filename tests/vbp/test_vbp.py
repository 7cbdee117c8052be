"""`benchmarks/vbp.py`: the VPSolver format, the mapping to the contract, the command."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from benchmarks.vbp import VbpInstance, load_family, parse_vbp, to_request, unmappable
from solver import plan
from solver.validate import validate_plan

runner = CliRunner()

TEXT = """3
100 50 10
3
40 10 2 2
60 25 5 1
20 40 3 1
"""


def test_parse_vbp() -> None:
    inst = parse_vbp("toy", TEXT)
    assert inst.capacity == (100, 50, 10)
    assert inst.items == (((40, 10, 2), 2), ((60, 25, 5), 1), ((20, 40, 3), 1))
    assert inst.n_items == 4 and inst.dims == 3
    with pytest.raises(ValueError):
        parse_vbp("bad", "2\n10 10\n2\n1 1 1\n")  # two item types announced, one given


def test_mapping_to_the_contract_is_exact() -> None:
    inst = parse_vbp("toy", TEXT)
    req = to_request(inst, bins=2)
    assert [n.name for n in req.cluster.nodes] == ["bin0", "bin1"]
    node = req.cluster.nodes[0]
    assert (node.cpu_millicores, node.memory_gib, len(node.gpus)) == (50.0, 10.0, 1)
    jobs = {j.name: j for j in req.jobs}
    assert len(jobs) == 4
    a = jobs["t0_1"]
    assert (a.gpu_share, a.cpu_millicores, a.host_memory_gib) == (0.4, 10.0, 2.0)
    # each item is worth 1 in the throughput objective: it counts the items placed
    assert all(j.weight * (j.gpu_share or 0) == pytest.approx(1.0) for j in req.jobs)
    result = plan(req)
    assert validate_plan(req, result) == []
    # bin 1: 40+60 / 10+25 / 2+5; bin 2: 40+20 / 10+40 / 2+3: all four fit in two bins
    assert len(result.assignments) == 4 and result.status == "optimal"
    assert result.objective_value == pytest.approx(4.0)
    assert len(plan(to_request(inst, bins=1)).assignments) == 2


def test_unmappable_instances_say_why() -> None:
    negative = VbpInstance("n", (10, 10), (((5, -1), 1), ((5, 5), 1)))
    assert unmappable(negative) == "negative item weights"
    full = VbpInstance("f", (10, 10), (((10, 0), 1), ((0, 10), 1)))
    assert "no dimension" in (unmappable(full) or "")
    wide = VbpInstance("w", (1,) * 5, (((1,) * 5, 1),))
    assert "5 dimensions" in (unmappable(wide) or "")
    with pytest.raises(ValueError):
        to_request(negative, bins=1)


def test_known_figures_are_read(shared_data: Path) -> None:
    insts = {i.name: i for i in load_family("triplet", 3)}
    c = insts["classC_60_3_2"]
    assert (c.n_items, c.lower_bound, c.optimum) == (60, 20, 20)
    assert unmappable(insts["classC_60_3_0"]) == "negative item weights"


@pytest.mark.parametrize("args", [["--family", "nope"], ["--dims", "7"],
                                  ["--solvers", "magic"]])
def test_bad_options_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, ["bench", "vbp", *args])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_short_run_writes_its_csv(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "vbp.csv"
    result = runner.invoke(app, ["bench", "vbp", "--family", "new", "--limit", "2",
                                 "--max-items", "20", "--solvers", "auto", "--time-limit", "5",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    # the small New instances are solved to their known optimum: every item placed
    assert all(r["placed"] == r["items"] and r["status"] == "optimal" for r in rows)
