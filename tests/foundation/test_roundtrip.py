"""Property: any valid PlanRequest survives a JSON round trip unchanged.

The strategy builds rich requests: several nodes (domains, host capacity, labels, cordons),
non-MIG and MIG GPUs (current layouts drawn from `valid_layouts`), custom GPU models, jobs of
all three demand shapes with optional fields and consistent `current` placements, and a
random policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import BUILTIN_CATALOG, PlanRequest, valid_layouts

MODELS = sorted(BUILTIN_CATALOG)
MIG_MODELS = sorted(n for n, m in BUILTIN_CATALOG.items() if m.mig_capable)
PROFILES = sorted({p.name for m in BUILTIN_CATALOG.values() for p in m.mig_profiles})
CUSTOM = "Custom-GPU"

finite = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
speed = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-3, max_value=100.0, allow_nan=False, allow_infinity=False)
share = st.floats(min_value=0.01, max_value=0.99, allow_nan=False, allow_infinity=False)
text = st.text(alphabet="abcdefghij-_0123456789", min_size=1, max_size=8)


@st.composite
def gpus_of(draw: st.DrawFn, custom: bool) -> list[dict[str, Any]]:
    out = []
    models = [*MODELS, CUSTOM] if custom else MODELS
    for index in draw(st.lists(st.integers(0, 15), unique=True, max_size=4)):
        model = draw(st.sampled_from(models))
        gpu: dict[str, Any] = {"index": index, "model": model, "healthy": draw(st.booleans())}
        if model in MIG_MODELS and draw(st.booleans()):
            layout = draw(st.sampled_from(valid_layouts(BUILTIN_CATALOG[model])))
            gpu["mig_enabled"] = True
            gpu["mig_instances"] = [{"profile": x.profile, "start": x.start}
                                    for x in sorted(layout, key=lambda x: x.start)]
        out.append(gpu)
    return out


@st.composite
def nodes_of(draw: st.DrawFn, custom: bool) -> list[dict[str, Any]]:
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        node: dict[str, Any] = {"name": f"node-{i}", "gpus": draw(gpus_of(custom)),
                                "schedulable": draw(st.booleans()),
                                "labels": draw(st.dictionaries(text, text, max_size=2))}
        if draw(st.booleans()):
            node["topology_domain"] = draw(st.sampled_from(["r1", "r2", "nvl-a"]))
        if draw(st.booleans()):
            node["cpu_millicores"] = draw(finite)
            node["memory_gib"] = draw(finite)
        nodes.append(node)
    return nodes


def _whole_gpus(nodes: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(n["name"], g["index"]) for n in nodes for g in n["gpus"] if not g.get("mig_enabled")]


def _mig_slots(nodes: list[dict[str, Any]]) -> list[tuple[str, int, dict[str, Any]]]:
    return [(n["name"], g["index"], m) for n in nodes for g in n["gpus"]
            for m in g.get("mig_instances", [])]


@st.composite
def job_of(draw: st.DrawFn, i: int, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    job: dict[str, Any] = {"name": f"job-{i}",
                           "kind": draw(st.sampled_from(["training", "inference"])),
                           "tenant": draw(st.sampled_from(["default", "nlp", "vision"])),
                           "weight": draw(positive), "preemptible": draw(st.booleans())}
    shape = draw(st.sampled_from(["whole", "mig", "mig_profile", "share"]))
    whole, slots = _whole_gpus(nodes), _mig_slots(nodes)
    if shape == "whole":
        job["gpus"] = draw(st.integers(1, 8))
        job["single_node"] = draw(st.booleans())
        job["same_domain"] = draw(st.booleans())
        if len(whole) >= job["gpus"] and draw(st.booleans()):
            picked = draw(st.permutations(whole))[: job["gpus"]]
            job["current"] = [{"node": n, "gpu": g} for n, g in picked]
    elif shape == "share":
        job["gpu_share"] = draw(share)
        if whole and draw(st.booleans()):
            n, g = draw(st.sampled_from(whole))
            job["current"] = [{"node": n, "gpu": g, "fraction": job["gpu_share"]}]
    else:
        if shape == "mig":
            job["mig"] = {"compute_slices": draw(st.integers(1, 7)),
                          "memory_gib": draw(st.floats(0, 80, allow_nan=False))}
        else:
            job["mig_profile"] = draw(st.sampled_from(PROFILES))
        if slots and draw(st.booleans()):
            n, g, inst = draw(st.sampled_from(slots))
            job["current"] = [{"node": n, "gpu": g, "mig": inst}]
    if draw(st.booleans()):
        job["gpu_memory_gib"] = draw(st.floats(0, 100, allow_nan=False))
    if draw(st.booleans()):
        job["throughput"] = draw(st.dictionaries(st.sampled_from(MODELS), speed, max_size=3))
    if draw(st.booleans()):
        job["allowed_models"] = draw(st.lists(st.sampled_from(MODELS), max_size=3))
    for key in ("cpu_millicores", "host_memory_gib", "remaining_work", "submitted_at"):
        if draw(st.booleans()):
            job[key] = draw(finite)
    return job


policies = st.fixed_dictionaries({}, optional={
    "objective": st.sampled_from(["throughput", "fairness", "makespan", "priority_fifo", "jct"]),
    "solver": st.sampled_from(["auto", "cp_sat", "milp", "heuristic"]),
    "milp_backend": st.sampled_from(["cbc", "highs"]),
    "time_limit_s": st.floats(0.01, 3600, allow_nan=False),
    "mip_gap": st.floats(0, 1, allow_nan=False),
    "seed": st.integers(0, 2**31 - 1),
    "threads": st.integers(1, 256),
    "migration_cost": finite,
    "preemption_cost": finite,
    "allow_preemption": st.booleans(),
    "allow_mig_reconfiguration": st.booleans(),
})


@st.composite
def requests(draw: st.DrawFn) -> PlanRequest:
    custom = draw(st.booleans())
    nodes = draw(nodes_of(custom))
    cluster: dict[str, Any] = {"nodes": nodes}
    if custom:
        cluster["gpu_models"] = {CUSTOM: {"memory_gib": draw(positive),
                                          "relative_speed": draw(positive)}}
    jobs = [draw(job_of(i, nodes)) for i in range(draw(st.integers(0, 6)))]
    return PlanRequest.model_validate({"cluster": cluster, "jobs": jobs,
                                       "policy": draw(policies)})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_request_json_round_trip(req: PlanRequest) -> None:
    again = PlanRequest.model_validate_json(req.model_dump_json())
    assert again == req
    assert again.model_dump_json() == req.model_dump_json()


def _has_running(shape: str) -> Callable[[PlanRequest], bool]:
    return lambda r: any(j.shape == shape and j.current for j in r.jobs)


#: Features the strategy must reach; checked by `test_strategy_reaches_every_feature`.
FEATURES: dict[str, Callable[[PlanRequest], bool]] = {
    "running-gang": _has_running("whole"),
    "running-mig": _has_running("mig"),
    "running-share": _has_running("share"),
    "mig-layout": lambda r: any(len(g.mig_instances) >= 3
                                for n in r.cluster.nodes for g in n.gpus),
    "custom-model": lambda r: any(g.model == CUSTOM for n in r.cluster.nodes for g in n.gpus),
    "all-shapes": lambda r: {j.shape for j in r.jobs} == {"whole", "mig", "share"},
    "policy": lambda r: r.policy.objective != "throughput" and not r.policy.allow_preemption,
}


def test_strategy_reaches_every_feature() -> None:
    """The strategy is rich enough: within a modest sample, every feature occurs."""
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(requests())
    def probe(req: PlanRequest) -> None:
        seen.update(name for name, has in FEATURES.items() if has(req))

    probe()
    assert seen == set(FEATURES)
