"""`heuristics.level_repack.repack_classes`: hand-made cases whose best plans are worked
out by hand (a running gang sent home needs the gang on its GPUs moved to a node that
small jobs leave for another model; two 1-GPU jobs swapping models); the random
never-lower test is in test_level_exchanges.py."""

from __future__ import annotations

from heuristics.level_repack import repack_classes
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.objective import level_values
from tests.heuristics.helpers import node, violations

V100 = "V100-32GB"
A100 = "A100-SXM4-80GB"


def _on(node_name: str, gpus: range) -> list[Placement]:
    return [Placement(node=node_name, gpu=g) for g in gpus]


def _request() -> PlanRequest:
    # Two 2-GPU A100 nodes f0, f1 and a 2-GPU V100 node s0; all jobs of class 100 and
    # tenant a (guaranteed 1 GPU, so the levels apply). Running gang r runs on f0 (speed
    # 2 on A100, 1 on V100); new gang big (3 on A100, 1 on V100); new 1-GPU jobs x, y
    # (1.2 on A100, 1 on V100). Values are speed times GPUs; a move costs 0.5.
    gang = {"gpus": 2, "single_node": True, "tenant": "a", "priority": 100}
    small = {"gpus": 1, "tenant": "a", "priority": 100, "throughput": {A100: 1.2, V100: 1.0}}
    jobs = [{"name": "r", **gang, "throughput": {A100: 2.0, V100: 1.0},
             "current": [{"node": "f0", "gpu": 0}, {"node": "f0", "gpu": 1}]},
            {"name": "big", **gang, "throughput": {A100: 3.0, V100: 1.0}},
            {"name": "x", **small}, {"name": "y", **small}]
    return PlanRequest.model_validate({
        "cluster": {"nodes": [node("f0", A100, 2), node("f1", A100, 2), node("s0", V100, 2)],
                    "quotas": {"a": {"guaranteed": {"*": 1}}}},
        "jobs": jobs, "policy": {"objective": "throughput"}})


def test_repack_sends_a_gang_home_through_a_chain_of_moves() -> None:
    # The plan: big on r's node f0 (6), r moved to s0 (2 - 0.5), x and y on f1 (2.4):
    # 9.9. Sending r home alone would put big on V100 (loses 4, r gains 2.5). Best by
    # hand: r home (4), big on f1 (6), x and y on s0 (2): 12, every A100 GPU to the
    # gangs, which gain most there, and no migration.
    req = _request()
    start = HeuristicResult({"big": _on("f0", range(2)), "r": _on("s0", range(2)),
                             "x": _on("f1", range(1)), "y": _on("f1", range(1, 2))}, {})
    assert violations(req, start) == []
    assert abs(level_values(req, start.placements)[1][1] - 9.9) < 1e-9
    out = repack_classes(req, start)
    assert violations(req, out) == []
    assert out.placements["r"] == _on("f0", range(2))
    assert out.placements["big"] == _on("f1", range(2))
    assert sorted(p.node for n in ("x", "y") for p in out.placements[n]) == ["s0", "s0"]
    (quota, v_quota), (cls, v_cls) = level_values(req, out.placements)
    assert (quota, v_quota, cls) == ("quota", 1.0, "priority 100")
    assert abs(v_cls - 12.0) < 1e-9


def test_repack_changes_nothing_at_the_optimum() -> None:
    req = _request()
    best = HeuristicResult({"r": _on("f0", range(2)), "big": _on("f1", range(2)),
                            "x": _on("s0", range(1)), "y": _on("s0", range(1, 2))}, {})
    assert repack_classes(req, best) is best


def test_two_jobs_of_a_class_swap_models() -> None:
    # A 1-GPU A100 node and a 1-GPU V100 node; class 100 (tenant a guaranteed 1). x is
    # worth 1.0 on A100 and 0.9 on V100, y 2.0 and 1.0; the plan has x on A100, y on
    # V100: 2.0. Best by hand: y on A100, x on V100: 2.9.
    small = {"gpus": 1, "tenant": "a", "priority": 100}
    req = PlanRequest.model_validate({
        "cluster": {"nodes": [node("f0", A100, 1), node("s0", V100, 1)],
                    "quotas": {"a": {"guaranteed": {"*": 1}}}},
        "jobs": [{"name": "x", **small, "throughput": {A100: 1.0, V100: 0.9}},
                 {"name": "y", **small, "throughput": {A100: 2.0, V100: 1.0}}],
        "policy": {"objective": "throughput"}})
    start = HeuristicResult({"x": _on("f0", range(1)), "y": _on("s0", range(1))}, {})
    out = repack_classes(req, start)
    assert violations(req, out) == []
    assert out.placements == {"x": _on("s0", range(1)), "y": _on("f0", range(1))}
    assert abs(level_values(req, out.placements)[1][1] - 2.9) < 1e-9


def test_no_job_moves_onto_a_gpu_only_its_running_job_may_keep() -> None:
    # As above, but the A100 node is not schedulable and y runs there (kept: worth 1.0 on
    # either model); x (2.0 on A100) would gain 1.0 there and y lose 0.5 (its move), yet
    # no new job may go to that node: nothing changes.
    small = {"gpus": 1, "tenant": "a", "priority": 100}
    req = PlanRequest.model_validate({
        "cluster": {"nodes": [node("f0", A100, 1, schedulable=False), node("s0", V100, 1)],
                    "quotas": {"a": {"guaranteed": {"*": 1}}}},
        "jobs": [{"name": "x", **small, "throughput": {A100: 2.0, V100: 1.0}},
                 {"name": "y", **small, "throughput": {A100: 1.0, V100: 1.0},
                  "current": [{"node": "f0", "gpu": 0}]}],
        "policy": {"objective": "throughput"}})
    start = HeuristicResult({"x": _on("s0", range(1)), "y": _on("f0", range(1))}, {})
    assert violations(req, start) == []
    assert repack_classes(req, start) is start
