"""`gpuplan`'s growth of elastic gangs into the GPUs a round leaves idle, by hand."""

from __future__ import annotations

import pytest

from benchmarks.sim.engine import SimConfig, Simulator
from benchmarks.sim.occupancy import Occupancy
from benchmarks.sim.policies import GpuPlan
from benchmarks.sim.policies.gpuplan import grow_placement
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Gpu, Job, Node, Placement

T4 = "T4-16GB"
ONE_NODE = Cluster(nodes=[Node(name="n0", gpus=[Gpu(index=i, model=T4) for i in range(4)])])


def _trace(work_a: float) -> list[TraceJob]:
    # A: elastic, nominal 2 GPUs, sizes 1, 2, 4 at speedups 1, 2, 2.02; B: fixed, 2 GPUs,
    # 600 s of work. Both arrive at 0: A gets 2 GPUs, B the other 2.
    a = Job.model_validate({
        "name": "a", "gpus": 2, "single_node": False, "throughput": {T4: 1.0},
        "elastic": {"min_gpus": 1, "max_gpus": 4,
                    "speedup": {"1": 1.0, "2": 2.0, "4": 2.02}}})
    b = Job(name="b", gpus=2, throughput={T4: 1.0})
    return [TraceJob(a, 0.0, work_a), TraceJob(b, 0.0, 600.0)]


def _run(work_a: float, grow: bool) -> Simulator:
    policy = GpuPlan(time_limit_s=1.0, aging_s=1e12, grow_idle=grow, deterministic=True)
    sim = Simulator(ONE_NODE, _trace(work_a), policy,
                    SimConfig(round_s=300.0, restart_overhead_s=30.0))
    sim.run()
    return sim


def test_a_long_gang_grows_into_the_gpus_a_completion_frees() -> None:
    # B ends at 600. A then has 10,000 - 600 = 9,400 s left on 2 GPUs (18,800 on one).
    # The plan keeps A on 2: growing to 4 is worth 3600 * (2.02 - 2) / 18,800 = 0.0038 of
    # `jct` value, less than the 0.05 a resize costs, and stays so until fewer than
    # 3600 * 0.02 / 0.05 = 1,440 s of one-GPU work are left. The growth rule: on 4 GPUs A
    # finishes 18,800 / 2 - 18,800 / 2.02 = 93.1 s sooner, more than the 30 s restart.
    grown = _run(10_000.0, grow=True)
    a = grown.runs["a"]
    # Resized at 600, stalled to 630, then 9,400 / 1.01 s at 4 GPUs.
    assert a.finish == pytest.approx(630.0 + 9400.0 / 1.01)
    assert (a.resizes, a.preemptions) == (1, 0)
    assert grown.runs["b"].finish == pytest.approx(600.0)
    # Without the rule A stays on 2 GPUs until the plan itself grows it, at the first
    # round with less than 1,440 s of one-GPU work left (t = 9,300: 18,800 - 2 * 8,700 =
    # 1,400), when the resize no longer pays for its restart: 700 s left on 2 GPUs,
    # stalled to 9,330, then 700 / 1.01 s, later than the 10,000 s it had on 2 GPUs.
    kept = _run(10_000.0, grow=False)
    assert kept.runs["a"].finish == pytest.approx(9330.0 + 700.0 / 1.01)


def test_a_gang_close_to_its_end_does_not_grow() -> None:
    # A has 2,000 - 600 = 1,400 s left on 2 GPUs at 600 (2,800 on one): 4 GPUs would save
    # 2,800 / 2 - 2,800 / 2.02 = 27.7 s, less than the 30 s restart, so the rule does not
    # grow it. From t = 1,500 (one-GPU work 1,000 < 1,440) the plan would, for 0.05 of
    # `jct` value, at a loss of time (1,000 / 2 - 1,000 / 2.02 = 5 s saved < 30): undone,
    # A finishes on 2 GPUs at 2,000.
    sim = _run(2_000.0, grow=True)
    assert sim.runs["a"].finish == pytest.approx(2000.0)
    assert sim.runs["a"].resizes == 0
    # Without the rule: resized at 1,500 with 500 s left on 2 GPUs, stalled to 1,530.
    kept = _run(2_000.0, grow=False)
    assert kept.runs["a"].finish == pytest.approx(1530.0 + 500.0 / 1.01)


def test_grow_placement_fills_the_gangs_nodes_first() -> None:
    cluster = Cluster(nodes=[Node(name=f"n{i}", gpus=[Gpu(index=k, model=T4)
                                                       for k in range(4)])
                             for i in range(3)])
    occ = Occupancy(cluster)
    occ.add(Job(name="x", gpus=2, throughput={T4: 1.0}),
            [Placement(node="n0", gpu=k) for k in range(2)])
    occ.add(Job(name="y", gpus=3, throughput={T4: 1.0}),
            [Placement(node="n2", gpu=k) for k in range(3)])
    pl = [Placement(node="n2", gpu=3)]
    occ.add(Job(name="a", gpus=1, throughput={T4: 1.0}), pl)
    got = grow_placement(occ, pl, 6)
    # n2 has no idle GPU left; then n1 (4 idle) before n0 (2 idle).
    assert got == [pl[0], *(Placement(node="n1", gpu=k) for k in range(4)),
                   Placement(node="n0", gpu=2)]
