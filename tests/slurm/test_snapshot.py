"""`sinfo --json` + `squeue --json` -> PlanRequest, on the recorded output and variants."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api.importing import SnapshotError
from api.slurm import build_snapshot
from api.slurm.snapshot import Snapshot
from models import Instance, MigInstance, Placement
from solver import plan
from solver.validate import validate_plan
from tests.slurm.conftest import job_like, load


def _node(sinfo: dict[str, Any], **changes: Any) -> dict[str, Any]:
    node: dict[str, Any] = copy.deepcopy(sinfo["nodes"][0])
    node.update(changes)
    return node


def _accounted(snap: Snapshot, squeue: dict[str, Any]) -> None:
    """Every pending or running GPU job is in the request or in the issues."""
    names = {j.name.split("#")[0].split("_")[0] for j in snap.request.jobs}
    issues = {i.object for i in snap.issues}
    for job in squeue["jobs"]:
        if job["job_state"] in ("PENDING", "RUNNING"):
            jid = str(job["job_id"])
            assert jid in names or f"job/{jid}" in issues, jid


def test_recorded_cluster(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    snap = build_snapshot(sinfo, squeue)
    (node,) = snap.request.cluster.nodes
    assert node.name == "vm" and node.schedulable
    whole = [g for g in node.gpus if not g.mig_enabled]
    assert [(g.index, g.model) for g in whole] == [(0, "A100-SXM4-40GB"), (1, "A100-SXM4-40GB")]
    (mig,) = [g for g in node.gpus if g.mig_enabled]
    assert mig.index == 2 and len(mig.mig_instances) == 7
    # 2 CPUs, both allocated to the imported running jobs: nothing foreign to subtract.
    assert node.cpu_millicores == 2000 and node.memory_gib == pytest.approx(4000 / 1024)
    jobs = {j.name: j for j in snap.request.jobs}
    assert jobs["1"].gpus == 1 and jobs["1"].current == [Placement(node="vm", gpu=0)]
    assert not jobs["1"].preemptible
    # Job 2 holds three 1g.5gb devices (IDX 2-4): three fixed parts on the MIG GPU.
    parts = [jobs[f"2#{k}"] for k in range(3)]
    assert [p.current[0].mig for p in parts if p.current] == [
        MigInstance(profile="1g.5gb", start=s) for s in range(3)]
    assert all(p.mig_profile == "1g.5gb" and not p.preemptible for p in parts)
    pending = jobs["3"]
    assert (pending.gpus, pending.allowed_models, pending.current) == (
        2, ["A100-SXM4-40GB"], None)
    assert pending.cpu_millicores == 1000 and pending.submitted_at == 1795985246
    assert pending.tenant == "root"   # no account without accounting: the user
    assert {i.object for i in snap.issues} == {"node/vm", "job/2"}
    assert not any(i.skipped for i in snap.issues)
    _accounted(snap, squeue)
    result = plan(snap.request)
    assert validate_plan(snap.request, result) == []
    assert [(u.job, u.reason) for u in result.unplaced] == [("3", "insufficient_capacity")]


def test_drained_node_takes_no_new_job(squeue: dict[str, Any]) -> None:
    sinfo = load("sinfo_drained_22.05.json")
    snap = build_snapshot(sinfo, load("squeue_array_multinode_22.05.json"))
    (node,) = snap.request.cluster.nodes
    assert sinfo["nodes"][0]["state_flags"] == ["DRAIN"] and not node.schedulable
    result = plan(snap.request)
    assert result.assignments == [] and len(result.unplaced) == len(snap.request.jobs)


@pytest.mark.parametrize("state", [
    {"state": "down", "state_flags": ["NOT_RESPONDING"]},
    {"state": "idle", "state_flags": ["RESERVED"]},
    {"state": "mixed", "state_flags": ["DRAIN"]},           # draining
    {"state": ["IDLE", "MAINTENANCE"]},                     # 23.02+ shape
])
def test_unschedulable_states(sinfo: dict[str, Any], state: dict[str, Any]) -> None:
    sinfo["nodes"] = [_node(sinfo, **state)]
    snap = build_snapshot(sinfo, {"jobs": []})
    assert not snap.request.cluster.nodes[0].schedulable


def test_array_multinode_and_per_gpu_requests() -> None:
    squeue = load("squeue_array_multinode_22.05.json")
    snap = build_snapshot(load("sinfo_22.05.json"), squeue)
    jobs = {j.name: j for j in snap.request.jobs}
    # `--array=0-3%2`: at most 2 tasks run at once, so 2 are planned (and it is said).
    assert {n for n in jobs if n.startswith("22_")} == {"22_0", "22_1"}
    assert jobs["22_0"].mig_profile == "1g.5gb"
    assert any(i.object == "job/22" and "2 planned" in i.message for i in snap.issues)
    # `-N2 --gres=gpu:2`: a gang of 4 over 2 nodes.
    assert (jobs["23"].gpus, jobs["23"].single_node) == (4, False)
    # `--gpus=2 --mem-per-gpu=50 --cpus-per-gpu=1`.
    assert (jobs["24"].gpus, jobs["24"].cpu_millicores) == (2, 2000)
    assert jobs["24"].host_memory_gib == pytest.approx(100 / 1024)
    _accounted(snap, squeue)


def test_array_tasks_beside_running_ones(squeue: dict[str, Any]) -> None:
    base = load("squeue_array_multinode_22.05.json")["jobs"][0]
    pending = dict(base, array_task_string="2-9%3")
    running = job_like(squeue, 0, job_id=40, array_job_id=22, array_task_id=0)
    snap = build_snapshot(load("sinfo_22.05.json"),
                          {"jobs": [running, pending, *squeue["jobs"][1:]]})
    names = {j.name for j in snap.request.jobs}
    assert "22_0" in names                      # the running task
    assert {n for n in names if n.startswith("22_") and n != "22_0"} == {"22_2", "22_3"}


def test_gres_with_sockets_reads_like_without(sinfo: dict[str, Any],
                                              squeue: dict[str, Any]) -> None:
    plain = build_snapshot(sinfo, squeue).request
    sinfo["nodes"] = [_node(sinfo, gres="gpu:a100:2(S:0-1),gpu:1g.5gb:7(S:0)")]
    assert build_snapshot(sinfo, squeue).request == plain


def test_autodetected_mig_types(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    gres = "gpu:nvidia_a100-sxm4-40gb:1,gpu:nvidia_a100_3g.20gb:2,gpu:nvidia_a100_1g.5gb:1"
    sinfo["nodes"] = [_node(sinfo, gres=gres, alloc_cpus=1, alloc_memory=100,
                            gres_used="gpu:nvidia_a100_3g.20gb:1(IDX:2)")]
    running = job_like(squeue, 0, gres_detail=["gpu:nvidia_a100_3g.20gb:1(IDX:2)"],
                       tres_per_node="gres:gpu:nvidia_a100_3g.20gb:1")
    pending = job_like(squeue, 2, tres_per_node="gres:gpu:nvidia_a100_1g.5gb:1")
    snap = build_snapshot(sinfo, {"jobs": [running, pending]})
    node = snap.nodes["vm"]
    # Two 3g.20gb fill the memory slices of one A100: the 1g.5gb is on a second GPU.
    migs = [g for g in node.gpus if g.mig_enabled]
    assert [(g.index, g.instances) for g in migs] == [
        (1, [Instance("3g.20gb", 0), Instance("3g.20gb", 4)]), (3, [Instance("1g.5gb", 0)])]
    jobs = {j.name: j for j in snap.request.jobs}
    assert jobs["1"].current is not None and jobs["1"].current[0].mig == MigInstance(
        profile="3g.20gb", start=4)
    assert (jobs["3"].mig_profile, jobs["3"].allowed_models) == ("1g.5gb", ["A100-SXM4-40GB"])
    result = plan(snap.request)
    (placed,) = [a for a in result.assignments if a.job == "3"]
    assert placed.placements[0].gpu == 3


def test_unknown_type_is_reported_not_guessed(sinfo: dict[str, Any],
                                              squeue: dict[str, Any]) -> None:
    sinfo["nodes"] = [_node(sinfo, gres="gpu:k80:2,gpu:1g.5gb:7",
                            gres_used="gpu:k80:1(IDX:0),gpu:1g.5gb:3(IDX:2-4)")]
    snap = build_snapshot(sinfo, squeue)
    assert snap.request.cluster.nodes == []
    lines = {i.object: i for i in snap.issues}
    assert lines["node/vm"].skipped and "--gres-type k80=MODEL" in lines["node/vm"].message
    assert lines["job/1"].skipped and "not imported" in lines["job/1"].message
    _accounted(snap, squeue)
    # The caller's table maps it.
    snap = build_snapshot(sinfo, squeue, gres_types={"k80": "T4-16GB"})
    assert snap.request.cluster.nodes[0].gpus[0].model == "T4-16GB"


def test_pending_jobs_that_cannot_be_planned(squeue: dict[str, Any],
                                             sinfo: dict[str, Any]) -> None:
    jobs = [
        job_like(squeue, 2, job_id=10, tres_per_node="gres:gpu:1g.5gb:2"),
        job_like(squeue, 2, job_id=11, tres_per_node="gres:gpu:a100:1,gres:gpu:1g.5gb:1"),
        job_like(squeue, 2, job_id=12, tres_per_node="gres:gpu:k80:1"),
        job_like(squeue, 2, job_id=13, state_reason="Dependency"),
        job_like(squeue, 2, job_id=14, tres_per_node="", tres_per_job="gres:gpu:1",
                 tres_per_task="gres:gpu:1"),
        job_like(squeue, 2, job_id=15, tres_per_node=""),          # no GPU: not ours
        job_like(squeue, 2, job_id=16, job_state="COMPLETED"),   # finished: not ours
        job_like(squeue, 2, job_id=17, tres_per_node="", required_nodes="n[1-"),  # CPU job
    ]
    snap = build_snapshot(sinfo, {"jobs": jobs})
    assert snap.request.jobs == []
    skipped = {i.object: i.message for i in snap.issues if i.skipped}
    assert set(skipped) == {"job/10", "job/11", "job/12", "job/13", "job/14"}
    assert "one instance" in skipped["job/10"] and "several GPU types" in skipped["job/11"]
    assert "Dependency" in skipped["job/13"]
    # Those that could start get gpuplan's reason as a comment; the dependent one not.
    assert set(snap.left_out) == {"10", "11", "12", "14"}


def test_gpus_in_use_by_unknown_jobs_are_withheld(sinfo: dict[str, Any],
                                                  squeue: dict[str, Any]) -> None:
    sinfo["nodes"] = [_node(sinfo, gres_used="gpu:a100:2(IDX:0-1),gpu:1g.5gb:3(IDX:2-4)")]
    snap = build_snapshot(sinfo, squeue)
    gpus = {g.index: g for g in snap.request.cluster.nodes[0].gpus}
    assert not gpus[1].healthy and gpus[0].healthy
    assert any("marked unhealthy" in i.message for i in snap.issues)


def test_slurm_23_shapes(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    """Slurm 23.02+ prints states as lists and numbers as {set, infinite, number}."""
    def num(v: Any) -> Any:
        return {"set": True, "infinite": False, "number": v}

    sinfo["nodes"] = [_node(sinfo, state=["MIXED"], cpus=num(2), real_memory=num(4000))]
    jobs = [job_like(squeue, i, job_state=[j["job_state"]], submit_time=num(j["submit_time"]),
                     memory_per_node=num(j["memory_per_node"]),
                     tres_per_node=j["tres_per_node"].replace("gres:", "gres/")
                     .replace(":1", "=1").replace(":2", "=2").replace(":3", "=3"))
            for i, j in enumerate(squeue["jobs"])]
    new = build_snapshot(sinfo, {"jobs": jobs}).request
    assert new == build_snapshot(load("sinfo_22.05.json"), squeue).request


def test_partitions_restrict_jobs(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    sinfo["nodes"] = [
        _node(sinfo, gres_used="gpu:a100:0(IDX:N/A)", partitions=["debug"], alloc_cpus=0,
              alloc_memory=0),
        _node(sinfo, name="vm2", gres="gpu:t4:2", gres_used="gpu:t4:0(IDX:N/A)",
              partitions=["cheap"], alloc_cpus=0, alloc_memory=0)]
    pending = job_like(squeue, 2, partition="cheap", tres_per_node="gres:gpu:1")
    snap = build_snapshot(sinfo, {"jobs": [pending]})
    (job,) = snap.request.jobs
    assert job.allowed_models == ["T4-16GB@cheap"]
    result = plan(snap.request)
    assert result.assignments[0].placements[0].node == "vm2"


@pytest.mark.parametrize(("sinfo", "squeue", "where"), [
    ({"nodes": {}}, {"jobs": []}, "nodes"),
    ([], {"jobs": []}, "nodes"),
    ({"nodes": []}, {"items": []}, "jobs"),
])
def test_bad_input_is_an_error(sinfo: object, squeue: object, where: str) -> None:
    with pytest.raises(SnapshotError) as err:
        build_snapshot(sinfo, squeue)
    assert err.value.loc == (where,)


def test_weights_from_qos_and_priority(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    jobs = [job_like(squeue, 2, job_id=10, priority=100, qos="normal"),
            job_like(squeue, 2, job_id=11, priority=300, qos="high"),
            job_like(squeue, 2, job_id=12, priority=0, qos="high",
                     state_reason="JobHeldUser")]
    plain = build_snapshot(sinfo, {"jobs": jobs})
    assert [j.weight for j in plain.request.jobs] == [1.0, 1.0, 1.0]
    snap = build_snapshot(sinfo, {"jobs": jobs}, qos_weights={"high": 4.0},
                          priority_weight=1.0)
    # 10 is the lowest priority (x1), 11 the highest (x2); 12 is held (priority 0: x1).
    assert [j.weight for j in snap.request.jobs] == [1.0, 8.0, 4.0]


def test_gpu_sharing_gres_is_reported(sinfo: dict[str, Any], squeue: dict[str, Any]) -> None:
    sinfo["nodes"] = [_node(sinfo, gres="gpu:a100:2,gpu:1g.5gb:7,shard:a100:8")]
    shard = job_like(squeue, 2, job_id=9, tres_per_node="gres:shard:2")
    snap = build_snapshot(sinfo, {"jobs": [*squeue["jobs"], shard]})
    messages = {i.object: i.message for i in snap.issues}
    assert any("shard GRES not modeled" in i.message for i in snap.issues
               if i.object == "node/vm")
    assert "sharing GRES (shard)" in messages["job/9"] and "9" in snap.left_out


def test_running_multi_node_job_fits_its_nodes(sinfo: dict[str, Any],
                                               squeue: dict[str, Any]) -> None:
    """Slurm splits a job's CPUs as it likes; the planner over GPUs: capacity covers both."""
    sinfo["nodes"] = [
        _node(sinfo, gres_used="gpu:a100:1(IDX:0)"),
        _node(sinfo, name="vm2", gres="gpu:a100:4", gres_used="gpu:a100:3(IDX:0-2)")]
    gang = job_like(squeue, 0, nodes="vm,vm2", node_count=2, cpus=4, memory_per_node=100,
                    tres_per_node="", tres_per_job="gres:gpu:a100:4",
                    gres_detail=["gpu:a100:1(IDX:0)", "gpu:a100:3(IDX:0-2)"])
    snap = build_snapshot(sinfo, {"jobs": [gang]})
    (job,) = snap.request.jobs
    assert job.gpus == 4 and not job.single_node
    cpu = {n.name: n.cpu_millicores for n in snap.request.cluster.nodes}
    # vm2 has 2 CPUs, Slurm gave the job 2 there; the planner charges 3 of its 4 to vm2.
    assert cpu == {"vm": 2000, "vm2": 3000}
    result = plan(snap.request)
    assert validate_plan(snap.request, result) == [] and result.assignments
