"""solver/validate.py: one test per rule, on the example fixtures and on small mutations.

Every fixture `examples/plans/<request>.invalid-<rule>[-<variant>].plan.json` must be caught
with that rule and only it; `<request>.valid*.plan.json` must pass. The mutation tests break
one sub-check of a rule at a time, re-pricing the objective when the mutation changes it so
that only the intended rule fires.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heuristics.result import HeuristicResult
from models import Placement, Plan, PlanRequest
from models.objective import evaluate
from solver.build import build_plan
from solver.level_report import level_stats
from solver.validate import RULES, Violation, recompute_objective, validate_plan
from tests.foundation.helpers import (
    EXAMPLES,
    PLANS,
    as_plan,
    as_request,
    load_json,
    plan_dict,
    request_dict,
    request_path,
)

FIXTURE = re.compile(r"^(?P<stem>[\w-]+?)\.(?P<kind>valid|invalid-(?P<rule>[a-z_]+))(-[\w-]+)?$")
EXPECTED_RULES = ("accounting", "eligibility", "whole_gpu", "elastic", "mig", "shared",
                  "host_resources", "running", "topology", "objective", "interference",
                  "quota", "priority", "levels")


def _fixtures() -> list[Path]:
    return sorted(PLANS.glob("*.plan.json"))


def _parse(path: Path) -> tuple[str, str | None]:
    m = FIXTURE.match(path.name.removesuffix(".plan.json"))
    assert m is not None, path.name
    return m["stem"], m["rule"]


def rules_of(violations: list[Violation]) -> set[str]:
    return {v.rule for v in violations}


def check(req: dict[str, Any], plan: dict[str, Any]) -> list[Violation]:
    return validate_plan(as_request(req), as_plan(plan))


def repriced(req: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """`plan` with its objective set to the recomputed value (bound and gap dropped)."""
    plan["objective_value"] = recompute_objective(as_request(req), as_plan(plan))
    plan["best_bound"] = plan["gap"] = None
    return plan


def recompute_loss(req: dict[str, Any], plan: dict[str, Any]) -> float:
    """The planners' stats.interference_loss of `plan` (models/objective.py)."""
    placements = {a["job"]: as_plan(plan).assignments[i].placements
                  for i, a in enumerate(plan["assignments"])}
    return evaluate(as_request(req), placements).interference_loss


def assignment(plan: dict[str, Any], job: str) -> dict[str, Any]:
    return next(a for a in plan["assignments"] if a["job"] == job)


def unplace(plan: dict[str, Any], job: str, reason: str = "preempted") -> None:
    plan["assignments"] = [a for a in plan["assignments"] if a["job"] != job]
    plan["unplaced"].append({"job": job, "reason": reason, "detail": ""})


def job_of(req: dict[str, Any], name: str) -> dict[str, Any]:
    return next(j for j in req["jobs"] if j["name"] == name)


def node_of(req: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in req["cluster"]["nodes"] if n["name"] == name)


# ------------------------------------------------------------------ fixtures


def test_rule_names_are_the_contract_list() -> None:
    assert RULES == EXPECTED_RULES


def test_every_rule_has_an_invalid_fixture() -> None:
    covered = {_parse(p)[1] for p in _fixtures()}
    assert set(EXPECTED_RULES) <= covered
    stems = {_parse(p)[0] for p in _fixtures() if _parse(p)[1] is None}
    assert {"small-mixed", "mig-puzzle", "quotas-priority"} <= stems


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_fixture(path: Path) -> None:
    stem, rule = _parse(path)
    req = PlanRequest.model_validate(load_json(request_path(stem)))
    plan = Plan.model_validate(load_json(path))
    violations = validate_plan(req, plan)
    if rule is None:
        assert violations == []
    else:
        assert violations and rules_of(violations) == {rule}, violations
    if rule != "objective":
        # The objective in each fixture is the real one, by the planners' evaluator too.
        placements = {a.job: a.placements for a in plan.assignments}
        assert evaluate(req, placements).objective_value == pytest.approx(plan.objective_value)


def test_contract_example_plan_is_valid(contract_dir: Path) -> None:
    for base in (EXAMPLES, contract_dir / "examples"):
        req = PlanRequest.model_validate(load_json(base / "mig-puzzle.request.json"))
        plan = Plan.model_validate(load_json(base / "mig-puzzle.plan.json"))
        assert validate_plan(req, plan) == []


def test_violation_api() -> None:
    v = Violation("mig", "bad", job="j", gpu=3)
    assert (v.rule, v.message, v.job, v.node, v.gpu) == ("mig", "bad", "j", None, 3)
    assert v.where() == "job=j gpu=3"
    assert Violation("objective", "x").where() == "-"
    with pytest.raises(AttributeError):
        v.rule = "other"  # type: ignore[misc]


def test_violations_name_job_node_gpu() -> None:
    req = request_dict("small-mixed")
    plan = plan_dict("small-mixed.invalid-shared")
    (v,) = check(req, plan)
    assert (v.rule, v.node, v.gpu) == ("shared", "v100-node-1", 0)
    (w,) = check(req, plan_dict("small-mixed.invalid-running"))
    assert (w.rule, w.job) == ("running", "recsys-train")


# ------------------------------------------------------------------ mutations

Mutation = Callable[[dict[str, Any], dict[str, Any]], None]
CASES: list[tuple[str, str, str, Mutation]] = []


def case(rule: str, base: str = "small-mixed.valid") -> Callable[[Mutation], Mutation]:
    """Register a mutation of fixture `base` that must break exactly `rule`."""
    def deco(fn: Mutation) -> Mutation:
        CASES.append((fn.__name__, rule, base, fn))
        return fn
    return deco


# accounting
@case("accounting", "mig-puzzle.valid-partial")
def missing_unplaced_job(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["unplaced"] = []


@case("accounting")
def unknown_job_unplaced(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["unplaced"].append({"job": "ghost", "reason": "time_limit", "detail": ""})


@case("accounting")
def unknown_job_assigned(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["assignments"].append({"job": "ghost", "placements": [{"node": "x", "gpu": 0}]})


@case("accounting", "mig-puzzle.valid-partial")
def empty_assignment(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["unplaced"] = []
    plan["assignments"].append({"job": "svc-1g-b", "placements": []})


@case("accounting")
def assigned_twice(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["assignments"].append(dict(assignment(plan, "notebook-bob")))


@case("accounting")
def infeasible_with_assignments(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["status"] = "infeasible"


# eligibility
@case("eligibility")
def unschedulable_node(req: dict[str, Any], plan: dict[str, Any]) -> None:
    node_of(req, "v100-node-1")["schedulable"] = False


@case("eligibility")
def unhealthy_gpu(req: dict[str, Any], plan: dict[str, Any]) -> None:
    node_of(req, "a100-node-1")["gpus"][4]["healthy"] = False


@case("eligibility")
def model_not_allowed(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "resnet50-sweep-2")["allowed_models"] = ["A100-SXM4-80GB"]


@case("eligibility")
def model_not_in_throughput_map(req: dict[str, Any], plan: dict[str, Any]) -> None:
    del job_of(req, "resnet50-sweep-2")["throughput"]["V100-32GB"]
    repriced(req, plan)


@case("eligibility")
def gpu_memory_too_small(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "resnet50-sweep-2")["gpu_memory_gib"] = 40


@case("eligibility")
def fraction_differs_from_share(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "notebook-bob")["placements"][0]["fraction"] = 0.3


@case("eligibility")
def whole_job_with_fraction(req: dict[str, Any], plan: dict[str, Any]) -> None:
    for p in assignment(plan, "resnet50-sweep-2")["placements"]:
        p["fraction"] = 0.5


@case("eligibility")
def whole_job_on_mig_gpu(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "whisper-serving")["placements"] = [
        {"node": "a100-node-1", "gpu": 6, "mig": {"profile": "1g.10gb", "start": 2}}]
    plan["mig_changes"] = [{"node": "a100-node-1", "gpu": 6, "destroy": [],
                            "create": [{"profile": "1g.10gb", "start": 2}]}]
    assignment(plan, "resnet50-sweep-1")["placements"][1]["gpu"] = 7


@case("eligibility")
def mig_job_on_non_mig_gpu(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "whisper-serving")["placements"] = [
        {"node": "v100-node-1", "gpu": 3, "mig": {"profile": "1g.10gb", "start": 0}}]
    plan["mig_changes"] = []
    repriced(req, plan)


@case("eligibility")
def mig_job_without_instance(req: dict[str, Any], plan: dict[str, Any]) -> None:
    del assignment(plan, "whisper-serving")["placements"][0]["mig"]


@case("eligibility")
def mig_instance_too_small(req: dict[str, Any], plan: dict[str, Any]) -> None:
    # bert-serving needs 2 compute slices and 20 GiB; a 1g.20gb has one compute slice.
    assignment(plan, "bert-serving")["placements"] = [
        {"node": "a100-node-1", "gpu": 7, "mig": {"profile": "1g.20gb", "start": 2}}]
    plan["mig_changes"][0]["create"].append({"profile": "1g.20gb", "start": 2})
    plan["migrated"] = ["bert-serving"]
    repriced(req, plan)


@case("eligibility")
def mig_job_two_placements(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "whisper-serving")["placements"].append(
        {"node": "a100-node-1", "gpu": 7, "mig": {"profile": "1g.10gb", "start": 2}})
    plan["mig_changes"][0]["create"].append({"profile": "1g.10gb", "start": 2})


@case("eligibility")
def shared_job_without_fraction(req: dict[str, Any], plan: dict[str, Any]) -> None:
    del assignment(plan, "notebook-bob")["placements"][0]["fraction"]


# whole_gpu
@case("whole_gpu")
def gang_too_few_gpus(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "resnet50-sweep-2")["placements"].pop()


@case("whole_gpu")
def gang_same_gpu_twice(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "resnet50-sweep-2")["placements"][1]["gpu"] = 0


@case("whole_gpu")
def gang_two_models_two_nodes(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "resnet50-sweep-2")["placements"][1] = {"node": "a100-node-1", "gpu": 5}
    assignment(plan, "resnet50-sweep-1")["placements"][1] = {"node": "v100-node-1", "gpu": 1}
    repriced(req, plan)


@case("whole_gpu", "host-tight.valid")
def gang_across_domainless_nodes(req: dict[str, Any], plan: dict[str, Any]) -> None:
    # A node without a topology domain is a domain of its own.
    del node_of(req, "n2")["topology_domain"]


@case("whole_gpu", "host-tight.valid")
def single_node_gang_on_two_nodes(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "ddp")["single_node"] = True


# mig
@case("mig")
def reconfiguration_not_allowed(req: dict[str, Any], plan: dict[str, Any]) -> None:
    req["policy"]["allow_mig_reconfiguration"] = False


@case("mig")
def change_on_non_mig_gpu(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["mig_changes"].append({"node": "v100-node-1", "gpu": 3, "destroy": [],
                                "create": [{"profile": "1g.10gb", "start": 0}]})


@case("mig")
def change_on_missing_gpu(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["mig_changes"].append({"node": "a100-node-1", "gpu": 42, "destroy": [], "create": []})


@case("mig")
def destroy_not_current(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["mig_changes"][0]["destroy"] = [{"profile": "1g.10gb", "start": 6}]


@case("mig")
def create_existing(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["mig_changes"].append({"node": "a100-node-1", "gpu": 6, "destroy": [],
                                "create": [{"profile": "3g.40gb", "start": 4}]})


@case("mig")
def gpu_listed_twice(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["mig_changes"].append({"node": "a100-node-1", "gpu": 7, "destroy": [], "create": []})


@case("mig")
def instance_never_created(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["mig_changes"] = []


@case("mig")
def unknown_profile_created(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["mig_changes"][0]["create"].append({"profile": "5g.50gb", "start": 2})


@case("mig")
def final_layout_overlaps(req: dict[str, Any], plan: dict[str, Any]) -> None:
    # whisper-serving's 1g.10gb@0 and a 4g.40gb@0 share memory slices 0-1.
    plan["mig_changes"][0]["create"].append({"profile": "4g.40gb", "start": 0})


@case("mig")
def two_media_extension_instances(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["mig_changes"][0]["create"] += [{"profile": "1g.10gb+me", "start": 2},
                                         {"profile": "1g.10gb+me", "start": 3}]


# shared
@case("shared")
def fractions_over_one(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "notebook-alice")["gpu_share"] = 0.8
    assignment(plan, "notebook-alice")["placements"][0]["fraction"] = 0.8
    repriced(req, plan)


@case("shared")
def gpu_memory_over_capacity(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "notebook-alice")["gpu_memory_gib"] = 30


@case("shared")
def shared_on_mig_gpu(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "notebook-bob")["placements"] = [
        {"node": "a100-node-1", "gpu": 7, "fraction": 0.25}]
    repriced(req, plan)


# host_resources
@case("host_resources", "host-tight.valid")
def host_memory_over(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "etl")["host_memory_gib"] = 50


@case("host_resources", "host-tight.valid")
def gang_share_over_cpu(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "ddp")["cpu_millicores"] = 8002


# elastic (E1)
@case("elastic", "elastic.valid")
def elastic_size_not_a_curve_key(req: dict[str, Any], plan: dict[str, Any]) -> None:
    # resnet-elastic's curve has 1, 2 and 4 GPUs; 3 is inside the range but not allowed.
    assignment(plan, "resnet-elastic")["placements"] = [
        {"node": "n1", "gpu": i} for i in range(3)]
    repriced(req, plan)


@case("elastic", "elastic.valid")
def elastic_above_max_gpus(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "bert-elastic")["elastic"]["max_gpus"] = 3
    repriced(req, plan)


@case("whole_gpu", "elastic.valid")
def elastic_gang_same_gpu_twice(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "bert-elastic")["placements"][3] = {"node": "n2", "gpu": 0}
    repriced(req, plan)


@case("running", "elastic.valid")
def elastic_resize_not_listed_as_migrated(req: dict[str, Any],
                                          plan: dict[str, Any]) -> None:
    # Growing onto a superset of its current GPUs is a migration all the same.
    plan["migrated"] = []
    repriced(req, plan)


@case("running", "elastic.valid")
def elastic_shrink_not_listed_as_migrated(req: dict[str, Any],
                                          plan: dict[str, Any]) -> None:
    assignment(plan, "resnet-elastic")["placements"] = [{"node": "n1", "gpu": 0}]
    plan["migrated"] = []
    repriced(req, plan)


@case("objective", "elastic.valid")
def elastic_valued_at_nominal_size(req: dict[str, Any], plan: dict[str, Any]) -> None:
    # resnet-elastic on 4 GPUs is worth speedup[4] = 3.4, not speedup[2] = 1.9 or 4.
    plan["objective_value"] = 1.9 + 8.0 - 0.5


@case("objective", "elastic.valid")
def elastic_jct_remaining_time_at_nominal_size(req: dict[str, Any],
                                               plan: dict[str, Any]) -> None:
    req["policy"]["objective"] = "jct"
    job_of(req, "resnet-elastic")["remaining_work"] = 3600.0
    # On 4 GPUs it has 3600 * 1.9 / 3.4 s left, so it contributes 3.4 / 1.9, not 1.
    plan["objective_value"] = 1.0 + 2.0 - 0.5


# running
@case("running")
def non_preemptible_stopped(req: dict[str, Any], plan: dict[str, Any]) -> None:
    unplace(plan, "recsys-train")
    plan["preempted"] = ["recsys-train"]
    repriced(req, plan)


@case("running")
def stopped_without_preemption(req: dict[str, Any], plan: dict[str, Any]) -> None:
    req["policy"]["allow_preemption"] = False
    unplace(plan, "bert-serving")
    plan["preempted"] = ["bert-serving"]
    repriced(req, plan)


@case("running")
def preempted_not_listed(req: dict[str, Any], plan: dict[str, Any]) -> None:
    unplace(plan, "bert-serving")
    repriced(req, plan)


@case("running")
def kept_listed_as_migrated(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["migrated"] = ["bert-serving"]


@case("running")
def kept_listed_as_preempted(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["preempted"] = ["recsys-train"]


@case("running")
def moved_not_listed(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "bert-serving")["placements"] = [
        {"node": "a100-node-1", "gpu": 7, "mig": {"profile": "2g.20gb", "start": 2}}]
    plan["mig_changes"][0]["create"].append({"profile": "2g.20gb", "start": 2})
    repriced(req, plan)


@case("running")
def migrated_listed_twice(req: dict[str, Any], plan: dict[str, Any]) -> None:
    moved_not_listed(req, plan)
    plan["migrated"] = ["bert-serving", "bert-serving"]


# objective
@case("objective")
def bound_below_value(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["best_bound"] = plan["objective_value"] - 1.0


@case("objective")
def gap_inconsistent(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["best_bound"] = plan["objective_value"] + 1.0
    plan["gap"] = 0.5


@case("objective")
def value_not_finite(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["objective_value"] = math.nan


@case("objective")
def costs_not_charged(req: dict[str, Any], plan: dict[str, Any]) -> None:
    moved_not_listed(req, plan)
    plan["migrated"] = ["bert-serving"]
    plan["objective_value"] += 0.5


@case("objective", "mig-puzzle.valid")
def size_from_instance_not_demand(req: dict[str, Any], plan: dict[str, Any]) -> None:
    # svc-1g-a demands 1g.5gb; valuing it as the 2g instance it could have is wrong.
    plan["objective_value"] = 1.0 + 1 / 7


# topology (T1, contract 5.5)
@case("topology", "topology-levels.valid")
def required_rack_spans_racks(req: dict[str, Any], plan: dict[str, Any]) -> None:
    assignment(plan, "eval")["placements"][1] = {"node": "n3", "gpu": 0}
    assignment(plan, "finetune")["placements"][0] = {"node": "n5", "gpu": 0}
    repriced(req, plan)


@case("topology", "topology-levels.valid")
def required_block_spans_blocks(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "finetune")["topology"] = {"required": "block"}
    repriced(req, plan)


@case("objective", "topology-levels.valid")
def preferred_cost_not_charged(req: dict[str, Any], plan: dict[str, Any]) -> None:
    job_of(req, "eval")["topology"] = {"preferred": "block"}
    assignment(plan, "eval")["placements"][1] = {"node": "n3", "gpu": 0}
    assignment(plan, "finetune")["placements"][0] = {"node": "n5", "gpu": 0}
    plan["best_bound"] = plan["gap"] = None
# interference (contract 5.2)
@case("interference", "colocation.valid")
def loss_missing(req: dict[str, Any], plan: dict[str, Any]) -> None:
    del plan["stats"]["interference_loss"]


@case("interference", "colocation.valid")
def loss_of_the_old_pairs(req: dict[str, Any], plan: dict[str, Any]) -> None:
    # Swap a3c and lm: the objective is re-priced, the loss is left as it was.
    assignment(plan, "a3c-train")["placements"][0]["gpu"] = 1
    assignment(plan, "lm-train")["placements"][0]["gpu"] = 0
    repriced(req, plan)


@case("interference", "colocation.valid")
def loss_counts_gains(req: dict[str, Any], plan: dict[str, Any]) -> None:
    # A pair that speeds lm up: netting its gain against the others' loss is wrong.
    for pair in req["interference"]:
        if (pair["a"], pair["b"]) == ("lm", "transformer"):
            pair["speed"] = 1.9
    repriced(req, plan)
    plan["stats"]["interference_loss"] = recompute_loss(req, plan) - 2.0 * 0.5 * 0.4 * 0.9


@case("objective", "colocation.valid")
def value_without_factors(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["objective_value"] = plan["stats"]["throughput"] + plan["stats"]["interference_loss"]
# quota, priority, levels (contract 5.3 / 5.4)
def restat(req: dict[str, Any], plan: dict[str, Any]) -> None:
    """Recompute the plan's running lists, objective and level stats after a mutation."""
    request = as_request(req)
    placements = {a["job"]: as_plan(plan).assignments[i].placements
                  for i, a in enumerate(plan["assignments"])}
    ev = evaluate(request, placements)
    plan["preempted"], plan["migrated"] = list(ev.preempted), list(ev.migrated)
    plan["stats"].update(level_stats(request, placements))
    repriced(req, plan)


def replace(plan: dict[str, Any], job: str, placements: list[dict[str, Any]] | None) -> None:
    plan["assignments"] = [a for a in plan["assignments"] if a["job"] != job]
    plan["unplaced"] = [u for u in plan["unplaced"] if u["job"] != job]
    if placements:
        plan["assignments"].append({"job": job, "placements": placements})
    else:
        plan["unplaced"].append({"job": job, "reason": "preempted", "detail": ""})


@case("quota", "quotas-priority.valid")
def limit_below_usage(req: dict[str, Any], plan: dict[str, Any]) -> None:
    req["cluster"]["quotas"]["research"]["limit"]["*"] = 2.5
    plan["stats"]["quota"]["research"]["*"]["limit"] = 2.5


@case("quota", "quotas-priority.valid")
def parent_limit_counts_children(req: dict[str, Any], plan: dict[str, Any]) -> None:
    req["cluster"]["quotas"]["org"]["limit"]["*"] = 6.5
    plan["stats"]["quota"]["org"]["*"]["limit"] = 6.5


@case("priority", "quotas-priority.valid")
def lower_class_takes_a_higher_ones_gpu(req: dict[str, Any], plan: dict[str, Any]) -> None:
    replace(plan, "research-sweep", None)
    replace(plan, "batch-render-1", [{"node": "a100-node", "gpu": 0}])
    restat(req, plan)


@case("levels", "quotas-priority.valid")
def quota_usage_misreported(req: dict[str, Any], plan: dict[str, Any]) -> None:
    plan["stats"]["quota"]["research"]["*"]["usage"] = 2.0


@case("levels", "quotas-priority.valid")
def levels_missing(req: dict[str, Any], plan: dict[str, Any]) -> None:
    del plan["stats"]["levels"]


@pytest.mark.parametrize(("name", "rule", "base", "mutate"), CASES, ids=[c[0] for c in CASES])
def test_mutation_breaks_exactly_one_rule(name: str, rule: str, base: str,
                                          mutate: Mutation) -> None:
    stem = base.split(".")[0]
    req, plan = request_dict(stem), plan_dict(base)
    assert check(req, plan) == []
    mutate(req, plan)
    violations = check(req, plan)
    assert violations, name
    assert rules_of(violations) == {rule}, violations


def test_every_rule_has_mutations() -> None:
    assert {c[1] for c in CASES} == set(EXPECTED_RULES)


# ------------------------------------------------------------------ specific semantics


def test_kept_jobs_on_cordoned_node_are_grandfathered() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    node_of(req, "a100-node-1")["schedulable"] = False
    flagged = {v.job for v in check(req, plan)}
    assert flagged == {"resnet50-sweep-1", "whisper-serving", "embedder-serving"}


def test_kept_job_on_now_ineligible_model_is_grandfathered() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    job_of(req, "recsys-train")["allowed_models"] = ["H100-SXM5-80GB"]
    job_of(req, "recsys-train")["throughput"] = {"H100-SXM5-80GB": 1.3}
    repriced(req, plan)
    assert check(req, plan) == []


def test_kept_jobs_still_count_for_capacity() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    node_of(req, "a100-node-1")["cpu_millicores"] = 1000
    job_of(req, "recsys-train")["cpu_millicores"] = 4000
    assert rules_of(check(req, plan)) == {"host_resources"}


def test_moved_non_preemptible_job_is_not_grandfathered() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.invalid-running")
    node_of(req, "a100-node-1")["gpus"][4]["healthy"] = False
    assert rules_of(check(req, plan)) == {"running", "eligibility"}


def test_unknown_gpu_memory_is_unconstrained() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    job_of(req, "notebook-alice")["gpu_memory_gib"] = 30
    assert rules_of(check(req, plan)) == {"shared"}
    req["cluster"]["gpu_models"] = {"V100-32GB": {"relative_speed": 0.4}}
    assert check(req, plan) == []


def test_exact_capacity_is_allowed() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    job_of(req, "notebook-alice")["gpu_memory_gib"] = 24  # 24 + 8 = 32 GiB exactly
    assert check(req, plan) == []


def test_preemption_is_fine_when_allowed_and_listed() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    unplace(plan, "bert-serving")
    plan["preempted"] = ["bert-serving"]
    repriced(req, plan)
    assert check(req, plan) == []
    assert plan["objective_value"] == pytest.approx(
        plan_dict("small-mixed.valid")["objective_value"] - 6 / 7 - 1.0)


def test_migration_is_fine_when_listed_and_charged() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    assignment(plan, "bert-serving")["placements"] = [
        {"node": "a100-node-1", "gpu": 7, "mig": {"profile": "2g.20gb", "start": 2}}]
    plan["mig_changes"][0]["create"].append({"profile": "2g.20gb", "start": 2})
    plan["migrated"] = ["bert-serving"]
    plan["objective_value"] -= 0.5
    assert check(req, plan) == []


def test_reconfiguration_free_plan_passes_when_disallowed() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    req["policy"]["allow_mig_reconfiguration"] = False
    unplace(plan, "whisper-serving", "insufficient_capacity")
    plan["mig_changes"] = []
    repriced(req, plan)
    assert check(req, plan) == []


def test_destroy_then_recreate_elsewhere_is_fine() -> None:
    req, plan = request_dict("small-mixed"), plan_dict("small-mixed.valid")
    # Move embedder-serving's free 3g.40gb@4 away: destroy it, create 3g.40gb on GPU 7.
    assignment(plan, "embedder-serving")["placements"] = [
        {"node": "a100-node-1", "gpu": 7, "mig": {"profile": "3g.40gb", "start": 4}}]
    plan["mig_changes"][0]["create"].append({"profile": "3g.40gb", "start": 4})
    plan["mig_changes"].append({"node": "a100-node-1", "gpu": 6,
                                "destroy": [{"profile": "3g.40gb", "start": 4}], "create": []})
    assert check(req, plan) == []


def test_infeasible_plan() -> None:
    req = request_dict("small-mixed")
    plan = {"status": "infeasible", "solver": "x", "objective_value": 0.0, "assignments": [],
            "unplaced": [{"job": j["name"], "reason": "infeasible_constraints", "detail": ""}
                         for j in req["jobs"]],
            "preempted": ["recsys-train", "bert-serving"]}
    repriced(req, plan)
    assert plan["objective_value"] == pytest.approx(-2.0)
    assert check(req, plan) == []


@pytest.mark.parametrize("objective", ["throughput", "priority_fifo", "jct", "makespan",
                                       "fairness"])
@pytest.mark.parametrize("name", ["small-mixed.valid", "mig-puzzle.valid-partial",
                                  "host-tight.valid", "small-mixed.invalid-running"])
def test_every_objective_agrees_with_the_planners_evaluator(objective: str, name: str) -> None:
    req = request_dict(name.split(".")[0])
    req["policy"]["objective"] = objective
    request = as_request(req)
    plan = as_plan(plan_dict(name))
    placements = {a.job: a.placements for a in plan.assignments}
    assert recompute_objective(request, plan) == pytest.approx(
        evaluate(request, placements).objective_value, rel=1e-12, abs=1e-12)


def test_objectives_by_hand_on_mig_puzzle() -> None:
    req, plan = request_dict("mig-puzzle"), plan_dict("mig-puzzle.valid-partial")
    # Placed: 3g, 2g, 1g demands on an A100 (speed 1, weight 1): 6/7 of a GPU.
    expected = {"throughput": 6 / 7, "priority_fifo": 6 / 7, "makespan": 6 / 7,
                "jct": 3.0,  # each placed job: weight * speed * H / H
                "fairness": 6 / 7}  # one tenant: 6/7 placed of 7/7 demanded
    for objective, value in expected.items():
        req["policy"]["objective"] = objective
        assert recompute_objective(as_request(req), as_plan(plan)) == pytest.approx(value)


def test_jct_and_makespan_use_remaining_work() -> None:
    req, plan = request_dict("host-tight"), plan_dict("host-tight.valid")
    job_of(req, "ddp")["remaining_work"] = 7200.0
    job_of(req, "prep")["remaining_work"] = 0.5  # R = max(0.5, 1) = 1 s
    req["policy"]["objective"] = "jct"
    jct = 1.16 * 3600 / 7200 + 1.16 + 0.21 * 3600 / 1
    assert recompute_objective(as_request(req), as_plan(plan)) == pytest.approx(jct)
    req["policy"]["objective"] = "makespan"
    mk = 4 * 1.16 * 2 + 0.5 * 1.16 + 0.25 * 0.21 / 3600
    assert recompute_objective(as_request(req), as_plan(plan)) == pytest.approx(mk)


def test_fairness_min_share_by_hand() -> None:
    req, plan = request_dict("host-tight"), plan_dict("host-tight.valid")
    req["policy"]["objective"] = "fairness"
    # ml: ddp placed at its best value -> 1. data: etl (0.58 of 0.58) + prep on a T4
    # (0.0525 of its best 0.29 on an L40S).
    data = (0.5 * 1.16 + 0.25 * 0.21) / (0.5 * 1.16 + 0.25 * 1.16)
    assert recompute_objective(as_request(req), as_plan(plan)) == pytest.approx(data)


# ------------------------------------------------------------------ against solver.build


def _rebuild(stem: str, name: str) -> tuple[PlanRequest, Plan]:
    req = PlanRequest.model_validate(load_json(request_path(stem)))
    fixture = Plan.model_validate(load_json(PLANS / f"{name}.plan.json"))
    result = HeuristicResult(placements={a.job: list(a.placements) for a in fixture.assignments})
    return req, build_plan(req, result, status="heuristic", solver="test")


@pytest.mark.parametrize("name", ["small-mixed.valid", "mig-puzzle.valid",
                                  "mig-puzzle.valid-partial", "host-tight.valid"])
def test_build_plan_output_is_valid(name: str) -> None:
    req, plan = _rebuild(name.split(".")[0], name)
    assert validate_plan(req, plan) == []


def test_build_plan_keeps_broken_placements_broken() -> None:
    req, plan = _rebuild("small-mixed", "small-mixed.invalid-whole_gpu")
    assert rules_of(validate_plan(req, plan)) == {"whole_gpu"}


# ------------------------------------------------------------------ robustness

NAMES = st.sampled_from(["a100-node-1", "v100-node-1", "h100-node-1", "nowhere"])
PROFILES = st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb", "1g.5gb", "zz"])
MIG = st.builds(lambda p, s: {"profile": p, "start": s}, PROFILES, st.integers(0, 7))
PLACEMENT = st.fixed_dictionaries(
    {"node": NAMES, "gpu": st.integers(0, 9)},
    optional={"mig": MIG, "fraction": st.floats(0.01, 1.0)},
).filter(lambda p: not ("mig" in p and "fraction" in p))
SMALL_MIXED = as_request(request_dict("small-mixed"))
JOBS = st.sampled_from(["llm-finetune", "recsys-train", "bert-serving", "notebook-bob",
                        "whisper-serving", "ghost"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    assignments=st.lists(st.fixed_dictionaries(
        {"job": JOBS, "placements": st.lists(PLACEMENT, max_size=9)}), max_size=8),
    unplaced=st.lists(st.fixed_dictionaries({"job": JOBS, "reason": st.just("time_limit")}),
                      max_size=3),
    changes=st.lists(st.fixed_dictionaries(
        {"node": NAMES, "gpu": st.integers(0, 9), "destroy": st.lists(MIG, max_size=3),
         "create": st.lists(MIG, max_size=3)}), max_size=3),
    names=st.lists(JOBS, max_size=3),
    value=st.floats(allow_nan=True, allow_infinity=True),
    bound=st.none() | st.floats(allow_nan=True),
    gap=st.none() | st.floats(allow_nan=True),
    status=st.sampled_from(["optimal", "feasible", "heuristic", "infeasible"]),
)
def test_validator_never_raises(assignments: list[dict[str, Any]],
                                unplaced: list[dict[str, Any]],
                                changes: list[dict[str, Any]], names: list[str], value: float,
                                bound: float | None, gap: float | None, status: str) -> None:
    plan = Plan.model_validate({
        "status": status, "solver": "fuzz", "objective_value": value, "best_bound": bound,
        "gap": gap, "assignments": assignments, "unplaced": unplaced, "mig_changes": changes,
        "preempted": names, "migrated": names[::-1],
    })
    violations = validate_plan(SMALL_MIXED, plan)
    assert all(isinstance(v, Violation) and v.rule in RULES for v in violations)
    assert all(v.message for v in violations)


def test_non_preemptible_running_job_over_its_limit_is_kept() -> None:
    req = request_dict("quotas-priority")
    etl = job_of(req, "batch-etl")
    etl["preemptible"] = False
    etl["gpus"] = 1
    req["cluster"]["quotas"]["batch"]["limit"]["*"] = 0.5
    plan = plan_dict("quotas-priority.valid")
    replace(plan, "research-train-2", None)
    replace(plan, "batch-etl", list(etl["current"]))
    restat(req, plan)
    assert check(req, plan) == []  # Q1 holds: the excess is grandfathered
    replace(plan, "batch-render-1", [{"node": "a100-node", "gpu": 2}])
    restat(req, plan)
    assert "quota" in rules_of(check(req, plan))


def test_reclaim_by_a_guarantee_is_not_a_priority_violation() -> None:
    # prod (class 100) reclaims research-train-1's GPUs in the valid plan; if prod had no
    # guarantee and the lower class took them, the rule would fire
    req, plan = request_dict("quotas-priority"), plan_dict("quotas-priority.valid")
    assert "research-train-1" in plan["preempted"] and check(req, plan) == []


@pytest.mark.parametrize("objective", ["throughput", "jct", "makespan", "fairness"])
def test_an_elastic_gang_off_its_curve_is_caught_not_raised(objective: str) -> None:
    # A plan posted to /v1/validate may put an elastic gang on a size its speedup curve
    # does not list (3 here): E1 catches it, and the objective (no progress there, a
    # term of 0) is still computed; the time-based objectives once divided by zero.
    a100 = "A100-SXM4-80GB"
    req = PlanRequest.model_validate({
        "cluster": {"nodes": [{"name": "n0", "gpus": [{"index": g, "model": a100}
                                                      for g in range(4)]}]},
        "jobs": [{"name": "e", "gpus": 2, "remaining_work": 3600,
                  "elastic": {"min_gpus": 1, "max_gpus": 4,
                              "speedup": {"1": 1.0, "2": 1.9, "4": 2.6}}}],
        "policy": {"objective": objective}})
    built = build_plan(req, HeuristicResult({"e": [Placement(node="n0", gpu=g)
                                                   for g in range(2)]}, {}),
                       status="heuristic", solver="heuristic")
    data = built.model_dump(mode="json")
    (gang,) = [a for a in data["assignments"] if a["job"] == "e"]
    gang["placements"].append(dict(gang["placements"][0], gpu=2))
    off = Plan.model_validate(data)
    assert "elastic" in rules_of(validate_plan(req, off))
    assert math.isfinite(recompute_objective(req, off))
