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


def model_prices(infos: Sequence[JobInfo], capacity: Mapping[str, float],
                 bonus: Mapping[str, float] | None = None) -> dict[str, float]:
    """The price per GPU of each model of `capacity` (free GPUs per model) that clears
    the pooled market of the whole-GPU and shared jobs of `infos` (module doc); `bonus`:
    an extra value of placing a job at all (a running job's saved preemption cost). A
    model with room for every job that wants it costs 0."""
    models = sorted(capacity)
    jobs = [i for i in infos if i.shape != "mig" and i.obj_values]
    if not models or not jobs:
        return dict.fromkeys(models, 0.0)
    extra = bonus or {}
    gain = np.array([extra.get(i.name, 0.0) for i in jobs])
    value = np.column_stack([
        np.array([i.obj_values.get(m, -np.inf) for i in jobs]) for m in models]) + gain[:, None]
    size = np.array([i.size for i in jobs])
    # jobs alike in size and values price alike: one row per kind, its size times its count
    kinds, count = np.unique(np.column_stack([size, value]), axis=0, return_counts=True)
    cap = np.array([float(capacity[m]) for m in models])
    price = _clear(kinds[:, 1:], kinds[:, 0], count, cap)
    return dict(zip(models, price.tolist(), strict=True))


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
