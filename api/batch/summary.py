"""Batch results: one Row per request and variant, running totals, the table and the CSV.

Only aggregates are kept in memory (counts, sums, maxima per variant); every Row goes to the
optional CSV file as soon as it is known.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO

from rich import box
from rich.table import Table

from models import Plan

#: The status of a request that produced no plan (unreadable, invalid, solver error).
FAILED = "failed"


@dataclass(frozen=True)
class Row:
    """The outcome of one request under one variant (a CSV line)."""

    name: str
    variant: str
    origin: str
    status: str
    resumed: bool = False
    solver: str = ""
    objective_value: float | None = None
    gap: float | None = None
    jobs_placed: int = 0
    jobs_unplaced: int = 0
    solve_time_s: float | None = None
    wall_s: float | None = None
    plan_path: str = ""
    error: str = ""

    @property
    def failed(self) -> bool:
        """True when the request produced no plan."""
        return self.status == FAILED

    @classmethod
    def from_plan(cls, plan: Plan, *, name: str, variant: str, origin: str,
                  wall_s: float | None, plan_path: Path, resumed: bool = False) -> Row:
        """A row describing a solved (or resumed) plan."""
        return cls(name=name, variant=variant, origin=origin, status=plan.status,
                   resumed=resumed, solver=plan.solver, objective_value=plan.objective_value,
                   gap=plan.gap, jobs_placed=len(plan.assignments),
                   jobs_unplaced=len(plan.unplaced), solve_time_s=plan.solve_time_s,
                   wall_s=wall_s, plan_path=str(plan_path))


@dataclass
class Tally:
    """Running aggregates over the rows of one variant (or all of them)."""

    requests: int = 0
    failed: int = 0
    resumed: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    placed: int = 0
    unplaced: int = 0
    gap_sum: float = 0.0
    gap_count: int = 0
    gap_max: float | None = None
    wall_sum: float = 0.0
    wall_count: int = 0
    wall_max: float | None = None

    def add(self, row: Row) -> None:
        """Fold one row into the aggregates."""
        self.requests += 1
        self.statuses[row.status] += 1
        if row.failed:
            self.failed += 1
            return
        self.resumed += row.resumed
        self.placed += row.jobs_placed
        self.unplaced += row.jobs_unplaced
        if row.gap is not None:
            self.gap_sum += row.gap
            self.gap_count += 1
            self.gap_max = row.gap if self.gap_max is None else max(self.gap_max, row.gap)
        if row.wall_s is not None:
            self.wall_sum += row.wall_s
            self.wall_count += 1
            self.wall_max = row.wall_s if self.wall_max is None else max(self.wall_max, row.wall_s)

    @property
    def gap_mean(self) -> float | None:
        """Mean gap over the plans that report one."""
        return self.gap_sum / self.gap_count if self.gap_count else None

    @property
    def wall_mean(self) -> float | None:
        """Mean wall time per solve (resumed plans excluded)."""
        return self.wall_sum / self.wall_count if self.wall_count else None


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _statuses(t: Tally) -> str:
    """`optimal 3, failed 1 (2 resumed)`: plan statuses first, failures last."""
    parts = [f"{s} {n}" for s, n in sorted(t.statuses.items()) if s != FAILED]
    if t.failed:
        parts.append(f"{FAILED} {t.failed}")
    text = ", ".join(parts) or "-"
    return f"{text} ({t.resumed} resumed)" if t.resumed else text


@dataclass
class Summary:
    """Totals per variant and overall; `interrupted` when Ctrl-C cut the batch short."""

    variants: list[str] = field(default_factory=list)
    per_variant: dict[str, Tally] = field(default_factory=dict)
    total: Tally = field(default_factory=Tally)
    expected: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False

    def add(self, row: Row) -> None:
        """Count one row."""
        self.per_variant.setdefault(row.variant, Tally()).add(row)
        self.total.add(row)

    @property
    def exit_code(self) -> int:
        """0 when every request has a plan, 1 when any failed (130 after Ctrl-C)."""
        if self.interrupted:
            return 130
        return 1 if self.total.failed else 0

    def table(self) -> Table:
        """The end-of-batch table: one line per variant plus a total when there are several."""
        title = "gpuplan batch" + (" (interrupted)" if self.interrupted else "")
        table = Table(title=title, caption=self._caption(), box=box.SIMPLE_HEAD)
        table.add_column("variant", overflow="fold")
        for col in ("jobs placed\n/ unplaced", "gap\nmean / max", "solve s\nmean / max"):
            table.add_column(col, justify="right", no_wrap=True)
        table.add_column("statuses")
        labels = [v for v in self.variants if v in self.per_variant]
        labels += [v for v in self.per_variant if v not in labels]
        rows = [(v or "(as given)", self.per_variant[v]) for v in labels]
        if len(rows) != 1:
            rows.append(("total", self.total))
        for label, t in rows:
            table.add_row(label, f"{t.placed} / {t.unplaced}",
                          f"{_num(t.gap_mean, '.2%')} / {_num(t.gap_max, '.2%')}",
                          f"{_num(t.wall_mean, '.3f')} / {_num(t.wall_max, '.3f')}",
                          _statuses(t))
        return table

    def _caption(self) -> str:
        done = self.total.requests
        caption = f"{done} of {self.expected} requests in {self.elapsed_s:.1f} s wall time"
        if self.total.wall_count:
            caption += f"; {self.total.wall_sum:.1f} s of solving"
        return caption


#: CSV columns, in Row field order.
CSV_FIELDS = tuple(f.name for f in fields(Row))


class CsvSink:
    """Writes rows to a CSV file as they come (flushed, so a cut batch keeps its lines)."""

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle
        self._writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        self._writer.writeheader()

    def write(self, row: Row) -> None:
        """Append one row."""
        values = {k: ("" if v is None else v) for k, v in asdict(row).items()}
        self._writer.writerow(values)
        self._handle.flush()
