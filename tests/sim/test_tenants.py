"""Multi-tenant simulation: the Philly loader, demand quotas, kueue_like's reclaim and the
wait-below-guarantee figures, on hand-made inputs whose outcomes are computed by hand."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from benchmarks.sim.engine import (
    JobRun,
    RoundView,
    SimConfig,
    SimResult,
    Simulator,
    TenantRound,
)
from benchmarks.sim.metrics import tenant_figures, tenant_summary
from benchmarks.sim.occupancy import Occupancy
from benchmarks.sim.policies import FifoFirstFit, GpuPlan, KueueLike
from benchmarks.sim.tenants import demand_quotas, largest_remainder, with_quotas
from benchmarks.sim.workloads import TraceError, load_trace
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Gpu, Job, Node, Quota

V100 = "V100-32GB"

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,aa
2017-10-09 06:13:03,2951.0,2,5902.0,bb
2017-10-09 06:10:00,500000.0,16,8000000.0,aa
2017-10-09 06:13:03,0.0,1,0.0,cc
2017-10-09 08:00:00,100.0,4,400.0,bb
"""


@pytest.fixture
def philly_csv(tmp_path: Path) -> Path:
    p = tmp_path / "philly.csv"
    p.write_text(PHILLY)
    return p


def test_philly_loader_maps_rows_to_tenant_gangs(philly_csv: Path) -> None:
    trace = load_trace(str(philly_csv), max_gang=8, gpus_per_node=4)
    # Arrival order: 06:10:00 (aa, 16 GPUs capped to 8), 06:13:03 bb (file row 2) then
    # 06:13:03 cc (row 4), 07:01:55 aa, 08:00:00 bb; first arrival rebased to 0.
    assert [(t.job.tenant, t.job.gpus, t.submit) for t in trace] == [
        ("aa", 8, 0.0), ("bb", 2, 183.0), ("cc", 1, 183.0), ("aa", 1, 3115.0),
        ("bb", 4, 6600.0)]
    # Work: duration clipped to [1 s, 2 days]; gangs above gpus_per_node span nodes.
    assert [t.work for t in trace] == [172800.0, 2951.0, 1.0, 66.0, 100.0]
    assert [t.job.single_node for t in trace] == [False, True, True, True, True]
    assert all(t.job.throughput and t.job.throughput[V100] == 1.0 for t in trace)


def test_philly_window_skips_and_limits(philly_csv: Path) -> None:
    window = load_trace(str(philly_csv), limit=2, skip=2, max_gang=8)
    assert [(t.job.tenant, t.submit) for t in window] == [("cc", 0.0), ("aa", 2932.0)]
    with pytest.raises(TraceError, match="Philly"):
        load_trace("synthetic", skip=1)


def test_largest_remainder_adds_up_exactly() -> None:
    # 10 GPUs for weights 5:3:2 -> 5, 3, 2; for 1:1:1 -> 4, 3, 3 (ties by name).
    assert largest_remainder(10, {"a": 5, "b": 3, "c": 2}) == {"a": 5, "b": 3, "c": 2}
    assert largest_remainder(10, {"b": 1, "a": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}


def _cluster(gpus: int) -> Cluster:
    return Cluster(nodes=[Node(name="n0", gpus=[Gpu(index=i, model=V100)
                                                for i in range(gpus)])])


def _job(name: str, tenant: str, submit: float, work: float, gpus: int = 1) -> TraceJob:
    return TraceJob(Job(name=name, tenant=tenant, gpus=gpus, throughput={V100: 1.0}),
                    submit, work)


def test_demand_quotas_are_proportional_to_gpu_time() -> None:
    # Demand (work x GPUs): a 3000 + 1000 = 4000, b 2 x 2000 = 4000, c 0.5 x ... = 0
    trace = [_job("a1", "a", 0, 3000), _job("a2", "a", 0, 1000),
             _job("b1", "b", 0, 2000, gpus=2), _job("c1", "c", 0, 1)]
    q = demand_quotas(trace, _cluster(4))
    assert {k: v.guaranteed["*"] for k, v in q.items()} == {"a": 2.0, "b": 2.0, "c": 0.0}
    assert all(not v.limit for v in q.values())
    lim = demand_quotas(trace, _cluster(4), borrow_factor=1.5)
    # limit = max(ceil(G x 1.5), largest job): a 3, b max(3, 2) = 3, c max(0, 1) = 1.
    assert {k: v.limit["*"] for k, v in lim.items()} == {"a": 3.0, "b": 3.0, "c": 1.0}


# Two V100s; tenants a and b guaranteed one GPU each, unlimited borrowing. b submits two
# 1000 s jobs at t=0 (b1 within its guarantee, b2 borrows a's idle GPU); a submits a1
# (100 s) at t=10, when no GPU is idle, so the next round is the periodic one at t=300.
TWO = with_quotas(_cluster(2), {"a": Quota(guaranteed={"*": 1}),
                                "b": Quota(guaranteed={"*": 1})})
RECLAIM = [_job("b1", "b", 0, 1000), _job("b2", "b", 0, 1000), _job("a1", "a", 10, 100)]


def _run(policy: object) -> SimResult:
    return Simulator(TWO, RECLAIM, policy, SimConfig(round_s=300.0)).run()  # type: ignore[arg-type]


def _jcts(res: SimResult) -> dict[str, float]:
    return {r.name: round((r.finish or 0.0) - r.submit, 6) for r in res.jobs}


def test_kueue_like_reclaims_the_borrowed_gpu_at_the_next_round() -> None:
    # t=300: a is below its guarantee with a1 waiting: b2 (b's borrowed, newest admitted)
    # is preempted, a1 runs 300..400. At 400 b2 restarts (30 s overhead) with 700 s left:
    # done at 1130. b1 is within b's guarantee and is never touched.
    res = _run(KueueLike())
    assert _jcts(res) == {"b1": 1000.0, "b2": 1130.0, "a1": 390.0}
    assert {r.name: r.preemptions for r in res.jobs} == {"b1": 0, "b2": 1, "a1": 0}
    figs = tenant_figures(res, TWO.quotas)
    assert figs["a"]["quota_wait_rounds"] == 0.0


def test_fifo_waits_below_the_guarantee_while_b_borrows() -> None:
    # FIFO never preempts: a1 waits for b1 and b2 (done at 1000) and runs 1000..1100.
    res = _run(FifoFirstFit())
    assert _jcts(res) == {"b1": 1000.0, "b2": 1000.0, "a1": 1090.0}
    figs = tenant_figures(res, TWO.quotas)
    # Rounds at 300, 600 and 900 end with a below its guarantee, a1 waiting and b holding
    # 2 > 1 GPUs: 3 consecutive rounds, 300 + 300 + 100 s (the round at 1000 starts a1).
    assert figs["a"]["quota_wait_rounds"] == 3.0
    assert figs["a"]["quota_wait_streak"] == 3.0
    assert figs["a"]["quota_wait_s"] == pytest.approx(700.0)
    assert figs["a"]["quota_wait_longest_s"] == pytest.approx(700.0)
    # in rounds of the 300 s period: 700 / 300, more than the one round the target allows
    assert figs["a"]["quota_wait_longest_rounds"] == pytest.approx(700.0 / 300.0)
    # a has demand at the rounds of 300, 600, 900 (served 0) and 1000 (served 1).
    assert figs["a"]["guar_served"] == pytest.approx(0.25)
    assert figs["b"]["guar_served"] == 1.0
    assert figs["b"]["quota_wait_rounds"] == 0.0


def test_gpuplan_reclaims_within_one_round() -> None:
    res = _run(GpuPlan(time_limit_s=2.0, deterministic=True))
    figs = tenant_figures(res, TWO.quotas)
    a1 = next(r for r in res.jobs if r.name == "a1")
    assert a1.first_start == 300.0
    assert figs["a"]["quota_wait_rounds"] == 0.0


def test_wait_figures_on_hand_made_rounds() -> None:
    # G: a 2, b 2, c 0. Rounds at 0, 100, 250, 400; the run ends at 500.
    quotas = {"a": Quota(guaranteed={"*": 2}), "b": Quota(guaranteed={"*": 2}),
              "c": Quota()}
    rounds = [
        # a at 1 < 2 with a 1-GPU job waiting, c borrows 1 > 0: a waits.
        TenantRound(0, {"a": 1, "b": 2, "c": 1}, {"a": 1}, {"a": 1}),
        # a's smallest waiting job (2 GPUs) does not fit its remaining guarantee of 1.
        TenantRound(100, {"a": 1, "b": 2, "c": 1}, {"a": 2}, {"a": 2}),
        # a waits again (1 GPU fits) while b borrows 3 > 2.
        TenantRound(250, {"a": 1, "b": 3}, {"a": 1}, {"a": 1}),
        # Nobody borrows: not a wait although a is short.
        TenantRound(400, {"a": 1, "b": 2}, {"a": 1}, {"a": 1}),
    ]
    res = SimResult("hand", [], [], [], 4, 5, 0, 0.0, rounds, round_s=200.0)
    figs = tenant_figures(res, quotas, end=500.0)
    assert figs["a"]["quota_wait_rounds"] == 2.0
    assert figs["a"]["quota_wait_s"] == pytest.approx(100.0 + 150.0)
    assert figs["a"]["quota_wait_streak"] == 1.0
    assert figs["a"]["quota_wait_longest_s"] == pytest.approx(150.0)
    # Served: round 0 min(1,2)/min(2,2) = 0.5; round 100 0.5; 250 0.5; 400 0.5.
    assert figs["a"]["guar_served"] == pytest.approx(0.5)
    assert figs["b"]["guar_served"] == 1.0
    assert figs["c"]["quota_wait_rounds"] == 0.0
    summary = tenant_summary(figs)
    assert summary["quota_wait_streak"] == 1.0
    assert summary["quota_wait_longest_s"] == pytest.approx(150.0)
    # 150 s of a 200 s period: within one round
    assert summary["quota_wait_longest_rounds"] == pytest.approx(0.75)
    assert summary["guar_served_min"] == pytest.approx(0.5)
    assert math.isclose(summary["quota_wait_s"], 250.0)


def test_cli_simulate_philly_with_quotas(philly_csv: Path, tmp_path: Path) -> None:
    spec = tmp_path / "two.json"
    spec.write_text(Cluster(nodes=[Node(name=f"n{k}", gpus=[Gpu(index=i, model=V100)
                                                            for i in range(4)])
                                   for k in range(2)]).model_dump_json())
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "--trace", str(philly_csv), "--cluster",
                                 str(spec), "--policies", "fifo_firstfit,kueue_like",
                                 "--borrow-factor", "2", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "summary.json").read_text())
    # Demand: aa 8 x 172800 + 66, bb 2 x 2951 + 4 x 100, cc 1: aa takes 8 GPUs of 8.
    assert {k: q["guaranteed"]["*"] for k, q in doc["meta"]["quotas"].items()} == {
        "aa": 8.0, "bb": 0.0, "cc": 0.0}
    assert doc["meta"]["quotas"]["bb"]["limit"] == {"*": 4.0}
    with (out / "tenants.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(row["policy"], row["tenant"]) for row in rows} == {
        (p, k) for p in ("fifo_firstfit", "kueue_like") for k in ("aa", "bb", "cc")}
    assert "quota_wait_rounds" in doc["summaries"]["kueue_like"]
    bad = CliRunner().invoke(app, ["simulate", "--trace", "synthetic", "--cluster", str(spec),
                                   "--skip", "3"])
    assert bad.exit_code == 2 and "Philly" in bad.output


def test_real_philly_window_loads(shared_data: Path) -> None:
    trace = load_trace(str(shared_data / "pollux" / "philly.csv"), limit=200, skip=20000)
    assert len(trace) == 200 and trace[0].submit == 0.0
    assert len({t.job.tenant for t in trace}) > 1


def test_gpuplan_queue_holds_every_tenants_head_and_guarantee() -> None:
    runs = [JobRun(trace=_job(n, t, 0, 100), remaining=100, size=1)
            for n, t in (("a0", "a"), ("a1", "a"), ("a2", "a"), ("b0", "b"), ("b1", "b"),
                         ("b2", "b"), ("b3", "b"))]
    policy = GpuPlan(max_queue=2, per_tenant=1)
    plain = RoundView(0.0, 300.0, _cluster(4), Occupancy(_cluster(4)), [], runs)
    assert [r.name for r in policy._queue(runs, plain)] == ["a0", "a1"]
    # With quotas the top 2 (a0, a1) are joined by b's head b0 and by b1, b2, which the
    # rest of b's guarantee of 3 has room for; a's guarantee of 1 is already used up.
    quotas = {"a": Quota(guaranteed={"*": 1}), "b": Quota(guaranteed={"*": 3})}
    tenanted = RoundView(0.0, 300.0, with_quotas(_cluster(4), quotas),
                         Occupancy(_cluster(4)), [], runs)
    assert [r.name for r in policy._queue(runs, tenanted)] == ["a0", "a1", "b0", "b1", "b2"]


@pytest.mark.parametrize("policy", [KueueLike(), GpuPlan(time_limit_s=2.0, deterministic=True)],
                         ids=["kueue_like", "gpuplan"])
def test_a_gang_within_its_guarantee_takes_back_a_whole_node(policy: object) -> None:
    # Two nodes of 2 V100s, a and b guaranteed 2 each. b's four 1000 s jobs fill both
    # nodes at t=0 (two borrowed); a's 2-GPU single-node gang (100 s) arrives at t=10.
    # At t=300 the two newest borrowed jobs, b2 and b3 (both on n1), are preempted: a0
    # runs 300..400; b2, b3 restart at 400 with 700 s left and the 30 s overhead: 1130.
    cluster = with_quotas(
        Cluster(nodes=[Node(name=f"n{k}", gpus=[Gpu(index=i, model=V100) for i in range(2)])
                       for k in range(2)]),
        {"a": Quota(guaranteed={"*": 2}), "b": Quota(guaranteed={"*": 2})})
    trace = [*(_job(f"b{i}", "b", 0, 1000) for i in range(4)), _job("a0", "a", 10, 100, 2)]
    res = Simulator(cluster, trace, policy, SimConfig()).run()  # type: ignore[arg-type]
    assert _jcts(res) == {"b0": 1000.0, "b1": 1000.0, "b2": 1130.0, "b3": 1130.0,
                          "a0": 390.0}
    assert tenant_figures(res, cluster.quotas)["a"]["quota_wait_rounds"] == 0.0
