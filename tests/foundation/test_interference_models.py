"""Contract 5.2 at the boundary and in the rules: colocation_class, interference pairs,
the factor of a job given its co-residents, the value of a shared job and the loss."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from models import BUILTIN_CATALOG, Placement, PlanRequest
from models.objective import evaluate
from models.rules import (
    class_census,
    colocation_factor,
    colocation_factor_cap,
    colocation_factors,
    interference_table,
    job_value,
    shared_value,
)


def request(jobs: list[dict[str, Any]], interference: list[Any] | None = None
            ) -> dict[str, Any]:
    body: dict[str, Any] = {
        "cluster": {"nodes": [{"name": "n", "gpus": [{"index": 0, "model": "A100-SXM4-40GB"},
                                                     {"index": 1, "model": "A100-SXM4-40GB"}]}]},
        "jobs": jobs}
    if interference is not None:
        body["interference"] = interference
    return body


def errors(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as info:
        PlanRequest.model_validate(data)
    return [(tuple(e["loc"]), e["type"]) for e in info.value.errors()]


@pytest.mark.parametrize("shape", [{"gpus": 1}, {"mig_profile": "1g.5gb"},
                                   {"mig": {"compute_slices": 1}}])
def test_class_on_a_non_shared_job_is_422(shape: dict[str, Any]) -> None:
    data = request([{"name": "ok", "gpu_share": 0.5, "colocation_class": "x"},
                    {"name": "bad", "colocation_class": "x", **shape}])
    assert errors(data) == [(("jobs", 1, "colocation_class"), "invalid_reference")]


@pytest.mark.parametrize("speed", [0, -0.5, 2.0000001, 3, math.inf, math.nan, "fast"])
def test_speed_out_of_range_or_not_finite_is_422(speed: Any) -> None:
    data = request([], [{"a": "x", "b": "y", "speed": 0.5},
                        {"a": "x", "b": "z", "speed": speed}])
    locs = [loc for loc, _ in errors(data)]
    assert locs == [("interference", 1, "speed")]


@pytest.mark.parametrize(("pair", "field"), [({"a": "", "b": "y", "speed": 1}, "a"),
                                             ({"a": "x", "speed": 1}, "b"),
                                             ({"a": "x", "b": "y"}, "speed"),
                                             ({"a": "x", "b": "y", "speed": 1, "c": 1}, "c")])
def test_malformed_pair_is_422(pair: dict[str, Any], field: str) -> None:
    assert [loc for loc, _ in errors(request([], [pair]))] == [("interference", 0, field)]


def test_duplicate_pair_is_422_but_reverse_pair_is_not() -> None:
    data = request([], [{"a": "x", "b": "y", "speed": 0.5}, {"a": "y", "b": "x", "speed": 0.9},
                        {"a": "x", "b": "y", "speed": 0.7}])
    assert errors(data) == [(("interference", 2), "invalid_reference")]


def test_unknown_class_names_are_legal_and_mean_one() -> None:
    req = PlanRequest.model_validate(request(
        [{"name": "a", "gpu_share": 0.5, "colocation_class": "nobody-pairs-me"},
         {"name": "b", "gpu_share": 0.5}],
        [{"a": "x", "b": "y", "speed": 2.0}]))
    pl = {"a": [Placement(node="n", gpu=0, fraction=0.5)],
          "b": [Placement(node="n", gpu=0, fraction=0.5)]}
    assert colocation_factors(req.jobs, pl, interference_table(req.interference)) == {
        "a": 1.0}


def test_without_interference_nothing_changes() -> None:
    req = PlanRequest.model_validate(request([{"name": "a", "gpu_share": 0.5}]))
    assert req.interference == []
    assert req.jobs[0].colocation_class is None


def test_factor_is_the_product_over_co_residents() -> None:
    table = {("a", "b"): 0.5, ("a", "a"): 0.8, ("b", "a"): 1.5}
    assert colocation_factor("a", ["b", "a", None, "c"], table) == pytest.approx(0.4)
    assert colocation_factor("b", ["a", "a"], table) == pytest.approx(2.25)
    assert colocation_factor("b", ["b"], table) == 1.0
    assert colocation_factor(None, ["a"], table) == 1.0
    assert colocation_factor("a", [], table) == 1.0


def _three_on_one_gpu() -> tuple[PlanRequest, dict[str, list[Placement]]]:
    req = PlanRequest.model_validate(request(
        [{"name": "a", "gpu_share": 0.25, "colocation_class": "A", "weight": 2},
         {"name": "b", "gpu_share": 0.25, "colocation_class": "B"},
         {"name": "c", "gpu_share": 0.25},
         {"name": "d", "gpu_share": 0.25, "colocation_class": "A"}],
        [{"a": "A", "b": "B", "speed": 0.5}, {"a": "B", "b": "A", "speed": 1.2},
         {"a": "A", "b": "A", "speed": 0.9}]))
    pl = {n: [Placement(node="n", gpu=0, fraction=0.25)] for n in "abc"}
    pl["d"] = [Placement(node="n", gpu=1, fraction=0.25)]
    return req, pl


def test_factors_and_values_of_a_plan_by_hand() -> None:
    req, pl = _three_on_one_gpu()
    f = colocation_factors(req.jobs, pl, interference_table(req.interference))
    # a beside b (0.5) and c (no class); b beside a (1.2); d alone.
    assert f == {"a": pytest.approx(0.5), "b": pytest.approx(1.2)}
    a = req.jobs[0]
    speed = BUILTIN_CATALOG["A100-SXM4-40GB"].relative_speed
    assert shared_value(a, "A100-SXM4-40GB", BUILTIN_CATALOG, 0.5) == pytest.approx(
        2 * 0.25 * speed * 0.5)
    ev = evaluate(req, pl)
    base = {j.name: job_value(j, "A100-SXM4-40GB", BUILTIN_CATALOG) for j in req.jobs}
    assert ev.objective_value == pytest.approx(base["a"] * 0.5 + base["b"] * 1.2 + base["c"]
                                               + base["d"])
    # Loss per job, clipped at 0: only a loses; b's gain offsets nothing.
    assert ev.interference_loss == pytest.approx(base["a"] * 0.5)


def test_factor_cap_bounds_every_factor() -> None:
    req, _ = _three_on_one_gpu()
    table = interference_table(req.interference)
    b = req.jobs[1]
    census = class_census(req.jobs)
    assert census == {"A": (2, 0.25), "B": (1, 0.25)}
    # Two A jobs speed b up by 1.2 each; three shares of 0.25 fit beside it, two exist.
    assert colocation_factor_cap(b, census, table) == pytest.approx(1.44)
    assert colocation_factor_cap(req.jobs[0], census, table) == 1.0
    assert colocation_factor_cap(req.jobs[2], census, table) == 1.0
    # Room, not count, binds: beside a 0.8 share no quarter fits, beside 0.6 one does.
    big = req.jobs[1].model_copy(update={"gpu_share": 0.8})
    assert colocation_factor_cap(big, census, table) == 1.0
    assert colocation_factor_cap(big.model_copy(update={"gpu_share": 0.6}), census,
                                 table) == pytest.approx(1.2)
