"""A Plan -> scontrol actions (dry run), and how `execute` runs them."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

from api.slurm import build_snapshot, execute, export_plan
from api.slurm.snapshot import Snapshot
from models import Assignment, MigChange, MigInstance, Placement, Plan, Unplaced
from solver import plan as make_plan
from tests.slurm.conftest import job_like


def _plan(*assignments: tuple[str, list[Placement]], unplaced: Sequence[str] = (),
          **extra: Any) -> Plan:
    return Plan(status="heuristic", solver="test", objective_value=0.0,
                assignments=[Assignment(job=j, placements=p) for j, p in assignments],
                unplaced=[Unplaced(job=j, reason="insufficient_capacity", detail="full")
                          for j in unplaced], **extra)


def _idle(sinfo: dict[str, Any], **changes: Any) -> dict[str, Any]:
    node: dict[str, Any] = copy.deepcopy(sinfo["nodes"][0])
    node.update({"gres_used": "gpu:a100:0(IDX:N/A),gpu:1g.5gb:0(IDX:N/A)", "alloc_cpus": 0,
                 "alloc_memory": 0, **changes})
    return node


@pytest.fixture
def two_nodes(sinfo: dict[str, Any]) -> dict[str, Any]:
    """vm (2 a100 + 7 1g.5gb) and vm2 (4 a100), idle."""
    sinfo["nodes"] = [_idle(sinfo), _idle(sinfo, name="vm2", gres="gpu:a100:4",
                                          gres_used="gpu:a100:0(IDX:N/A)", cpus=8)]
    return sinfo


def _lines(snap: Snapshot, plan: Plan) -> list[str]:
    return [a.line() for a in export_plan(plan, snap).actions]


def test_recorded_plan_comments_the_left_out_job(sinfo: dict[str, Any],
                                                 squeue: dict[str, Any]) -> None:
    snap = build_snapshot(sinfo, squeue)
    plan = make_plan(snap.request)
    (action,) = export_plan(plan, snap).actions
    assert action.argv[:3] == ["scontrol", "update", "JobId=3"]
    comment = action.argv[3].removeprefix("Comment=")
    assert comment.startswith("gpuplan: insufficient_capacity")
    # Once the comment is there, the same plan asks for nothing more.
    squeue["jobs"][2]["comment"] = comment
    assert export_plan(plan, build_snapshot(sinfo, squeue)).actions == []


def test_held_job_is_pinned_to_type_and_released(two_nodes: dict[str, Any],
                                                 squeue: dict[str, Any]) -> None:
    held = job_like(squeue, 2, state_reason="JobHeldUser", tres_per_node="gres:gpu:2")
    snap = build_snapshot(two_nodes, {"jobs": [held]})
    plan = _plan(("3", [Placement(node="vm", gpu=0), Placement(node="vm", gpu=1)]))
    assert _lines(snap, plan) == [
        "scontrol update JobId=3 TresPerNode= TresPerJob= TresPerTask= TresPerSocket=",
        "scontrol update JobId=3 NodeList=vm TresPerNode=gres:gpu:a100:2 "
        "'Comment=gpuplan: placed vm: gres:gpu:a100:2'",
        "scontrol release 3",
        "# if the pin fails: scontrol update JobId=3 TresPerNode=gres:gpu:2",
    ]


def test_pending_job_not_held_is_held_first(two_nodes: dict[str, Any],
                                            squeue: dict[str, Any]) -> None:
    snap = build_snapshot(two_nodes, {"jobs": [job_like(squeue, 2)]})   # reason Resources
    lines = _lines(snap, _plan(("3", [Placement(node="vm2", gpu=2), Placement(node="vm2",
                                                                               gpu=3)])))
    assert lines[0] == "scontrol hold 3" and lines[-2] == "scontrol release 3"
    assert "NodeList=vm2 TresPerNode=gres:gpu:a100:2" in lines[2]


def test_mig_job_is_pinned_to_its_slurm_type(sinfo: dict[str, Any],
                                             squeue: dict[str, Any]) -> None:
    sinfo["nodes"] = [_idle(sinfo, gres="gpu:nvidia_a100_1g.5gb:7",
                            gres_used="gpu:nvidia_a100_1g.5gb:0(IDX:N/A)")]
    job = job_like(squeue, 2, state_reason="JobHeldUser", tres_per_node="gres:gpu:1")
    job["tres_per_node"] = "gres:gpu:nvidia_a100_1g.5gb:1"
    snap = build_snapshot(sinfo, {"jobs": [job]})
    mig = MigInstance(profile="1g.5gb", start=3)
    lines = _lines(snap, _plan(("3", [Placement(node="vm", gpu=0, mig=mig)])))
    assert "TresPerNode=gres:gpu:nvidia_a100_1g.5gb:1" in lines[1]


def test_multi_node_job_pins_every_node_or_none(two_nodes: dict[str, Any],
                                                squeue: dict[str, Any]) -> None:
    two_nodes["nodes"][0]["gres"] = "gpu:a100:4"
    two_nodes["nodes"][0]["gres_used"] = "gpu:a100:0(IDX:N/A)"
    job = job_like(squeue, 2, node_count=2, state_reason="JobHeldUser",
                   tres_per_node="gres:gpu:a100:2")
    snap = build_snapshot(two_nodes, {"jobs": [job]})
    even = _plan(("3", [Placement(node=n, gpu=g) for n in ("vm", "vm2") for g in (0, 1)]))
    assert "NodeList=vm,vm2 TresPerNode=gres:gpu:a100:2" in _lines(snap, even)[1]
    uneven = _plan(("3", [Placement(node="vm", gpu=g) for g in (0, 1, 2)]
                    + [Placement(node="vm2", gpu=0)]))
    out = export_plan(uneven, snap)
    assert [a.kind for a in out.actions] == ["comment"]
    assert "Slurm gives every node the same GPUs" in out.warnings[0]


def test_per_job_gpus_over_nodes(two_nodes: dict[str, Any], squeue: dict[str, Any]) -> None:
    job = job_like(squeue, 2, node_count=2, state_reason="JobHeldUser", tres_per_node="",
                   tres_per_job="gres:gpu:3")
    snap = build_snapshot(two_nodes, {"jobs": [job]})
    split = _plan(("3", [Placement(node="vm", gpu=0), Placement(node="vm2", gpu=0),
                         Placement(node="vm2", gpu=1)]))
    assert "NodeList=vm,vm2 TresPerJob=gres:gpu:a100:3" in _lines(snap, split)[1]


def test_excluded_node_is_not_pinned(two_nodes: dict[str, Any], squeue: dict[str, Any]) -> None:
    job = job_like(squeue, 2, excluded_nodes="vm2", state_reason="JobHeldUser")
    snap = build_snapshot(two_nodes, {"jobs": [job]})
    out = export_plan(_plan(("3", [Placement(node="vm2", gpu=0), Placement(node="vm2",
                                                                            gpu=1)])), snap)
    assert [a.kind for a in out.actions] == ["comment"] and "excluded" in out.warnings[0]


def test_preempted_and_migrated_jobs_are_requeued_held(sinfo: dict[str, Any],
                                                       squeue: dict[str, Any]) -> None:
    snap = build_snapshot(sinfo, squeue, requeue_running=True)
    plan = _plan(("1", [Placement(node="vm", gpu=1)]), migrated=["1"], preempted=["2#0"])
    lines = _lines(snap, plan)
    # Parts of a job are never requeued on their own; job 3 is not mentioned: no action.
    assert lines == ["scontrol requeuehold 1"]


def test_mig_changes_are_operator_steps(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    held = job_like(squeue, 2, state_reason="JobHeldUser", tres_per_node="gres:gpu:3g.20gb:1")
    sinfo["nodes"] = [_idle(sinfo)]
    snap = build_snapshot(sinfo, {"jobs": [held]})
    new = MigInstance(profile="3g.20gb", start=4)
    gone = [MigInstance(profile="1g.5gb", start=s) for s in range(4, 7)]
    plan = _plan(("3", [Placement(node="vm", gpu=2, mig=new)]),
                 mig_changes=[MigChange(node="vm", gpu=2, destroy=gone, create=[new])])
    out = export_plan(plan, snap)
    kinds = [a.kind for a in out.actions]
    assert kinds == ["comment", "operator", "operator", "operator", "operator"]
    assert "waiting for its MIG reconfiguration" in out.actions[0].argv[-1]
    assert out.actions[1].argv[-2:] == ["State=DRAIN", "Reason=gpuplan: MIG reconfiguration"]
    assert "-cgi 1g.5gb,1g.5gb,1g.5gb,1g.5gb,3g.20gb -C" in out.actions[2].note
    ran: list[list[str]] = []

    def runner(argv: Sequence[str]) -> tuple[int, str]:
        ran.append(list(argv))
        return 0, ""

    execute(out, runner)
    assert ran == [out.actions[0].argv]      # operator steps are never run


def test_left_out_jobs_get_the_reason(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    bad = job_like(squeue, 2, tres_per_node="gres:gpu:1g.5gb:2")
    snap = build_snapshot(sinfo, {"jobs": [bad]})
    (action,) = export_plan(_plan(), snap).actions
    assert action.argv[-1].startswith("Comment=gpuplan: not planned: asks for 2 MIG devices")


def test_execute_stops_a_job_at_its_first_failure(two_nodes: dict[str, Any],
                                                  squeue: dict[str, Any]) -> None:
    jobs = [job_like(squeue, 2, job_id=5, state_reason="JobHeldUser"),
            job_like(squeue, 2, job_id=6, state_reason="JobHeldUser")]
    snap = build_snapshot(two_nodes, {"jobs": jobs})
    plan = _plan(("5", [Placement(node="vm", gpu=0), Placement(node="vm", gpu=1)]),
                 ("6", [Placement(node="vm2", gpu=0), Placement(node="vm2", gpu=1)]))
    out = export_plan(plan, snap)
    ran: list[str] = []

    def runner(argv: Sequence[str]) -> tuple[int, str]:
        ran.append(" ".join(argv))
        return (1, "Requested node configuration is not available") \
            if "NodeList=vm " in " ".join(argv) + " " else (0, "")

    results = execute(out, runner)
    assert [(r.action.job, r.action.kind, r.returncode) for r in results] == [
        ("5", "clear", 0), ("5", "pin", 1), ("5", "restore", 0),    # held by its user: stays
        ("6", "clear", 0), ("6", "pin", 0), ("6", "release", 0)]
    assert "scontrol release 5" not in ran


def test_a_job_gpuplan_held_is_released_after_a_failure(two_nodes: dict[str, Any],
                                                        squeue: dict[str, Any]) -> None:
    snap = build_snapshot(two_nodes, {"jobs": [job_like(squeue, 2)]})   # not held
    out = export_plan(_plan(("3", [Placement(node="vm", gpu=0), Placement(node="vm",
                                                                           gpu=1)])), snap)
    results = execute(out, lambda argv: (1, "refused") if "NodeList=vm" in argv else (0, ""))
    assert [r.action.kind for r in results] == ["hold", "clear", "pin", "restore", "release"]
    assert [r.returncode for r in results] == [0, 0, 1, 0, 0]
    assert results[3].action.argv[-1] == "TresPerNode=gres:gpu:a100:2"   # as it was
    assert [r.action.kind for r in execute(out, lambda argv: (0, ""))] == [
        "hold", "clear", "pin", "release"]


def test_untyped_gpus_are_pinned_untyped(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    sinfo["nodes"] = [_idle(sinfo, gres="gpu:4", gres_used="gpu:1(IDX:0)")]
    running = job_like(squeue, 0, gres_detail=["gpu:1(IDX:0)"], tres_per_node="gres:gpu:1")
    held = job_like(squeue, 2, state_reason="JobHeldUser", tres_per_node="gres:gpu:2")
    snap = build_snapshot(sinfo, {"jobs": [running, held]}, gres_types={"gpu": "T4-16GB"})
    assert {g.model for g in snap.request.cluster.nodes[0].gpus} == {"T4-16GB"}
    lines = _lines(snap, make_plan(snap.request))
    assert "NodeList=vm TresPerNode=gres:gpu:2" in lines[1]
