"""Tiny traces whose JCTs are computed by hand, one policy at a time."""

from __future__ import annotations

import pytest

from benchmarks.sim.engine import SimConfig, Simulator
from benchmarks.sim.occupancy import Occupancy
from benchmarks.sim.policies import FifoFirstFit, GavelMaxMin, GpuPlan, TiresiasLas
from benchmarks.sim.policies.gpuplan import best_fit
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Gpu, Job, MigDemand, Node

V100, H100, A100 = "V100-32GB", "H100-SXM5-80GB", "A100-SXM4-80GB"


def _cluster(*nodes: tuple[str, str, int, bool]) -> Cluster:
    return Cluster(nodes=[Node(name=n, gpus=[Gpu(index=i, model=m, mig_enabled=mig)
                                             for i in range(k)])
                          for n, m, k, mig in nodes])


def _job(name: str, submit: float, work: float, gpus: int = 1,
         speeds: dict[str, float] | None = None) -> TraceJob:
    return TraceJob(Job(name=name, gpus=gpus, throughput=speeds or {V100: 1.0}), submit, work)


def _jcts(cluster: Cluster, trace: list[TraceJob], policy: object,
          config: SimConfig | None = None) -> dict[str, float]:
    res = Simulator(cluster, trace, policy, config).run()  # type: ignore[arg-type]
    return {r.name: round((r.finish or 0.0) - r.submit, 6) for r in res.jobs}


# Two V100s. A (1 GPU, 1000 s) and B (2 GPUs, 200 s) at t=0, C (1 GPU, 100 s) at t=10.
TWO_GPUS = _cluster(("v100-00", V100, 2, False))
ABC = [_job("a", 0, 1000), _job("b", 0, 200, gpus=2), _job("c", 10, 100)]


def test_fifo_firstfit_backfills_without_preempting() -> None:
    # t=0: a on GPU0, b (2 GPUs) does not fit; t=10: c backfills GPU1, done at 110;
    # a done at 1000, then b runs 1000..1200.
    assert _jcts(TWO_GPUS, ABC, FifoFirstFit()) == {"a": 1000.0, "b": 1200.0, "c": 100.0}


def test_tiresias_preempts_the_job_that_passed_its_threshold() -> None:
    # Threshold 500 GPU-s. a runs from 0; c backfills 10..110. At the round of t=710 a has
    # attained 710 >= 500 (queue 1) while b is in queue 0: b preempts a and runs
    # 710..910; a restarts at 910 after the 30 s overhead with 290 s left: done at 1230.
    got = _jcts(TWO_GPUS, ABC, TiresiasLas(thresholds=(500.0,)))
    assert got == {"a": 1230.0, "b": 910.0, "c": 100.0}


def test_restart_overhead_is_configurable() -> None:
    got = _jcts(TWO_GPUS, ABC, TiresiasLas(thresholds=(500.0,)),
                SimConfig(restart_overhead_s=0.0))
    assert got["a"] == 1200.0


# One V100 node listed before one H100 node; the job is 2x faster on the H100.
HETERO = _cluster(("a-v100", V100, 1, False), ("b-h100", H100, 1, False))
FAST = [_job("j", 0, 1000, speeds={V100: 1.0, H100: 2.0})]


def test_fifo_is_blind_to_heterogeneity() -> None:
    assert _jcts(HETERO, FAST, FifoFirstFit()) == {"j": 1000.0}


@pytest.mark.parametrize("policy", [GavelMaxMin(), GpuPlan(time_limit_s=1.0)],
                         ids=["gavel", "gpuplan"])
def test_heterogeneity_aware_policies_pick_the_fast_gpu(policy: object) -> None:
    assert _jcts(HETERO, FAST, policy) == {"j": 500.0}


def test_gpuplan_runs_the_short_job_first() -> None:
    # One GPU; 'a-long' (1000 s) and 'b-short' (100 s) both at t=0. FIFO (ties by name)
    # runs a-long first: 1000 and 1100; Smith's rule runs b-short first: 100 and 1100.
    one = _cluster(("v100-00", V100, 1, False))
    trace = [_job("a-long", 0, 1000), _job("b-short", 0, 100)]
    assert _jcts(one, trace, FifoFirstFit()) == {"a-long": 1000.0, "b-short": 1100.0}
    assert _jcts(one, trace, GpuPlan(time_limit_s=1.0)) == {"a-long": 1100.0,
                                                            "b-short": 100.0}


def test_mig_job_waits_for_the_reconfiguration() -> None:
    # An empty MIG A100: the 1-slice job's instance is created (60 s), then 100 s of work.
    mig = _cluster(("a100-00", A100, 1, True))
    trace = [TraceJob(Job(name="m", kind="inference", mig=MigDemand(compute_slices=1),
                          throughput={A100: 1.0}), 0, 100)]
    res = Simulator(mig, trace, FifoFirstFit()).run()
    assert res.jobs[0].finish == 160.0
    assert res.reconfigurations == 1
    res = Simulator(mig, trace, FifoFirstFit(), SimConfig(mig_reconfig_s=5.0)).run()
    assert res.jobs[0].finish == 105.0


def test_a_completion_starts_a_waiting_job_at_once() -> None:
    # One GPU: b arrives at t=50 while a (100 s) runs; a finishes at 100 and b starts at
    # once (completion with a job waiting and an idle GPU), not at the next round (300).
    one = _cluster(("v100-00", V100, 1, False))
    got = _jcts(one, [_job("a", 0, 100), _job("b", 50, 100)], FifoFirstFit())
    assert got == {"a": 100.0, "b": 150.0}


def test_gpuplan_moves_a_long_job_to_an_idle_faster_gpu() -> None:
    # One V100 and one H100. 's' (2000 s, 2x on the H100) takes the H100 at t=0 (Smith),
    # 'l' (200,000 s, 2x on the H100) the V100; s is done at 1000, a round runs then:
    # l has 199,000 s left: moving to the idle H100 gains only 0.02 in the jct objective
    # (under the 0.05 migration cost), but saves 99,500 s of its run time, so the upgrade
    # pass moves it: 30 s restart, then 99,500 s -> done at 100,530.
    cluster = _cluster(("a-v100", V100, 1, False), ("b-h100", H100, 1, False))
    speeds = {V100: 1.0, H100: 2.0}
    trace = [_job("s", 0, 2000, speeds=speeds), _job("l", 0, 200_000, speeds=speeds)]
    got = _jcts(cluster, trace, GpuPlan(time_limit_s=1.0))
    assert got == {"s": 1000.0, "l": 100_530.0}
    # Without the upgrade pass, l stays on the V100 until its age weight makes the move
    # worth the migration cost in the objective alone.
    late = _jcts(cluster, trace, GpuPlan(time_limit_s=1.0, upgrade_min_s=None))
    assert late["l"] > 100_530.0


def test_gpuplan_backfills_best_fit() -> None:
    cluster = _cluster(("a", V100, 4, False), ("b", V100, 2, False))
    occ = Occupancy(cluster)
    job = Job(name="one", gpus=1, throughput={V100: 1.0})
    assert best_fit(occ, job, [V100])[0].node == "b"  # keeps node a whole for a gang
    pair = Job(name="two", gpus=2, throughput={V100: 1.0})
    occ.add(pair, best_fit(occ, pair, [V100]))
    assert {p.node for p in occ.jobs["two"]} == {"b"}
    assert best_fit(occ, Job(name="four", gpus=4, throughput={V100: 1.0}), [V100]) is not None
