"""The bound LP's deadline: a relaxation cut before it is solved gives no bound and no
targets (`CUT`), the portfolio then stands the quick bound in, and a deadline that is not
reached changes nothing (no wall-clock asserts)."""

from __future__ import annotations

import math
import threading
import time

import pytest

import solver.bound as bound
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


def test_a_set_stop_cuts_the_relaxation() -> None:
    """Once its `stop` is set `relax` stops like past a deadline: no bound, no targets."""
    req = generate_custom(64, 120, seed=1)
    stop = threading.Event()
    stop.set()
    assert relax(req, also_nearest=True, stop=stop) is CUT


def test_a_stop_set_while_highs_solves_interrupts_it(monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    """The stop reaches HiGHS itself: set once the LP is built and handed to HiGHS (not
    looked at by the Python part any more), the solve is interrupted and `relax` gives
    `CUT`, where the same LP solved to its end would give a bound."""
    req = generate_custom(64, 120, seed=2)
    assert relax(req, time_limit_s=30.0) not in (None, CUT)
    stop = threading.Event()
    subscribe = bound.interrupt_on

    def then_stop(h: object, event: threading.Event) -> None:
        subscribe(h, event)  # type: ignore[arg-type]
        event.set()

    monkeypatch.setattr(bound, "interrupt_on", then_stop)
    assert relax(req, time_limit_s=30.0, stop=stop) is CUT


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.1])
def test_a_stop_at_any_moment_gives_cut_or_a_valid_bound(delay: float) -> None:
    """Whenever the stop comes, `relax` answers `CUT`, or a bound between the one of its
    whole work (the LP, then the integer re-solve of its gangs) and the LP's alone (a
    re-solve cut short keeps the LP's answer), never a bound of a half-solved LP."""
    req = generate_custom(128, 240, seed=4)
    free = relax(req, time_limit_s=30.0, nearest=True)
    lp_only = relax(req, time_limit_s=30.0, nearest=True, resolve=False)
    assert free is not None and lp_only is not None
    stop = threading.Event()
    timer = threading.Timer(delay, stop.set)
    timer.start()
    got = relax(req, time_limit_s=30.0, nearest=True, stop=stop)
    timer.join()
    assert got is not None
    assert got is CUT or free.bound - 1e-6 <= got.bound <= lp_only.bound + 1e-6


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
