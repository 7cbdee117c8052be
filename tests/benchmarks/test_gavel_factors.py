"""benchmarks/data/gavel.py: interference factors from Gavel's pair throughputs, checked by
hand on an excerpt of the file.

`data/gavel_excerpt.json`: four single-GPU job types and one 2-GPU type on the V100, cut
from stanford-futuredata/gavel @ c4fa40097339e9608ab71fd64c8bdea96a5e4a4c,
`scheduler/simulation_throughputs.json` (MIT).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.data.gavel import (
    MIN_FACTOR,
    classes,
    factors,
    gavel_path,
    interference_pairs,
    job_class,
)

EXCERPT = Path(__file__).parent / "data" / "gavel_excerpt.json"
R50, TR, A3C, R50_128 = ("ResNet-50 (batch size 64)", "Transformer (batch size 64)", "A3C",
                         "ResNet-50 (batch size 128)")


def test_job_class() -> None:
    assert job_class("('A3C', 1)") == "A3C"
    assert job_class("('ResNet-50 (batch size 64)', 1)") == R50
    assert job_class("('ResNet-50 (batch size 64)', 2)") is None
    assert job_class("null") is None


def test_factors_by_hand() -> None:
    f = factors("v100", EXCERPT)
    # ResNet-50 alone 4.3948 steps/s, beside the Transformer 2.5503: 2.5503 / 4.3948.
    assert f[(R50, TR)] == pytest.approx(0.58029, abs=1e-5)
    # The Transformer beside ResNet-50: 1.7739 of 8.6178 alone (not symmetric).
    assert f[(TR, R50)] == pytest.approx(0.20585, abs=1e-5)
    # The Transformer beside A3C: 5.7685 / 8.6178; A3C beside itself: 3.6572 / 7.1758.
    assert f[(TR, A3C)] == pytest.approx(0.66937, abs=1e-5)
    assert f[(A3C, A3C)] == pytest.approx(0.50966, abs=1e-5)
    # ResNet-50 at batch 128 ran with none of them (0 steps/s): the floor.
    assert f[(R50, R50_128)] == MIN_FACTOR == f[(R50_128, A3C)]
    # 4 single-GPU types, every ordered pair; the 2-GPU type is left out.
    assert len(f) == 16
    assert classes("v100", EXCERPT) == sorted([R50, TR, A3C, R50_128])


def test_pairs_are_valid_contract_input() -> None:
    pairs = interference_pairs("v100", only={R50, TR}, path=EXCERPT)
    assert [(p.a, p.b) for p in pairs] == [(R50, R50), (R50, TR), (TR, R50), (TR, TR)]
    assert all(0 < p.speed <= 2 for p in pairs)


def test_the_shared_file_if_present() -> None:
    if not gavel_path().exists():
        pytest.skip(f"the shared Gavel data is not at {gavel_path()}")
    f = factors("v100")
    assert len(classes("v100")) == 26
    assert len(f) == 26 * 26
    assert all(0 < s <= 1.0 for s in f.values())
    # The excerpt's numbers are the file's.
    assert f[(R50, TR)] == pytest.approx(factors("v100", EXCERPT)[(R50, TR)])
