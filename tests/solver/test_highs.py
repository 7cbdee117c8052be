"""The HiGHS adapter: rows numbered as declared, known optima, statuses, integrality."""

from __future__ import annotations

import random
import threading

import highspy
import pytest

from solver.highs import (
    INFEASIBLE,
    OPTIMAL,
    SOLUTION_FEASIBLE,
    HighsLp,
    interrupt_on,
    set_integral,
)


def _small() -> tuple[HighsLp, int, int]:
    """max x + y  s.t.  cap[a]: x + 2y <= 4,  cap[b]: 3x + y <= 6,  x, y in [0, 10]."""
    lp = HighsLp()
    lp.add_row("cap", "a", hi=4.0)
    lp.add_row("cap", "b", hi=6.0)
    x = lp.add_col(-1.0, hi=10.0)
    y = lp.add_col(-1.0, hi=10.0)
    for key, cx, cy in (("a", 1.0, 2.0), ("b", 3.0, 1.0)):
        lp.entry("cap", key, x, cx)
        lp.entry("cap", key, y, cy)
    return lp, x, y


def test_rows_are_numbered_in_declaration_order_across_families() -> None:
    lp = HighsLp()
    assert lp.add_row("group", 0, hi=1) == 0
    assert lp.add_row("pool", ("whole", "A100"), hi=8) == 1
    assert lp.add_row("group", 1, lo=1, hi=2) == 2
    assert lp.row("group", 1) == 2 and lp.row("pool", ("whole", "A100")) == 1
    assert lp.has_row("group", 0) and not lp.has_row("group", 2)
    assert not lp.has_row("tenant", "t")
    with pytest.raises(ValueError, match="declared twice"):
        lp.add_row("group", 0)


def test_lp_optimum_and_duals() -> None:
    lp, x, y = _small()
    h = lp.to_highs()
    h.run()
    assert h.getModelStatus() == OPTIMAL
    sol = h.getSolution()
    # vertex x + 2y = 4, 3x + y = 6: x = 1.6, y = 1.2, objective 2.8
    assert sol.col_value[x] == pytest.approx(1.6)
    assert sol.col_value[y] == pytest.approx(1.2)
    assert -h.getInfo().objective_function_value == pytest.approx(2.8)
    # duals of a minimisation: both rows bind, prices 0.4 and 0.2
    duals = [-d for d in sol.row_dual]
    assert duals[lp.row("cap", "a")] == pytest.approx(0.4)
    assert duals[lp.row("cap", "b")] == pytest.approx(0.2)


def test_integral_columns_give_the_integer_optimum() -> None:
    lp, x, y = _small()
    h = lp.to_highs()
    set_integral(h, [x, y])
    h.run()
    assert h.getInfo().primal_solution_status == SOLUTION_FEASIBLE
    values = h.getSolution().col_value
    assert all(v == pytest.approx(round(v)) for v in values)
    # the integer points of the polygon reach x + y = 2 at most (brute force)
    best = max(a + b for a in range(11) for b in range(11) if a + 2 * b <= 4 and 3 * a + b <= 6)
    assert -h.getInfo().objective_function_value == pytest.approx(best) == 2


def test_infeasible_rows_are_reported() -> None:
    lp = HighsLp()
    lp.add_row("low", 0, lo=2.0)
    lp.add_row("high", 0, hi=1.0)
    x = lp.add_col(0.0, hi=5.0)
    lp.entry("low", 0, x, 1.0)
    lp.entry("high", 0, x, 1.0)
    h = lp.to_highs()
    h.run()
    assert h.getModelStatus() == INFEASIBLE


def _random_lp(seed: int) -> HighsLp:
    """A packing LP of 200 rows and 400 columns that presolve does not finish alone."""
    rng = random.Random(seed)
    lp = HighsLp()
    for r in range(200):
        lp.add_row("cap", r, hi=rng.uniform(5, 20))
    for _ in range(400):
        x = lp.add_col(-rng.uniform(1, 3), hi=10.0)
        for r in rng.sample(range(200), 20):
            lp.entry("cap", r, x, rng.uniform(0.5, 2))
    return lp


def test_a_set_stop_interrupts_the_solve_and_an_unset_one_changes_nothing() -> None:
    """`interrupt_on`: with its stop set the solve ends interrupted, without an optimum;
    with it never set the solve reaches the optimum of a solve without it."""
    lp = _random_lp(0)
    plain = lp.to_highs()
    plain.run()
    assert plain.getModelStatus() == OPTIMAL
    stop = threading.Event()
    watched = lp.to_highs()
    interrupt_on(watched, stop)
    watched.run()
    assert watched.getModelStatus() == OPTIMAL
    assert watched.getInfo().objective_function_value == pytest.approx(
        plain.getInfo().objective_function_value)
    stop.set()
    stopped = lp.to_highs()
    interrupt_on(stopped, stop)
    stopped.run()
    assert stopped.getModelStatus() == highspy.HighsModelStatus.kInterrupt
