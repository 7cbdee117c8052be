"""The guarantees served to the last fraction of a GPU (solver/level_fit.py): a parent
whose limit is its children's guarantees, one child above its guarantee by a share and
the other below it by one; the fit swaps the shares, serves every guarantee and gives the
brute-forced lexicographic optimum."""

from __future__ import annotations

import pytest

from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.objective import level_values
from solver.level_fit import fit_guarantees
from tests.solver.brute import _plans, _within_limits, levels_key

V100 = "V100-32GB"


def _request() -> PlanRequest:
    """Parent p (guaranteed and limited to 2 GPUs) over a and b (1 each); a's shares
    0.5, 0.5, 0.25, b's 0.5, 0.25, 0.25; three GPUs."""
    shares = {"a1": ("a", 0.5), "a2": ("a", 0.5), "a3": ("a", 0.25),
              "b1": ("b", 0.5), "b2": ("b", 0.25), "b3": ("b", 0.25)}
    jobs = [{"name": n, "tenant": t, "gpu_share": f, "throughput": {V100: 1.0}}
            for n, (t, f) in shares.items()]
    quotas = {"p": {"guaranteed": {"*": 2}, "limit": {"*": 2}},
              "a": {"guaranteed": {"*": 1}, "parent": "p"},
              "b": {"guaranteed": {"*": 1}, "parent": "p"}}
    return PlanRequest.model_validate({
        "cluster": {"nodes": [{"name": "n0", "gpus": [{"index": i, "model": V100}
                                                      for i in range(3)]}],
                    "quotas": quotas},
        "jobs": jobs, "policy": {"objective": "throughput"}})


def test_the_fit_serves_every_guarantee_and_reaches_the_lexicographic_optimum() -> None:
    req = _request()
    fractions = {"a1": 0.5, "a2": 0.5, "a3": 0.25, "b1": 0.5, "b2": 0.25}

    def at(name: str, gpu: int) -> list[Placement]:
        return [Placement(node="n0", gpu=gpu, fraction=fractions[name])]

    # a uses 1.25, b 0.75: p is at its limit, so b's third share cannot be added alone
    start = {"a1": at("a1", 0), "a2": at("a2", 0), "a3": at("a3", 1), "b1": at("b1", 1),
             "b2": at("b2", 1)}
    assert level_values(req, start)[0] == ("quota", pytest.approx(3.75))
    out = fit_guarantees(req, HeuristicResult(start, {}))
    got = level_values(req, out.placements)
    assert got[0] == ("quota", pytest.approx(4.0))
    assert "a3" not in out.placements and "b3" in out.placements
    feasible = [c for c in _plans(req) if _within_limits(req, c)]
    best = level_values(req, max(feasible, key=lambda c: levels_key(req, c)))
    assert [v for _, v in got] == pytest.approx([v for _, v in best])


def test_a_plan_serving_every_guarantee_is_returned_as_it_is() -> None:
    req = _request()
    start = {"a1": [Placement(node="n0", gpu=0, fraction=0.5)],
             "a2": [Placement(node="n0", gpu=0, fraction=0.5)],
             "b1": [Placement(node="n0", gpu=1, fraction=0.5)],
             "b2": [Placement(node="n0", gpu=1, fraction=0.25)],
             "b3": [Placement(node="n0", gpu=1, fraction=0.25)]}
    result = HeuristicResult(start, {})
    assert fit_guarantees(req, result) is result
