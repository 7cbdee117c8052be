"""`afs_elastic` (AFS-L): its allocation by hand, packed placement, a Pollux replay."""

from __future__ import annotations

import pytest

from benchmarks.paths import data_dir
from benchmarks.sim.cluster import load_cluster
from benchmarks.sim.engine import JobRun, SimConfig, Simulator
from benchmarks.sim.occupancy import Occupancy
from benchmarks.sim.policies import AfsElastic
from benchmarks.sim.policies.afs_elastic import afs_sizes, next_step
from benchmarks.sim.policies.base import packed_fit
from benchmarks.sim.workloads import load_trace
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Gpu, Job, Node, Placement

T4 = "T4-16GB"


def _run(job: Job, remaining: float, submit: float = 0.0) -> JobRun:
    return JobRun(trace=TraceJob(job, submit, remaining), remaining=remaining, size=1.0)


def _elastic(name: str, gpus: int, curve: dict[int, float]) -> Job:
    return Job.model_validate({
        "name": name, "gpus": gpus, "single_node": False, "throughput": {T4: 1.0},
        "elastic": {"min_gpus": min(curve), "max_gpus": max(curve),
                    "speedup": {str(n): s for n, s in curve.items()}}})


def test_afs_sizes_by_hand() -> None:
    # A: elastic 1/2/4 GPUs at speedups 1, 1.8, 3.0, 100 s left on 1 GPU (W = 100).
    # B: fixed 1 GPU, 50 s left (W = 50). C: fixed 2 GPUs, 100 s left on 2 (W = 200).
    a = _run(_elastic("a", 1, {1: 1.0, 2: 1.8, 4: 3.0}), 100.0)
    b = _run(Job(name="b", gpus=1, throughput={T4: 1.0}), 50.0)
    c = _run(Job(name="c", gpus=2, throughput={T4: 1.0}), 100.0)
    # Scores: B 0->1: 1/50 = 0.02; A 0->1: 1/100 = 0.01; A 1->2: 0.8/100 = 0.008;
    # C 0->2: (2/2)/200 = 0.005; A 2->4: (1.2/2)/100 = 0.006.
    # 4 GPUs: B (3 left), A to 1 (2), A to 2 (1); A 2->4 and C need 2: stop.
    assert afs_sizes([a, b, c], 4) == {"a": 2, "b": 1}
    # 6 GPUs: B, A->1, A->2 (3 left), A->4 (1 left, score 0.006 > C's 0.005); C needs 2.
    assert afs_sizes([a, b, c], 6) == {"a": 4, "b": 1}
    # 7 GPUs: then C gets its 2.
    assert afs_sizes([a, b, c], 7) == {"a": 4, "b": 1, "c": 2}


def test_next_step_skips_sizes_slower_than_the_current_one() -> None:
    r = _run(_elastic("a", 6, {1: 1.0, 4: 3.8, 6: 2.4, 9: 5.0}), 10.0)
    assert [next_step(r, n) for n in (0, 1, 4, 6, 9)] == [1, 4, 9, 9, None]


def test_packed_fit_uses_the_fewest_nodes() -> None:
    cluster = Cluster(nodes=[Node(name=f"n{i}", gpus=[Gpu(index=k, model=T4)
                                                       for k in range(4)])
                             for i in range(3)])
    occ = Occupancy(cluster)
    occ.add(Job(name="x", gpus=3, throughput={T4: 1.0}),
            [Placement(node="n0", gpu=k) for k in range(3)])
    job = _elastic("a", 5, {1: 1.0, 5: 4.0})
    got = packed_fit(occ, job, 5)
    assert got is not None
    assert sorted({p.node for p in got}) == ["n1", "n2"]
    assert packed_fit(occ, job, 10) is None
    one = Job(name="b", gpus=1, throughput={T4: 1.0})
    assert packed_fit(occ, one, 1) == [Placement(node="n0", gpu=3)]


@pytest.mark.skipif(not (data_dir() / "pollux").is_dir(),
                    reason="../shared/data/pollux is not available")
def test_afs_replays_a_pollux_workload_and_resizes() -> None:
    trace = load_trace("pollux:2", limit=40, gpus_per_node=4)
    res = Simulator(load_cluster("pollux-64"), trace, AfsElastic(),
                    SimConfig(round_s=60.0)).run()
    assert all(r.finish is not None for r in res.jobs)
    assert sum(r.resizes for r in res.jobs) > 0


def test_afs_places_shared_and_mig_jobs_after_the_gangs() -> None:
    from benchmarks.sim.workloads import load_trace as load

    trace = load("synthetic", limit=40, seed=3, max_gang=8, gpus_per_node=4)
    assert {tj.job.shape for tj in trace} == {"whole", "share", "mig"}
    cluster = load_cluster("hetero-24")
    res = Simulator(cluster, trace, AfsElastic(), SimConfig()).run()
    assert all(r.finish is not None for r in res.jobs)
