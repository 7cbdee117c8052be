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


@dataclass
class PriceRows:
    """What `model_prices` left of its last call, for the next one and for the net
    densities of its jobs (`net_densities`): the models of the market, the distinct rows
    (a job's size, then its value plus bonus on each model, -inf where it is not
    eligible; `np.unique`'s order) and, per job, the JobInfo and bonus its row was made
    from, the row's position and whether the job's values name only the market's models.
    A job whose JobInfo object and bonus are the same in the next call keeps its row: a
    planning session's placer, carried from plan to plan with the compiled jobs
    (heuristics/greedy.py, solver/warm.py), keeps one, and between two of its plans a few
    dozen of 20,000 jobs change."""

    models: tuple[str, ...] = ()
    kinds: np.ndarray | None = None
    jobs: dict[str, tuple[JobInfo, float, int, bool]] = field(default_factory=dict)

    def net_densities(self, prices: Mapping[str, float]) -> dict[str, float]:
        """Per job of the last call whose values name only the market's models, its best
        value plus bonus per GPU equivalent net of `prices` (per GPU of each model):
        `max_m (value_m + bonus) / size - price_m`, once per row (`Greedy.net_density`
        of a fixed-size job: numpy's float64 operations are Python's)."""
        net = self.row_densities(prices)
        return {name: net[k] for name, (_, _, k, within) in self.jobs.items() if within}

    def row_densities(self, prices: Mapping[str, float]) -> list[float]:
        """`net_densities` per row of the last call (a job's row: `jobs`)."""
        if self.kinds is None or not len(self.kinds):
            return []
        price = np.array([prices.get(m, 0.0) for m in self.models])
        return (self.kinds[:, 1:] / self.kinds[:, :1] - price[None, :]).max(axis=1).tolist()


def model_prices(infos: Sequence[JobInfo], capacity: Mapping[str, float],
                 bonus: Mapping[str, float] | None = None,
                 memo: PriceRows | None = None) -> dict[str, float]:
    """The price per GPU of each model of `capacity` (free GPUs per model) that clears
    the pooled market of the whole-GPU and shared jobs of `infos` (module doc); `bonus`:
    an extra value of placing a job at all (a running job's saved preemption cost). A
    model with room for every job that wants it costs 0. `memo`: what the last call left
    (`PriceRows`), reused and replaced by this call's."""
    models = sorted(capacity)
    jobs = [i for i in infos if i.shape != "mig" and i.obj_values]
    extra = bonus or {}
    if memo is not None and jobs and models and memo.kinds is not None \
            and memo.models == tuple(models):
        kinds, count, memo.jobs = _kinds_again(jobs, models, extra, memo)
        memo.kinds = kinds
    elif memo is not None:
        memo.models, memo.kinds, memo.jobs = tuple(models), None, {}
    if not models or not jobs:
        return dict.fromkeys(models, 0.0)
    if memo is None or memo.kinds is None:
        kinds, count, entries = _kinds(jobs, models, extra)
    if memo is not None and memo.kinds is None:
        memo.kinds = kinds
        memo.jobs = {e[0].name: e for e in entries}
    cap = np.array([float(capacity[m]) for m in models])
    price = _clear(kinds[:, 1:], kinds[:, 0], count, cap)
    return dict(zip(models, price.tolist(), strict=True))


def _kinds(jobs: Sequence[JobInfo], models: list[str], bonus: Mapping[str, float]
           ) -> tuple[np.ndarray, np.ndarray, list[tuple[JobInfo, float, int, bool]]]:
    """The distinct rows of `jobs` (`PriceRows`), how many jobs have each and per job its
    `PriceRows.jobs` entry (JobInfo, bonus, row, whether its values name only `models`):
    jobs alike in size and values price alike, one row per kind with its count. The rows
    are made once per group of jobs sharing their objective values (one dict per compiled
    kind: models/instance.py), bonus and size, then `np.unique` orders and merges them (a pass
    over 13,000 jobs of L made every row per job)."""
    known = set(models)
    groups: dict[tuple[int, float, float], int] = {}
    heads: list[JobInfo] = []
    gains: list[float] = []
    counts: list[int] = []
    inside: list[bool] = []
    slot_of: list[int] = []
    for i in jobs:
        b = bonus.get(i.name, 0.0)
        key = (id(i.obj_values), b, i.size)
        slot = groups.get(key)
        if slot is None:
            slot = groups[key] = len(heads)
            heads.append(i)
            gains.append(b)
            counts.append(0)
            inside.append(i.obj_values.keys() <= known)
        counts[slot] += 1
        slot_of.append(slot)
    gain = np.array(gains)
    value = np.column_stack([
        np.array([i.obj_values.get(m, -np.inf) for i in heads]) for m in models]) + gain[:, None]
    size = np.array([i.size for i in heads])
    kinds, inverse = np.unique(np.column_stack([size, value]), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    count = np.zeros(len(kinds), dtype=np.int64)
    np.add.at(count, inverse, np.array(counts, dtype=np.int64))
    back = inverse.tolist()
    return kinds, count, [(i, gains[slot], back[slot], inside[slot])
                          for i, slot in zip(jobs, slot_of, strict=True)]


def _kinds_again(jobs: Sequence[JobInfo], models: list[str], bonus: Mapping[str, float],
                 memo: PriceRows
                 ) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[JobInfo, float, int, bool]]]:
    """`_kinds` with `memo.jobs` as they become: each job with the same JobInfo and bonus
    as in `memo`'s call takes its row from there, the others' rows are made anew;
    `np.unique` then orders the rows and merges equal ones as `_kinds` does."""
    assert memo.kinds is not None
    last = memo.jobs
    known = set(models)
    slots: dict[object, int] = {}     # an old row's position, or a new row -> its slot
    rows: list[np.ndarray | tuple[float, ...]] = []
    counts: list[int] = []
    found: list[tuple[str, JobInfo, float, int, bool]] = []
    for i in jobs:
        b = bonus.get(i.name, 0.0)
        hit = last.get(i.name)
        key: object
        if hit is not None and hit[0] is i and hit[1] == b:
            key, within = hit[2], hit[3]
        else:
            values = i.obj_values
            key = (i.size, *[values.get(m, -np.inf) + b for m in models])
            within = values.keys() <= known
        slot = slots.get(key)
        if slot is None:
            slot = slots[key] = len(rows)
            rows.append(memo.kinds[key] if isinstance(key, int) else key)
            counts.append(0)
        counts[slot] += 1
        found.append((i.name, i, b, slot, within))
    kinds, inverse = np.unique(np.array(rows, dtype=float).reshape(len(rows), -1), axis=0,
                               return_inverse=True)
    inverse = inverse.reshape(-1)
    count = np.zeros(len(kinds), dtype=np.int64)
    np.add.at(count, inverse, np.array(counts, dtype=np.int64))
    back = inverse.tolist()
    return kinds, count, {name: (i, b, back[slot], within)
                          for name, i, b, slot, within in found}


def _clear(value: np.ndarray, size: np.ndarray, count: np.ndarray, cap: np.ndarray
           ) -> np.ndarray:
    """The clearing prices (module doc) for kinds of jobs x models `value` (-inf: not
    eligible), each kind's job `size` in GPUs and `count` of jobs, and model capacity
    `cap`."""
    n_models = value.shape[1]
    price = np.zeros(n_models)
    density = value / size[:, None]
    for _ in range(ROUNDS):
        moved = 0.0
        for k in range(n_models):
            # each job's best net density elsewhere (0: staying out)
            net = density - price[None, :]
            net[:, k] = -np.inf
            other = np.maximum(net.max(axis=1), 0.0)
            threshold = density[:, k] - other   # wants k while its price is below this
            want = threshold > 0
            t, s = threshold[want], (size * count)[want]
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
