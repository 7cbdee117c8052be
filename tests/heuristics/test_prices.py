"""Model prices (heuristics/prices.py) and the priced greedy pass (heuristics/greedy.py)."""

from __future__ import annotations

import copy
import random

from benchmarks.generator import generate_custom
from heuristics.greedy import Greedy, place_pending, plan_greedy
from heuristics.prices import PriceRows, model_prices
from models.objective import evaluate
from tests.heuristics.helpers import node, request, violations

V100, H100 = "V100-32GB", "H100-SXM5-80GB"


def test_prices_send_each_job_where_its_advantage_is() -> None:
    """Two H100s, two V100s and four jobs: two that triple on the H100 and two heavy
    ones that barely gain there. By value alone the heavy jobs take the H100s
    (2 x 4.4 + 2 x 1.0 = 10.8); net of the prices they go to the V100s and the fast
    jobs to the H100s (2 x 3.0 + 2 x 4.0 = 14.0, the optimum)."""
    jobs = [{"name": f"heavy{k}", "gpus": 1, "weight": 4,
             "throughput": {H100: 1.1, V100: 1.0}} for k in range(2)]
    jobs += [{"name": f"fast{k}", "gpus": 1, "weight": 1,
              "throughput": {H100: 3.0, V100: 1.0}} for k in range(2)]
    req = request([node("h", H100, 2), node("v", V100, 2)], jobs)
    g = Greedy(req)
    prices = model_prices(g.infos, g.state.model_free)
    # the H100 is dearer by more than the heavy jobs gain there, less than the fast ones
    assert 0.4 < prices[H100] - prices[V100] < 2.0
    g.use_prices(prices)
    assert all(g.ranked_models(g.by_name[f"heavy{k}"])[0] == V100 for k in range(2))
    assert all(g.ranked_models(g.by_name[f"fast{k}"])[0] == H100 for k in range(2))
    result = plan_greedy(req)
    assert violations(req, result) == []
    assert abs(evaluate(req, result.placements).objective_value - 14.0) < 1e-9


def test_a_model_with_room_for_everyone_costs_nothing() -> None:
    req = request([node("h", H100, 4), node("v", V100, 4)],
                  [{"name": f"j{k}", "gpus": 1} for k in range(3)])
    g = Greedy(req)
    assert model_prices(g.infos, g.state.model_free) == {H100: 0.0, V100: 0.0}


def test_a_gang_is_not_shut_out_by_a_job_that_gains_little_there() -> None:
    """Two H100s, four V100s. `a` and `b` (2 GPUs) earn 6.0 on the H100s and 0.8 on the
    V100s; `big` (4 GPUs, V100 only) earns 4.0. By value density alone `a` takes the
    H100s and `b` two V100s, which shuts `big` out (6.8); priced, `big` goes before `b`
    and the plan reaches the optimum 6.0 + 4.0 = 10.0."""
    jobs: list[dict[str, object]] = [
        {"name": n, "gpus": 2, "throughput": {H100: 3.0, V100: 0.4}} for n in ("a", "b")]
    jobs.append({"name": "big", "gpus": 4, "allowed_models": [V100],
                 "throughput": {V100: 1.0, H100: 1.0}})
    req = request([node("h", H100, 2), node("v", V100, 4)], jobs)
    g = Greedy(req)
    plain = place_pending(g, g.keep_running(preemptible=False), order=None, seed=None,
                          deadline=None, keep_all=False, priced=False)
    assert abs(evaluate(req, plain.placements).objective_value - 6.8) < 1e-9
    for seed in (None, 3):
        result = plan_greedy(req, seed=seed)
        assert violations(req, result) == []
        assert abs(evaluate(req, result.placements).objective_value - 10.0) < 1e-9


def test_rows_kept_between_calls_give_the_prices_and_densities_made_afresh() -> None:
    """A `PriceRows` carried from call to call (a session's placer) reuses the rows of
    the jobs whose JobInfo and bonus stayed: over calls that drop jobs, give others a new
    JobInfo (an equal copy, or a new value) and change bonuses, the prices equal those
    made without it, and its net densities equal `Greedy.net_density` for every job it
    gives one to (most of them: the jobs whose values name only the priced models)."""
    req = generate_custom(64, 300, seed=3)
    g = Greedy(req)
    g.keep_running()
    pending = [i for i in g.infos if i.name not in g.state.placed]
    rng = random.Random(3)
    memo = PriceRows()
    for _ in range(4):
        pending = [copy.copy(i) if rng.random() < 0.1 else i for i in pending
                   if rng.random() > 0.05]
        at = rng.randrange(len(pending))  # a JobInfo is never changed: a new one comes
        pending[at] = copy.copy(pending[at])
        pending[at].obj_values = {m: v * 2 for m, v in pending[at].obj_values.items()}
        g.bonus = {i.name: rng.choice([0.5, 1.0]) for i in pending if rng.random() < 0.2}
        prices = model_prices(pending, g.state.model_free, g.bonus, memo)
        assert prices == model_prices(pending, g.state.model_free, g.bonus)
        assert any(prices.values())
        g.use_prices(prices)
        net = memo.net_densities(prices)
        assert len(net) > len(pending) / 2
        for i in pending:
            if i.name in net and not i.size_values:
                assert net[i.name] == g.net_density(i)
