"""`relax(also_nearest=True)`: the nearest counts come from the LP's own solution, the
integer parts from the integer re-solve's when it ran (solver/bound.py: `relax`)."""

from __future__ import annotations

import math

import pytest

import solver.bound as bound
from benchmarks.generator import generate


def test_the_nearest_counts_are_the_lps_own_when_the_integer_re_solve_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """M (1,024 GPUs / 1,500 jobs) seed 2: the integer re-solve changes the integer parts
    (`targets`), not the nearest counts, which stay those of the LP solved alone."""
    req = generate("M", 2)
    both = bound.relax(req, time_limit_s=30.0, also_nearest=True)
    monkeypatch.setattr(bound, "MIP_MIN_LPS", math.inf)   # the LP alone
    alone = bound.relax(req, time_limit_s=30.0, also_nearest=True)
    assert both is not None and alone is not None
    assert both.targets != alone.targets        # the re-solve ran and changed them
    assert both.nearest == alone.nearest and both.nearest
    assert both.nearest_amounts == alone.nearest_amounts
    # the re-solve's own nearest counts are kept beside them, the LP alone has none
    assert both.resolved_nearest and not alone.resolved_nearest
