"""The rows a `PriceRows` keeps from call to call (heuristics/prices.py): the market of
each call is `np.unique` of its jobs' rows with their counts, whether the rows were
kept, added or renumbered when too many piled up, so the prices and net densities are
those made afresh."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

import heuristics.prices as prices
from benchmarks.generator import generate_custom
from heuristics.greedy import Greedy
from heuristics.prices import PriceRows, model_prices


@pytest.mark.parametrize("slack", [-10**6, 0, prices.ROWS_SLACK])
def test_kept_rows_give_the_market_made_afresh(slack: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prices, "ROWS_SLACK", slack)
    req = generate_custom(64, 300, seed=5)
    g = Greedy(req)
    g.keep_running()
    pending = [i for i in g.infos if i.name not in g.state.placed]
    rng = random.Random(5)
    memo = PriceRows()
    for _ in range(6):
        pending = [copy.copy(i) if rng.random() < 0.1 else i for i in pending
                   if rng.random() > 0.05]
        at = rng.randrange(len(pending))
        pending[at] = copy.copy(pending[at])
        pending[at].obj_values = {m: v * 3 for m, v in pending[at].obj_values.items()}
        bonus = {i.name: rng.choice([0.5, 1.0]) for i in pending if rng.random() < 0.2}
        got = model_prices(pending, g.state.model_free, bonus, memo)
        assert got == model_prices(pending, g.state.model_free, bonus)
        jobs = [i for i in pending if i.shape != "mig" and i.obj_values]
        kinds, count = prices._kinds(jobs, sorted(g.state.model_free), bonus)
        want = memo.market([k for _, _, k, _ in memo.jobs.values()])
        assert np.array_equal(kinds, want[0]) and np.array_equal(count, want[1])
        assert len(memo.rows) <= len(memo.jobs) + max(slack, 0)
        if slack < 0:   # renumbered at each call: only the rows of its jobs are left
            assert len(memo.rows) == len(kinds)
        g.bonus = bonus
        g.use_prices(got)
        net = memo.net_densities(got)
        for i in jobs:
            if i.name in net and not i.size_values:
                assert net[i.name] == g.net_density(i)


def test_new_models_forget_the_rows() -> None:
    req = generate_custom(64, 120, seed=1)
    g = Greedy(req)
    pending = [i for i in g.infos if not i.current]
    memo = PriceRows()
    model_prices(pending, g.state.model_free, None, memo)
    fewer = dict(list(g.state.model_free.items())[1:])
    assert model_prices(pending, fewer, None, memo) == model_prices(pending, fewer)
    assert memo.models == tuple(sorted(fewer))
