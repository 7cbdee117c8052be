"""`--order FILE`: parsing, validation, round trip, and a replay through the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from api.cli import app
from benchmarks.openb.inflation import Arrivals
from benchmarks.openb.loader import load_nodes, load_pods
from benchmarks.openb.order import arrivals_from_order, parse_order, read_order, write_order

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def test_text_and_json_forms() -> None:
    assert parse_order("# peer order\na\n\n b \n") == (["a", "b"], None)
    assert parse_order('["a", "b"]') == (["a", "b"], None)
    names, ranks = parse_order('{"pods": ["a"], "node_tie_ranks": {"n0": 1, "n1": 0}}')
    assert names == ["a"] and ranks == {"n0": 1, "n1": 0}


@pytest.mark.parametrize("text", [
    '{"pods": ["a"], "extra": 1}',
    '{"pods": "a"}',
    '{"pods": ["a"], "node_tie_ranks": {"n0": "x"}}',
    '[1, 2]',
    '[',
])
def test_malformed_json_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_order(text)


def test_copies_map_to_their_original_and_ranks_to_nodes() -> None:
    pods = load_pods(DATA / "pods_slice.csv")
    nodes = load_nodes(DATA / "nodes_slice.csv")
    first, second = pods.names[0], pods.names[1]
    ranks = {n: len(nodes) - i for i, n in enumerate(nodes.names)}
    out = arrivals_from_order([second, f"{first}-tuned-7", first], ranks, pods, nodes)
    assert out.pods.names == [second, f"{first}-tuned-7", first]
    assert out.pods.cpu_milli[1] == pods.cpu_milli[0]
    assert out.pods.gpu_spec[1] == pods.gpu_spec[0]
    assert out.tie_rank is not None and out.tie_rank[0] == len(nodes)


@pytest.mark.parametrize(("names", "ranks", "message"), [
    (["nope"], None, "neither a pod"),
    (["X-tuned-x"], None, "neither a pod"),
    ([], None, "no pod"),
    ("dup", None, "twice"),
    ("one", {"unknown-node": 0}, "unknown node"),
    ("one", {}, "no rank"),
])
def test_bad_orders_are_refused(names: list[str] | str, ranks: dict[str, int] | None,
                                message: str) -> None:
    pods = load_pods(DATA / "pods_slice.csv")
    nodes = load_nodes(DATA / "nodes_slice.csv")
    if names == "dup":
        names = [pods.names[0], pods.names[0]]
    elif names == "one":
        names = [pods.names[0]]
    with pytest.raises(ValueError, match=message):
        arrivals_from_order(list(names), ranks, pods, nodes)


def test_write_then_read_is_the_same_sequence(tmp_path: Path) -> None:
    pods = load_pods(DATA / "pods_slice.csv")
    nodes = load_nodes(DATA / "nodes_slice.csv")
    seq = pods.take([3, 1, 3]).renamed([pods.names[3], pods.names[1], f"{pods.names[3]}-tuned-0"])
    ranks = np.arange(len(nodes))[::-1].copy()
    write_order(Arrivals(seq, ranks), nodes, tmp_path / "o.json")
    back = read_order(tmp_path / "o.json", pods, nodes)
    assert back.pods.names == seq.names
    assert np.array_equal(back.pods.total_gpu_milli, seq.total_gpu_milli)
    assert back.tie_rank is not None and np.array_equal(back.tie_rank, ranks)


def test_cli_replays_an_order_file(shared_data: Path, tmp_path: Path) -> None:
    pods = load_pods()
    order = pods.names[:300][::-1] + [f"{pods.names[5]}-tuned-{k}" for k in range(3)]
    path = tmp_path / "order.txt"
    path.write_text("\n".join(order) + "\n")
    result = runner.invoke(app, ["bench", "openb", "--seeds", "42", "--policies", "bestfit",
                                 "--order", str(path), "--out", str(tmp_path / "out"),
                                 "--save-orders", str(tmp_path / "saved")])
    assert result.exit_code == 0, result.output
    assert "pods 303" in result.output
    saved = json.loads((tmp_path / "saved" / "order-default-42.json").read_text())
    assert saved["pods"] == order
    assert "node_tie_ranks" not in saved  # the file had none: the run drew them
    with (tmp_path / "out" / "per_seed.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == ["bestfit"]


def test_cli_refuses_a_bad_order_file_in_one_line(shared_data: Path, tmp_path: Path) -> None:
    path = tmp_path / "order.txt"
    path.write_text("openb-pod-0001\nnot-a-pod\n")
    result = runner.invoke(app, ["bench", "openb", "--seeds", "42", "--policies", "bestfit",
                                 "--order", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "not-a-pod" in result.output
    assert "Traceback" not in result.output
