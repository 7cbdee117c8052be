"""The bound LP's deadline: a relaxation cut before it is solved gives no bound and no
targets (`CUT`), the portfolio then stands the quick bound in, and a deadline that is not
reached changes nothing (no wall-clock asserts)."""

from __future__ import annotations

import math
import time

import pytest

from benchmarks.generator import generate_custom
from heuristics.greedy import plan_greedy
from models.objective import evaluate
from solver.bound import CUT, relax
from solver.context import Context


def test_a_passed_deadline_cuts_the_relaxation() -> None:
    """Past its deadline `relax` stops before it solves: no bound, no targets."""
    req = generate_custom(64, 120, seed=1)
    cut = relax(req, also_nearest=True, deadline=time.monotonic() - 1.0)
    assert cut is CUT
    assert math.isinf(cut.bound) and not cut.targets and not cut.nearest


def test_a_distant_deadline_changes_nothing() -> None:
    """A deadline that is not reached gives the bound and targets of no deadline."""
    req = generate_custom(64, 120, seed=2)
    free = relax(req, time_limit_s=30.0, also_nearest=True)
    timed = relax(req, time_limit_s=30.0, also_nearest=True,
                  deadline=time.monotonic() + 3600.0)
    assert free is not None and timed is not None
    assert timed.bound == free.bound
    assert list(timed.targets.items()) == list(free.targets.items())
    assert list(timed.nearest.items()) == list(free.nearest.items())
    assert timed.amounts == free.amounts and timed.nearest_amounts == free.nearest_amounts


def test_the_quick_bound_stands_in_for_a_cut_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the LP is cut, the portfolio's bound is the quick bound (never infinite), and
    the starting plan has no rounding to try."""
    import solver.portfolio as portfolio

    req = generate_custom(64, 120, seed=3)
    ctx = Context.start(req.model_copy(update={"policy": req.policy.model_copy(
        update={"time_limit_s": 30.0})}), None, None)
    monkeypatch.setattr(portfolio, "relax", lambda *a, **k: CUT)
    bound = ctx.portfolio.bound()
    assert bound is not None and math.isfinite(bound)
    # a proven bound: at least what a plan reaches (the quick bound's descent may stop
    # at another pass than a run without a deadline, so not compared for equality)
    greedy = evaluate(req, plan_greedy(req, seed=0).placements).objective_value
    assert bound >= greedy - 1e-6
    assert ctx.portfolio._schedule() == []
    assert any("cut by the time limit" in n for n in ctx.notes)
