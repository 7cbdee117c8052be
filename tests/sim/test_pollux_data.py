"""The speedup derivation of `benchmarks/data/pollux.py`, checked by hand.

`data/pollux_excerpt/bert/` holds rows copied from Pollux's measured BERT step times
(../shared/data/pollux/traces/bert, petuum/adaptdl @ c793c708, Apache-2.0): placements
1, 4, 24 and 44 at per-GPU batches 11 and 12 (and 1 at 8), and the scalability rows of
6 nodes x 24 GPUs at 11 and 12; plus one made-up spread row (8 nodes, 16 GPUs) that no
curve may read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.data import pollux
from benchmarks.data.pollux import (
    Measurement,
    PolluxDataError,
    best_local_bsz,
    derive_curve,
    packed_placement,
    read_measurements,
)
from benchmarks.paths import data_dir

EXCERPT = Path(__file__).parent / "data" / "pollux_excerpt" / "bert"


def test_packed_placement_fills_four_gpu_nodes_and_names_it_as_the_files_do() -> None:
    assert packed_placement(1) == (1,)
    assert packed_placement(4) == (4,)
    assert packed_placement(6) == (2, 4)        # nodes of 4 and 2, file name "24"
    assert packed_placement(9) == (1, 4, 4)
    assert packed_placement(24) == (4,) * 6


def test_best_local_bsz_counts_rows_and_breaks_ties_to_the_largest() -> None:
    rows = [Measurement((1,), b, 1.0) for b in (8, 8, 16, 16, 4)]
    assert best_local_bsz(rows) == 16
    assert best_local_bsz([*rows, Measurement((2,), 8, 1.0)]) == 8
    with pytest.raises(PolluxDataError):
        best_local_bsz([])


def test_bert_excerpt_curve_by_hand() -> None:
    curve = derive_curve("bert", read_measurements(EXCERPT))
    # local_bsz 12 has 4 placement rows + 2 scalability rows (6 nodes x 24 and the spread
    # 8 x 16), 11 has 4 + 1, 8 has 1: b* = 12.
    assert curve.local_bsz == 12
    t1 = 12 / 0.9215156733989716                      # one GPU: 13.022 samples/s
    assert curve.throughput_1 == pytest.approx(t1)
    expected = {
        1: 1.0,
        4: (4 * 12 / 0.9571182131767273) / t1,         # placement "4": 3.851
        6: (6 * 12 / 2.3427307307720184) / t1,         # "24" (4 + 2 GPUs): 2.360
        8: (8 * 12 / 2.538950562477112) / t1,          # "44": 2.904
        24: (24 * 12 / 1.8948083817958832) / t1,       # scalability 6 nodes x 24: 11.672
    }
    # Sizes 2, 3, 5, 7 have no row; 16 only the spread row (2 GPUs on each of 8 nodes).
    assert curve.speedup.keys() == expected.keys()
    for n, s in expected.items():
        assert curve.speedup[n] == pytest.approx(s, rel=1e-12)
    assert curve.speedup[4] == pytest.approx(3.8512, abs=1e-4)
    assert curve.speedup[24] == pytest.approx(11.6720, abs=1e-4)
    # One GPU does SAMPLES / throughput_1 seconds of work.
    assert curve.work_s(1302.2) == pytest.approx(1302.2 / t1)


def test_missing_single_gpu_row_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "placements.csv").write_text("placement,local_bsz,step_time,sync_time\n"
                                             "4,12,1.0,0.1\n")
    (tmp_path / "scalability.csv").write_text(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n")
    with pytest.raises(PolluxDataError, match="single-GPU"):
        derive_curve("x", read_measurements(tmp_path))
    with pytest.raises(PolluxDataError, match="cannot read"):
        read_measurements(tmp_path / "absent")


@pytest.mark.skipif(not (data_dir() / "pollux" / "traces").is_dir(),
                    reason="../shared/data/pollux is not available")
def test_shared_curves_cover_every_nominal_size_of_the_workloads() -> None:
    curves = pollux.curves()
    assert set(curves) == set(pollux.APPLICATIONS)
    for c in curves.values():
        assert c.speedup[1] == 1.0
        assert {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64} <= set(c.speedup)
        assert all(s > 0 for s in c.speedup.values())
