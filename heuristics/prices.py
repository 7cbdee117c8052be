"""Per-model GPU prices that clear the pooled market of the pending whole-GPU and shared jobs.

On a heterogeneous cluster the best fit that sends each job to the model where its value is
highest fills the fast models with whatever comes first in value-density order, and the
jobs left for the slower models are those that lose the most there: on the generated M
instance (1,024 GPUs, 1,500 jobs) the greedy plan sat 8.5% below the LP bound while the
rounded LP plan was within 0.2%, nearly all of it in which jobs went to which model. A
job should go where its relative advantage is highest, which is what the LP's duals say.

`model_prices` computes those duals cheaply: one price per GPU of each model such that,
when every job picks the model with the best value net of its price (`value - price *
size`, or nothing when that is negative everywhere), no model is asked for more GPUs than
it has free. It is the pooled LP (no nodes, no gangs, no host resources) solved by
coordinate descent on its dual: for one model at a time, with the others' prices fixed,
each job wants the model below a threshold price, so sorting the thresholds gives the
price at which the demand just fits (the marginal job's threshold). A fixed number of
rounds over the models (`ROUNDS`) gives the prices; each is a sort of the jobs.

MIG jobs use the MIG-enabled GPUs, a separate pool, and take no part; elastic gangs are
priced at their nominal size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from models.instance import JobInfo

#: Rounds over the models (each round re-prices every model once). The prices rise from 0
#: towards the pooled market's clearing prices and stop short of them on purpose: the pool
#: ignores nodes, gangs, host resources and fragmentation, and its fully cleared prices
#: overprice the fast models (on M seeds 0-2, 12 rounds left greedy 0.8-2.2% below the LP
#: bound, 32 rounds to convergence 2.1-4.5%; benchmarks/RESULTS.md).
ROUNDS = 12
#: A round that moves no price by more than this (relative) ends the iteration.
_SETTLED = 1e-6
#: Rows a `PriceRows` keeps beyond one per job of its last call, at most (rows of jobs
#: gone pile up over a session's plans; then only the last call's are kept).
ROWS_SLACK = 4096


@dataclass
class PriceRows:
    """What `model_prices` left of its last call, for the next one and for the net
    densities of its jobs (`net_densities`): the models of the market, every distinct
    row met since they were set (a job's size, then its value plus bonus on each model,
    -inf where it is not eligible), each keeping its position from call to call, and,
    per job of the last call, the JobInfo and bonus its row was made from, the row's
    position and whether the job's values name only the market's models. A job whose
    JobInfo object and bonus are the same in the next call keeps its row: a planning
    session's placer, carried from plan to plan with the compiled jobs
    (heuristics/greedy.py, solver/warm.py), keeps one, and between two of its plans a few
    dozen of 20,000 jobs change. The market of a call is the rows its jobs have, in
    `np.unique`'s order (`_market`)."""

    models: tuple[str, ...] = ()
    rows: list[tuple[float, ...]] = field(default_factory=list)
    #: a row -> its position in `rows`
    at: dict[tuple[float, ...], int] = field(default_factory=dict)
    jobs: dict[str, tuple[JobInfo, float, int, bool]] = field(default_factory=dict)
    #: `rows` as an array and its rows' positions in lexicographic order (`np.unique`'s);
    #: None: not made since a row was added
    table: np.ndarray | None = None
    order: np.ndarray | None = None

    def net_densities(self, prices: Mapping[str, float]) -> dict[str, float]:
        """Per job of the last call whose values name only the market's models, its best
        value plus bonus per GPU equivalent net of `prices` (per GPU of each model):
        `max_m (value_m + bonus) / size - price_m`, once per row (`Greedy.net_density`
        of a fixed-size job: numpy's float64 operations are Python's)."""
        net = self.row_densities(prices)
        return {name: net[k] for name, (_, _, k, within) in self.jobs.items() if within}

    def row_densities(self, prices: Mapping[str, float]) -> list[float]:
        """`net_densities` per row (by its position in `rows`; a job's row: `jobs`)."""
        if not self.rows:
            return []
        table = self._table()
        price = np.array([prices.get(m, 0.0) for m in self.models])
        return (table[:, 1:] / table[:, :1] - price[None, :]).max(axis=1).tolist()

    def reset(self, models: tuple[str, ...]) -> None:
        """Forget every row: the market's models are now `models`."""
        self.models, self.rows, self.at, self.jobs = models, [], {}, {}
        self.table = self.order = None

    def _table(self) -> np.ndarray:
        if self.table is None:
            self.table = np.array(self.rows, dtype=float).reshape(len(self.rows), -1)
            self.order = np.lexsort(self.table.T[::-1])
        return self.table

    def update(self, jobs: Sequence[JobInfo], bonus: Mapping[str, float]) -> list[int]:
        """Make `jobs` this call's (`jobs`): each with the same JobInfo and bonus as in
        the last call keeps its row, the others' rows are found or added. The row of
        each job, in order."""
        last = self.jobs
        at, rows, models = self.at, self.rows, self.models
        known = set(models)
        out: dict[str, tuple[JobInfo, float, int, bool]] = {}
        ids: list[int] = []
        for i in jobs:
            name = i.name
            b = bonus.get(name, 0.0)
            hit = last.get(name)
            if hit is None or hit[0] is not i or hit[1] != b:
                values = i.obj_values
                row = (i.size, *[values.get(m, -np.inf) + b for m in models])
                k = at.get(row)
                if k is None:
                    k = at[row] = len(rows)
                    rows.append(row)
                    self.table = None
                hit = (i, b, k, values.keys() <= known)
            out[name] = hit
            ids.append(hit[2])
        self.jobs = out
        if len(rows) > len(out) + ROWS_SLACK:
            return self._compact()
        return ids

    def _compact(self) -> list[int]:
        """Keep only the rows of this call's jobs (renumbered); their rows, in order."""
        old, self.rows, self.at = self.rows, [], {}
        self.table = self.order = None
        ids: list[int] = []
        for name, (i, b, k, within) in self.jobs.items():
            row = old[k]
            n = self.at.get(row)
            if n is None:
                n = self.at[row] = len(self.rows)
                self.rows.append(row)
            self.jobs[name] = (i, b, n, within)
            ids.append(n)
        return ids

    def market(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The distinct rows of the jobs whose rows are `ids`, in lexicographic order,
        and how many jobs have each: `np.unique(rows, axis=0, return_counts=True)`."""
        table = self._table()
        assert self.order is not None
        count = np.bincount(np.array(ids, dtype=np.int64), minlength=len(table))
        present = self.order[count[self.order] > 0]
        return table[present], count[present]


def model_prices(infos: Sequence[JobInfo], capacity: Mapping[str, float],
                 bonus: Mapping[str, float] | None = None,
                 memo: PriceRows | None = None) -> dict[str, float]:
    """The price per GPU of each model of `capacity` (free GPUs per model) that clears
    the pooled market of the whole-GPU and shared jobs of `infos` (module doc); `bonus`:
    an extra value of placing a job at all (a running job's saved preemption cost). A
    model with room for every job that wants it costs 0. `memo`: what the last call left
    (`PriceRows`), reused and brought to this call's jobs."""
    models = sorted(capacity)
    jobs = [i for i in infos if i.shape != "mig" and i.obj_values]
    extra = bonus or {}
    if memo is not None:
        if memo.models != tuple(models):
            memo.reset(tuple(models))
        if not models or not jobs:
            memo.jobs = {}
    if not models or not jobs:
        return dict.fromkeys(models, 0.0)
    if memo is None:
        kinds, count = _kinds(jobs, models, extra)
    else:
        kinds, count = memo.market(memo.update(jobs, extra))
    cap = np.array([float(capacity[m]) for m in models])
    price = _clear(kinds[:, 1:], kinds[:, 0], count, cap)
    return dict(zip(models, price.tolist(), strict=True))


def _kinds(jobs: Sequence[JobInfo], models: list[str], bonus: Mapping[str, float]
           ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of `jobs` (`PriceRows`) and how many jobs have each: jobs alike
    in size and values price alike, one row per kind with its count. The rows are made
    once per group of jobs sharing their objective values (one dict per compiled kind:
    models/instance.py), bonus and size, then `np.unique` orders and merges them (a pass
    over 13,000 jobs of L made every row per job)."""
    groups: dict[tuple[int, float, float], int] = {}
    heads: list[JobInfo] = []
    gains: list[float] = []
    counts: list[int] = []
    for i in jobs:
        b = bonus.get(i.name, 0.0)
        key = (id(i.obj_values), b, i.size)
        slot = groups.get(key)
        if slot is None:
            slot = groups[key] = len(heads)
            heads.append(i)
            gains.append(b)
            counts.append(0)
        counts[slot] += 1
    gain = np.array(gains)
    value = np.column_stack([
        np.array([i.obj_values.get(m, -np.inf) for i in heads]) for m in models]) + gain[:, None]
    size = np.array([i.size for i in heads])
    kinds, inverse = np.unique(np.column_stack([size, value]), axis=0, return_inverse=True)
    count = np.zeros(len(kinds), dtype=np.int64)
    np.add.at(count, inverse.reshape(-1), np.array(counts, dtype=np.int64))
    return kinds, count


def _clear(value: np.ndarray, size: np.ndarray, count: np.ndarray, cap: np.ndarray
           ) -> np.ndarray:
    """The clearing prices (module doc) for kinds of jobs x models `value` (-inf: not
    eligible), each kind's job `size` in GPUs and `count` of jobs, and model capacity
    `cap`."""
    n_models = value.shape[1]
    price = np.zeros(n_models)
    density = value / size[:, None]
    # per model, its column of densities (contiguous: each step reads columns)
    cols = [np.ascontiguousarray(density[:, j]) for j in range(n_models)]
    weight = size * count
    zero = np.zeros(len(size))
    for _ in range(ROUNDS):
        moved = 0.0
        for k in range(n_models):
            # each job's best net density elsewhere (0: staying out)
            other = zero
            for j in range(n_models):
                if j != k:
                    other = np.maximum(other, cols[j] - price[j])
            threshold = cols[k] - other   # wants k while its price is below this
            want = threshold > 0
            t, s = threshold[want], weight[want]
            new = 0.0
            if s.sum() > cap[k]:
                order = np.argsort(-t, kind="stable")
                used = np.cumsum(s[order])
                # the first job that no longer fits sets the price
                new = float(t[order][int(np.searchsorted(used, cap[k], side="right"))])
            moved = max(moved, abs(new - price[k]) / max(1.0, abs(new)))
            price[k] = new
        if moved <= _SETTLED:
            break
    return price
