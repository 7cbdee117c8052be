"""The baselines held to the tenants' limits (benchmarks/sim/policies/within_limits.py),
on hand-made traces whose completion times are computed by hand."""

from __future__ import annotations

from benchmarks.sim.engine import SimConfig, SimResult, Simulator
from benchmarks.sim.policies import FifoFirstFit, FifoWithinLimits, SrptWithinLimits
from benchmarks.sim.tenants import limit_time, with_quotas
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Gpu, Job, Node, Quota

V100 = "V100-32GB"
# Three idle V100s; tenant b is guaranteed 1 GPU and limited to 2, a is guaranteed 1.
THREE = with_quotas(
    Cluster(nodes=[Node(name="n0", gpus=[Gpu(index=i, model=V100) for i in range(3)])]),
    {"a": Quota(guaranteed={"*": 1}), "b": Quota(guaranteed={"*": 1}, limit={"*": 2})})


def _job(name: str, tenant: str, submit: float, work: float) -> TraceJob:
    return TraceJob(Job(name=name, tenant=tenant, gpus=1, throughput={V100: 1.0}),
                    submit, work)


# b submits three jobs at t=0: 1000 s, 1000 s and 100 s (in that order).
TRACE = [_job("b1", "b", 0, 1000), _job("b2", "b", 0, 1000), _job("b3", "b", 0, 100)]


def _run(policy: object) -> SimResult:
    return Simulator(THREE, TRACE, policy,  # type: ignore[arg-type]
                     SimConfig(round_s=300.0)).run()


def _jcts(policy: object) -> dict[str, float]:
    return {r.name: round((r.finish or 0.0) - r.submit, 6) for r in _run(policy).jobs}


def test_fifo_firstfit_passes_the_limit() -> None:
    # quota-blind: all three run at once on the three GPUs
    assert _jcts(FifoFirstFit()) == {"b1": 1000.0, "b2": 1000.0, "b3": 100.0}


def test_fifo_within_limits_waits_at_the_limit() -> None:
    # b1 and b2 take b's limit of 2; b3 waits for the first to end, 1000..1100, although
    # a GPU is idle all along
    assert _jcts(FifoWithinLimits()) == {"b1": 1000.0, "b2": 1000.0, "b3": 1100.0}


def test_srpt_within_limits_runs_the_shortest_first() -> None:
    # b3 (100 s) and b1 first (shortest remaining, then arrival); b2 starts when b3 ends
    # at 100 (a completion finds a job waiting and a GPU idle): done at 1100
    assert _jcts(SrptWithinLimits()) == {"b1": 1000.0, "b2": 1100.0, "b3": 100.0}


def test_limit_time_counts_the_wait_at_the_limit() -> None:
    # fifo_limits: b3 waits 0..1000 (rounds at 0, 300, 600, 900; it starts at 1000) with b
    # at its limit of 2 all along, a GPU idle; quota-blind FIFO never makes b wait.
    assert limit_time(_run(FifoWithinLimits()), THREE.quotas) == {
        "b": {"waiting_s": 1000.0, "at_limit_s": 1000.0, "below_idle_s": 0.0}}
    assert limit_time(_run(FifoFirstFit()), THREE.quotas) == {}
    # a's guarantee, b's limit lifted: b3 would have fitted on the idle GPU
    unlimited = {"a": Quota(guaranteed={"*": 1}), "b": Quota(guaranteed={"*": 1})}
    assert limit_time(_run(FifoWithinLimits()), unlimited) == {
        "b": {"waiting_s": 1000.0, "at_limit_s": 0.0, "below_idle_s": 1000.0}}
