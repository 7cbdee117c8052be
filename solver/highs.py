"""A small HiGHS adapter: LPs built by columns and named row families, no row offsets.

The bound (solver/bound.py) and the share re-pack (solver/share_packing.py) solve LPs and
MIPs of their own, directly with HiGHS (their columns are continuous or aggregated, unlike
the integer `LinearModel` the planners share). `HighsLp` lets them say which row a
coefficient goes to by family and key (`lp.entry("pool", pool, col, amount)`) instead of
computing its index: rows are numbered in the order they are declared, so a model that
declares its families in a fixed order gets a fixed layout.

    lp = HighsLp()
    lp.add_row("pool", p, hi=capacity[p])          # declare the rows...
    x = lp.add_col(cost=-value, hi=count)          # ...add columns (HiGHS minimises)...
    lp.entry("pool", p, x, amount)                 # ...and their coefficients
    h = lp.to_highs()                              # a highspy.Highs, ready to run
"""

from __future__ import annotations

from collections.abc import Hashable
from threading import Event

import highspy
import numpy as np
from highspy.highs import HighsCallbackEvent

from solver.quiet import new_highs

#: `Highs.getModelStatus()` values the callers act on.
OPTIMAL = highspy.HighsModelStatus.kOptimal
INFEASIBLE = highspy.HighsModelStatus.kInfeasible
#: `HighsInfo.primal_solution_status` of a run that found a feasible solution.
SOLUTION_FEASIBLE = int(highspy.SolutionStatus.kSolutionStatusFeasible)

INF = highspy.kHighsInf


class HighsLp:
    """Columns (cost, bounds), rows in named families (key -> row index, bounds) and the
    matrix entries; `to_highs` hands it all to a fresh HiGHS instance."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.col_lo: list[float] = []
        self.col_hi: list[float] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []
        #: family -> key -> row index
        self.families: dict[str, dict[Hashable, int]] = {}
        #: the matrix entries as three parallel lists (row, column, coefficient): one
        #: numpy array each in `to_highs`, sorted there without a tuple per entry
        self._rows: list[int] = []
        self._cols: list[int] = []
        self._vals: list[float] = []

    @property
    def num_cols(self) -> int:
        """Columns added so far."""
        return len(self.cost)

    def add_row(self, family: str, key: Hashable, lo: float = -INF, hi: float = INF
                ) -> int:
        """Declare the row `key` of `family`, lo <= row <= hi; returns its index."""
        rows = self.families.setdefault(family, {})
        if key in rows:
            raise ValueError(f"row {family}[{key!r}] declared twice")
        rows[key] = len(self.row_lo)
        self.row_lo.append(lo)
        self.row_hi.append(hi)
        return rows[key]

    def has_row(self, family: str, key: Hashable) -> bool:
        """Whether the row `key` of `family` was declared."""
        return key in self.families.get(family, {})

    def row(self, family: str, key: Hashable) -> int:
        """The index of the row `key` of `family`."""
        return self.families[family][key]

    def add_col(self, cost: float, hi: float, lo: float = 0.0) -> int:
        """A new column lo <= x <= hi of objective coefficient `cost`; returns its index."""
        self.cost.append(cost)
        self.col_lo.append(lo)
        self.col_hi.append(hi)
        return len(self.cost) - 1

    def entry(self, family: str, key: Hashable, col: int, coef: float) -> None:
        """The coefficient of column `col` in the row `key` of `family`."""
        self.entry_at(self.families[family][key], col, coef)

    def rows_of(self, family: str) -> dict[Hashable, int]:
        """The rows of `family` declared so far, key -> row index (empty if none): for
        a caller that adds many entries by index (`entry_at`)."""
        return self.families.get(family, {})

    def entry_at(self, row: int, col: int, coef: float) -> None:
        """The coefficient of column `col` in the row of index `row` (`rows_of`)."""
        self._rows.append(row)
        self._cols.append(col)
        self._vals.append(coef)

    def to_highs(self) -> highspy.Highs:
        """A silent HiGHS instance holding the model (rows stored in index order)."""
        h = new_highs()
        n_cols, n_rows = len(self.cost), len(self.row_lo)
        h.addVars(n_cols, np.array(self.col_lo), np.array(self.col_hi))
        h.changeColsCost(n_cols, np.arange(n_cols, dtype=np.int32), np.array(self.cost))
        rows = np.array(self._rows, dtype=np.int64)
        cols = np.array(self._cols, dtype=np.int32)
        vals = np.array(self._vals, dtype=np.float64)
        # by row, then column, then value: the order of sorting (row, col, value) tuples,
        # so the matrix HiGHS gets (and its solution) is the one it always got
        order = np.lexsort((vals, cols, rows))
        rows = rows[order]
        starts = np.searchsorted(rows, np.arange(n_rows)).astype(np.int32)
        h.addRows(n_rows, np.array(self.row_lo, dtype=np.float64),
                  np.array(self.row_hi, dtype=np.float64), len(order), starts,
                  cols[order], vals[order])
        return h


def set_integral(h: highspy.Highs, cols: list[int]) -> None:
    """Make columns `cols` of `h` integer."""
    idx = np.array(cols, dtype=np.int32)
    h.changeColsIntegrality(len(idx), idx, np.full(len(idx), highspy.HighsVarType.kInteger))


def interrupt_on(h: highspy.Highs, stop: Event) -> None:
    """Make `h`'s solves stop once `stop` is set (from any thread): its simplex, interior
    point and MIP loops ask at each of their interrupt checks. A solve interrupted so ends
    with the status `kInterrupt` and no optimal solution."""
    def check(e: HighsCallbackEvent) -> None:
        if stop.is_set():
            e.interrupt()

    for hook in (h.cbSimplexInterrupt, h.cbIpmInterrupt, h.cbMipInterrupt):
        hook.subscribe(check)
