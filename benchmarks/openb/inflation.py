"""Workload inflation and arrival order, as the FGD paper's simulator defines them.

Append copies drawn uniformly with replacement from the original pods until the next copy
would push the total GPU request past `ratio x capacity`; then order all pods by name and
shuffle them with the same generator (numpy PCG64 seeded with `seed`: our own generator,
so per-seed orders differ from the paper's Go `math/rand`; compare means over seeds).
Copies are named `<original>-tuned-<i>` like the paper's.
"""

from __future__ import annotations

import numpy as np

from benchmarks.openb.loader import OpenbPods


def inflate(pods: OpenbPods, capacity_milli: int, ratio: float, seed: int) -> OpenbPods:
    """The inflated, shuffled arrival sequence of `pods` for `seed`.

    Stops at the first drawn copy whose GPU request would exceed `ratio * capacity_milli`
    (CPU-only copies never exceed it). With `ratio` <= the original request ratio the
    originals are returned shuffled, nothing appended.
    """
    rng = np.random.default_rng(seed)
    limit = ratio * capacity_milli
    total = int(pods.total_gpu_milli.sum())
    req = pods.total_gpu_milli
    picks: list[int] = []
    if total < limit:
        while True:
            i = int(rng.integers(len(pods)))
            if total + int(req[i]) > limit:
                break
            total += int(req[i])
            picks.append(i)
    index = np.concatenate([np.arange(len(pods)), np.asarray(picks, dtype=np.int64)])
    names = pods.names + [f"{pods.names[i]}-tuned-{k}" for k, i in enumerate(picks)]
    allp = pods.take(index).renamed(names)
    order = np.array(sorted(range(len(names)), key=names.__getitem__), dtype=np.int64)
    order = order[rng.permutation(len(order))]
    return allp.take(order).renamed([names[i] for i in order])
