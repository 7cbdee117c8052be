"""The allocation curve bins rows like the paper's analysis (`merge_alloc_discrete`)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.openb.curve import binned, value_at
from benchmarks.openb.online import RunResult


def _run(x: list[float], y: list[float]) -> RunResult:
    return RunResult("p", 42, np.array(x), np.array(y), 0, 0, 0.0)


def test_rows_rounded_to_two_decimals_then_averaged_per_whole_percent() -> None:
    # three rows at x ~ 130%: y 95.12345%, 95.12655%, 95.2% -> 95.12, 95.13, 95.2
    run = _run([1.2996, 1.3001, 1.3004], [0.9512345, 0.9512655, 0.952])
    assert value_at(run, 130) == pytest.approx((95.12 + 95.13 + 95.2) / 3)


def test_a_percent_without_rows_takes_its_neighbours() -> None:
    run = _run([0.99, 1.01], [0.90, 0.92])  # no row at 100%: rows at 99% and 101%
    assert value_at(run, 100) == pytest.approx(91.0)
    assert np.isnan(binned(run)[50])
