"""Boundary rules of models/request.py: each rejection carries the right field path."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from models import BUILTIN_CATALOG, Job, PlanRequest, Policy
from tests.foundation.helpers import EXAMPLES, load_json


def gpu(index: int = 0, model: str = "A100-SXM4-40GB", **kw: Any) -> dict[str, Any]:
    return {"index": index, "model": model, **kw}


def node(name: str = "n", gpus: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    return {"name": name, "gpus": [gpu()] if gpus is None else gpus, **kw}


def request(nodes: list[dict[str, Any]] | None = None, jobs: list[dict[str, Any]] | None = None,
            **cluster: Any) -> dict[str, Any]:
    return {"cluster": {"nodes": [node()] if nodes is None else nodes, **cluster},
            "jobs": jobs or []}


def errors(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """(loc, type) of every error raised when validating `data` as a PlanRequest."""
    with pytest.raises(ValidationError) as info:
        PlanRequest.model_validate(data)
    return [(tuple(e["loc"]), e["type"]) for e in info.value.errors()]


def mig_gpu(instances: list[tuple[str, int]], model: str = "A100-SXM4-40GB") -> dict[str, Any]:
    return gpu(model=model, mig_enabled=True,
               mig_instances=[{"profile": p, "start": s} for p, s in instances])


@pytest.mark.parametrize("name", ["small-mixed", "mig-puzzle", "elastic-gangs"])
def test_example_requests_are_valid(name: str) -> None:
    req = PlanRequest.model_validate(load_json(EXAMPLES / f"{name}.request.json"))
    assert req.jobs and req.cluster.nodes


def test_defaults() -> None:
    req = PlanRequest.model_validate(request(jobs=[{"name": "j", "gpus": 2}]))
    job = req.jobs[0]
    assert (job.kind, job.tenant, job.weight, job.preemptible) == ("training", "default", 1.0,
                                                                   True)
    assert job.single_node and not job.same_domain and job.shape == "whole"
    assert req.policy == Policy()
    assert req.policy.objective == "throughput" and req.policy.time_limit_s == 10.0
    assert req.policy.migration_cost == 0.5 and req.policy.preemption_cost == 1.0
    assert req.cluster.nodes[0].schedulable and req.cluster.nodes[0].gpus[0].healthy


@pytest.mark.parametrize(
    ("data", "loc"),
    [
        ({**request(), "extra": 1}, ("extra",)),
        (request(nodes=[node(rack="r1")]), ("cluster", "nodes", 0, "rack")),
        (request(nodes=[node(gpus=[gpu(speed=2)])]), ("cluster", "nodes", 0, "gpus", 0, "speed")),
        (request(jobs=[{"name": "j", "gpus": 1, "gpu": 1}]), ("jobs", 0, "gpu")),
        ({**request(), "policy": {"objectiv": "x"}}, ("policy", "objectiv")),
        (request(jobs=[{"name": "j", "mig": {"compute_slices": 1, "gb": 5}}]),
         ("jobs", 0, "mig", "gb")),
        (request(gpu_models={"X": {"memory_gib": 1, "tflops": 3}}),
         ("cluster", "gpu_models", "X", "tflops")),
    ],
)
def test_unknown_fields_are_rejected(data: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    assert errors(data) == [(loc, "extra_forbidden")]


def test_duplicate_node_names() -> None:
    data = request(nodes=[node("a"), node("b"), node("a")])
    assert errors(data) == [(("cluster", "nodes", 2, "name"), "invalid_reference")]


def test_duplicate_gpu_indices() -> None:
    data = request(nodes=[node(gpus=[gpu(0), gpu(1), gpu(1)])])
    assert errors(data) == [(("cluster", "nodes", 0, "gpus"), "value_error")]


def test_same_gpu_index_on_two_nodes_is_fine() -> None:
    req = PlanRequest.model_validate(request(nodes=[node("a"), node("b")]))
    assert [g.index for n in req.cluster.nodes for g in n.gpus] == [0, 0]


def test_duplicate_job_names() -> None:
    data = request(jobs=[{"name": "j", "gpus": 1}, {"name": "k", "gpus": 1},
                         {"name": "j", "gpu_share": 0.5}])
    assert errors(data) == [(("jobs", 2, "name"), "invalid_reference")]


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"gpus": 1, "gpu_share": 0.5},
        {"gpus": 1, "mig_profile": "1g.5gb"},
        {"mig": {"compute_slices": 1}, "mig_profile": "1g.5gb"},
        {"mig": {"compute_slices": 1}, "gpu_share": 0.2},
    ],
)
def test_exactly_one_demand_shape(shape: dict[str, Any]) -> None:
    assert errors(request(jobs=[{"name": "j", **shape}])) == [(("jobs", 0), "demand_shape")]


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ({"gpus": 3}, "whole"),
        ({"gpu_share": 0.3}, "share"),
        ({"mig": {"compute_slices": 2, "memory_gib": 10}}, "mig"),
        ({"mig_profile": "3g.20gb"}, "mig"),
    ],
)
def test_each_demand_shape_alone_is_valid(shape: dict[str, Any], expected: str) -> None:
    req = PlanRequest.model_validate(request(jobs=[{"name": "j", **shape}]))
    assert req.jobs[0].shape == expected


@pytest.mark.parametrize(
    ("job", "loc", "kind"),
    [
        ({"weight": -1.0}, ("jobs", 0, "weight"), "greater_than"),
        ({"weight": 0.0}, ("jobs", 0, "weight"), "greater_than"),
        ({"weight": math.inf}, ("jobs", 0, "weight"), "finite_number"),
        ({"gpu_memory_gib": math.nan}, ("jobs", 0, "gpu_memory_gib"), "finite_number"),
        ({"gpu_memory_gib": -2.0}, ("jobs", 0, "gpu_memory_gib"), "greater_than_equal"),
        ({"cpu_millicores": -1.0}, ("jobs", 0, "cpu_millicores"), "greater_than_equal"),
        ({"host_memory_gib": math.inf}, ("jobs", 0, "host_memory_gib"), "finite_number"),
        ({"remaining_work": -5.0}, ("jobs", 0, "remaining_work"), "greater_than_equal"),
        ({"submitted_at": math.nan}, ("jobs", 0, "submitted_at"), "finite_number"),
        ({"throughput": {"T4-16GB": -0.5}}, ("jobs", 0, "throughput", "T4-16GB"),
         "greater_than_equal"),
        ({"throughput": {"T4-16GB": math.inf}}, ("jobs", 0, "throughput", "T4-16GB"),
         "finite_number"),
    ],
)
def test_bad_job_numbers(job: dict[str, Any], loc: tuple[str | int, ...], kind: str) -> None:
    assert errors(request(jobs=[{"name": "j", "gpus": 1, **job}])) == [(loc, kind)]


@pytest.mark.parametrize(
    ("job", "loc"),
    [
        ({"gpus": 0}, ("jobs", 0, "gpus")),
        ({"gpus": -1}, ("jobs", 0, "gpus")),
        ({"gpu_share": 1.0}, ("jobs", 0, "gpu_share")),
        ({"gpu_share": 0.0}, ("jobs", 0, "gpu_share")),
        ({"gpu_share": math.nan}, ("jobs", 0, "gpu_share")),
        ({"mig": {"compute_slices": 0}}, ("jobs", 0, "mig", "compute_slices")),
        ({"mig": {"compute_slices": 1, "memory_gib": -1}}, ("jobs", 0, "mig", "memory_gib")),
    ],
)
def test_bad_demand_numbers(job: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    assert [e[0] for e in errors(request(jobs=[{"name": "j", **job}]))] == [loc]


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("cpu_millicores", -1.0, "greater_than_equal"),
        ("cpu_millicores", math.inf, "finite_number"),
        ("memory_gib", math.nan, "finite_number"),
    ],
)
def test_bad_node_numbers(field: str, value: float, kind: str) -> None:
    assert errors(request(nodes=[node(**{field: value})])) == [
        (("cluster", "nodes", 0, field), kind)
    ]


@pytest.mark.parametrize(
    ("policy", "loc"),
    [
        ({"time_limit_s": 0}, ("policy", "time_limit_s")),
        ({"time_limit_s": math.inf}, ("policy", "time_limit_s")),
        ({"migration_cost": -0.1}, ("policy", "migration_cost")),
        ({"preemption_cost": math.nan}, ("policy", "preemption_cost")),
        ({"mip_gap": -1}, ("policy", "mip_gap")),
        ({"objective": "latency"}, ("policy", "objective")),
        ({"solver": "gurobi"}, ("policy", "solver")),
        ({"threads": 0}, ("policy", "threads")),
    ],
)
def test_bad_policy(policy: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    assert [e[0] for e in errors({**request(), "policy": policy})] == [loc]


def test_mig_instances_on_non_mig_gpu() -> None:
    data = request(nodes=[node(gpus=[gpu(mig_instances=[{"profile": "1g.5gb", "start": 0}])])])
    assert errors(data) == [(("cluster", "nodes", 0, "gpus", 0), "mig_on_non_mig_gpu")]


def test_mig_mode_on_model_without_mig() -> None:
    data = request(nodes=[node(gpus=[gpu(model="T4-16GB", mig_enabled=True)])])
    assert errors(data) == [(("cluster", "nodes", 0, "gpus", 0, "mig_enabled"),
                             "invalid_reference")]


@pytest.mark.parametrize(
    "layout",
    [
        [("4g.20gb", 0), ("3g.20gb", 0)],  # overlap
        [("1g.5gb", 7)],  # not a listed start
        [("9g.50gb", 0)],  # unknown profile
        [("1g.5gb+me", 0), ("1g.5gb+me", 1)],  # two +me
        [("3g.20gb", 0), ("3g.20gb", 4), ("1g.5gb", 0)],  # overlap again
    ],
)
def test_invalid_current_mig_layout(layout: list[tuple[str, int]]) -> None:
    data = request(nodes=[node(gpus=[mig_gpu(layout)])])
    assert errors(data) == [(("cluster", "nodes", 0, "gpus", 0, "mig_instances"),
                             "invalid_reference")]


def test_valid_current_mig_layout() -> None:
    layout = [("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]
    req = PlanRequest.model_validate(request(nodes=[node(gpus=[mig_gpu(layout)])]))
    assert [(m.profile, m.start) for m in req.cluster.nodes[0].gpus[0].mig_instances] == layout


def test_mig_start_out_of_range_is_a_field_error() -> None:
    data = request(nodes=[node(gpus=[mig_gpu([("1g.5gb", 9)])])])
    assert errors(data)[0][0] == ("cluster", "nodes", 0, "gpus", 0, "mig_instances", 0, "start")


@pytest.mark.parametrize(
    ("current", "loc"),
    [
        ([{"node": "nowhere", "gpu": 0}], ("jobs", 0, "current", 0)),
        ([{"node": "n", "gpu": 0}, {"node": "n", "gpu": 5}], ("jobs", 0, "current", 1)),
    ],
)
def test_current_naming_missing_node_or_gpu(current: list[dict[str, Any]],
                                            loc: tuple[str | int, ...]) -> None:
    data = request(nodes=[node(gpus=[gpu(0), gpu(1)])],
                   jobs=[{"name": "j", "gpus": len(current), "current": current}])
    assert errors(data) == [(loc, "invalid_reference")]


def test_current_mig_instance_must_exist_in_layout() -> None:
    data = request(nodes=[node(gpus=[mig_gpu([("3g.20gb", 0)])])],
                   jobs=[{"name": "j", "mig_profile": "3g.20gb",
                          "current": [{"node": "n", "gpu": 0,
                                       "mig": {"profile": "3g.20gb", "start": 4}}]}])
    assert errors(data) == [(("jobs", 0, "current", 0, "mig"), "invalid_reference")]


def test_current_mig_placement_on_non_mig_gpu() -> None:
    data = request(jobs=[{"name": "j", "mig_profile": "1g.5gb",
                          "current": [{"node": "n", "gpu": 0,
                                       "mig": {"profile": "1g.5gb", "start": 0}}]}])
    assert errors(data) == [(("jobs", 0, "current", 0, "mig"), "invalid_reference")]


def test_current_whole_placement_on_mig_gpu() -> None:
    data = request(nodes=[node(gpus=[mig_gpu([])])],
                   jobs=[{"name": "j", "gpus": 1, "current": [{"node": "n", "gpu": 0}]}])
    assert errors(data) == [(("jobs", 0, "current", 0), "invalid_reference")]


@pytest.mark.parametrize(
    "job",
    [
        {"gpus": 2, "current": [{"node": "n", "gpu": 0}]},  # wrong count
        {"gpus": 2, "current": [{"node": "n", "gpu": 0}, {"node": "n", "gpu": 0}]},  # twice
        {"gpu_share": 0.5, "current": [{"node": "n", "gpu": 0}]},  # no fraction
    ],
)
def test_current_must_match_the_shape(job: dict[str, Any]) -> None:
    data = request(nodes=[node(gpus=[gpu(0), gpu(1)])], jobs=[{"name": "j", **job}])
    assert errors(data) == [(("jobs", 0), "value_error")]


def test_current_when_given_is_not_empty() -> None:
    data = request(nodes=[node(gpus=[gpu(0)])], jobs=[{"name": "j", "gpus": 1, "current": []}])
    assert errors(data) == [(("jobs", 0, "current"), "too_short")]


def test_unknown_gpu_model() -> None:
    data = request(nodes=[node("a"), node("b", gpus=[gpu(0), gpu(1, model="B200")])])
    assert errors(data) == [(("cluster", "nodes", 1, "gpus", 1, "model"), "invalid_reference")]


def test_unknown_mig_profile_demand() -> None:
    data = request(jobs=[{"name": "j", "mig_profile": "5g.30gb"}])
    assert errors(data) == [(("jobs", 0, "mig_profile"), "invalid_reference")]


def test_gpu_models_extends_the_catalog() -> None:
    data = request(nodes=[node(gpus=[gpu(model="B200")])],
                   gpu_models={"B200": {"memory_gib": 192, "relative_speed": 4.5}})
    req = PlanRequest.model_validate(data)
    cat = req.cluster.catalog()
    assert cat["B200"].memory_gib == 192 and cat["B200"].relative_speed == 4.5
    assert set(BUILTIN_CATALOG) < set(cat)


def test_gpu_models_overrides_a_builtin_model() -> None:
    data = request(nodes=[node(gpus=[gpu(model="T4-16GB")])],
                   gpu_models={"T4-16GB": {"memory_gib": 15, "relative_speed": 0.3}})
    cat = PlanRequest.model_validate(data).cluster.catalog()
    assert cat["T4-16GB"].memory_gib == 15 and cat["T4-16GB"].relative_speed == 0.3
    assert BUILTIN_CATALOG["T4-16GB"].memory_gib == 16


def test_gpu_models_override_can_drop_mig() -> None:
    """Overriding an A100 without MIG profiles makes its MIG layouts invalid input."""
    data = request(nodes=[node(gpus=[mig_gpu([("1g.5gb", 0)])])],
                   gpu_models={"A100-SXM4-40GB": {"memory_gib": 40}})
    assert errors(data) == [(("cluster", "nodes", 0, "gpus", 0, "mig_enabled"),
                             "invalid_reference")]


def test_gpu_model_with_bad_profile_geometry() -> None:
    bad = {"memory_gib": 10, "memory_slices": 4, "compute_slices": 4,
           "mig_profiles": [{"name": "2g.5gb", "compute_slices": 2, "memory_slices": 2,
                             "memory_gib": 5, "max_count": 2, "starts": [0, 3]}]}
    locs = [e[0] for e in errors(request(gpu_models={"X": bad}))]
    assert locs == [("cluster", "gpu_models", "X")]


def test_custom_mig_model_layout_is_checked() -> None:
    model = {"memory_gib": 10, "memory_slices": 4, "compute_slices": 4,
             "mig_profiles": [{"name": "2g.5gb", "compute_slices": 2, "memory_slices": 2,
                               "memory_gib": 5, "max_count": 2, "starts": [0, 2]}]}
    ok = request(nodes=[node(gpus=[mig_gpu([("2g.5gb", 0), ("2g.5gb", 2)], model="X")])],
                 gpu_models={"X": model})
    assert PlanRequest.model_validate(ok).cluster.catalog()["X"].mig_capable
    bad = request(nodes=[node(gpus=[mig_gpu([("2g.5gb", 0), ("2g.5gb", 1)], model="X")])],
                  gpu_models={"X": model})
    assert errors(bad) == [(("cluster", "nodes", 0, "gpus", 0, "mig_instances"),
                            "invalid_reference")]


def test_placement_is_mig_or_fraction_not_both() -> None:
    with pytest.raises(ValidationError):
        Job.model_validate({"name": "j", "gpu_share": 0.5, "current": [
            {"node": "n", "gpu": 0, "fraction": 0.5, "mig": {"profile": "1g.5gb", "start": 0}}]})


def test_errors_are_collected_not_first_only() -> None:
    data = request(nodes=[node("a"), node("a", gpus=[gpu(model="Nope")])],
                   jobs=[{"name": "j", "gpus": 1}, {"name": "j", "gpus": 1}])
    locs = {e[0] for e in errors(data)}
    assert locs == {("cluster", "nodes", 1, "name"), ("cluster", "nodes", 1, "gpus", 0, "model"),
                    ("jobs", 1, "name")}
