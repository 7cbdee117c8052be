"""Invariants on random traces, determinism, the capacity ledger and the loaders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from api.cli import app
from benchmarks.sim.cluster import hetero_cluster, largest_pool, load_cluster
from benchmarks.sim.engine import InvariantError, Simulator
from benchmarks.sim.metrics import summarize
from benchmarks.sim.occupancy import CapacityError, Occupancy
from benchmarks.sim.policies import POLICIES
from benchmarks.sim.runner import compare
from benchmarks.sim.workloads import TraceError, load_trace, synthetic
from benchmarks.sim.workloads.speeds import extrapolate, job_types
from models import Job, MigDemand, Placement

SMALL = hetero_cluster({"V100-32GB": 4, "A100-SXM4-80GB": 4, "H100-SXM5-80GB": 4},
                       {"H100-SXM5-80GB": 0.5}, gpus_per_node=2)
BASELINES = ["fifo_firstfit", "tiresias_las", "gavel_maxmin"]


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 14),
       policy=st.sampled_from([*BASELINES, "gpuplan"]))
def test_every_job_completes_and_no_gpu_is_oversubscribed(seed: int, n: int,
                                                          policy: str) -> None:
    trace = synthetic.generate(n, seed=seed, mean_interarrival_s=200.0,
                               median_work_s=600.0, max_gang=2, gpus_per_node=2)
    pol = POLICIES[policy]()
    if policy == "gpuplan":
        pol.time_limit_s = 0.2  # type: ignore[attr-defined]
    sim = Simulator(SMALL, trace, pol)
    res = sim.run()  # the engine asserts capacity and job conservation every round
    assert len(res.jobs) == n
    for r in res.jobs:
        fastest = max((r.job.throughput or {}).values())
        assert r.finish is not None
        assert r.finish - r.submit >= r.trace.work / fastest - 1e-6
        assert r.first_start is not None and r.first_start >= r.submit
    s = summarize(res, SMALL)
    assert 0.0 < s["utilization"] <= 1.0
    assert max(x.allocated for x in res.samples) <= res.gpus_total + 1e-9


def test_same_seed_same_figures() -> None:
    trace = load_trace("synthetic", limit=30, seed=7, max_gang=2, gpus_per_node=2)
    again = load_trace("synthetic", limit=30, seed=7, max_gang=2, gpus_per_node=2)
    assert trace == again
    assert trace != load_trace("synthetic", limit=30, seed=8, max_gang=2, gpus_per_node=2)
    a = compare(SMALL, trace, BASELINES)
    b = compare(SMALL, again, BASELINES)
    for p in BASELINES:
        drop = {"wall_s", "planner_p50_s", "planner_p99_s", "planner_max_s"}
        assert ({k: v for k, v in a.summaries[p].items() if k not in drop}
                == {k: v for k, v in b.summaries[p].items() if k not in drop})


def test_occupancy_refuses_oversubscription() -> None:
    occ = Occupancy(SMALL)
    v100 = next(n.name for n in SMALL.nodes if n.name.startswith("v100"))
    occ.add(Job(name="a", gpus=1), [Placement(node=v100, gpu=0)])
    with pytest.raises(CapacityError):
        occ.add(Job(name="b", gpus=1), [Placement(node=v100, gpu=0)])
    with pytest.raises(CapacityError):
        occ.add(Job(name="s", gpu_share=0.5), [Placement(node=v100, gpu=0, fraction=0.5)])
    occ.add(Job(name="s1", gpu_share=0.6), [Placement(node=v100, gpu=1, fraction=0.6)])
    with pytest.raises(CapacityError):
        occ.add(Job(name="s2", gpu_share=0.5), [Placement(node=v100, gpu=1, fraction=0.5)])
    mig_node = next(n.name for n in SMALL.nodes if n.gpus[0].mig_enabled)
    m1 = Job(name="m1", mig=MigDemand(compute_slices=4))
    occ.add(m1, occ.find(m1) or [])
    m2 = Job(name="m2", mig=MigDemand(compute_slices=4))
    pl = occ.find(m2)
    assert pl is not None and (pl[0].node, pl[0].gpu) != (occ.jobs["m1"][0].node,
                                                          occ.jobs["m1"][0].gpu)
    with pytest.raises(CapacityError):  # 4g + 4g do not fit one GPU
        occ.add(m2, [occ.jobs["m1"][0].model_copy(update={"node": mig_node})])


def test_occupancy_holds_shares_to_the_gpu_memory() -> None:
    """The simulator's device fit is the planners' (models.rules.share_fits): shares on one
    GPU fit its fractions and its memory; freeing a share frees its memory."""
    occ = Occupancy(SMALL)
    v100 = next(n.name for n in SMALL.nodes if n.name.startswith("v100"))  # 32 GiB
    occ.add(Job(name="a", gpu_share=0.25, gpu_memory_gib=20),
            [Placement(node=v100, gpu=0, fraction=0.25)])
    big = Job(name="b", gpu_share=0.25, gpu_memory_gib=16)
    with pytest.raises(CapacityError):  # 20 + 16 GiB > 32 GiB
        occ.add(big, [Placement(node=v100, gpu=0, fraction=0.25)])
    found = occ.find(big, ["V100-32GB"])
    assert found is not None and (found[0].node, found[0].gpu) != (v100, 0)
    occ.remove("a")
    occ.add(big, [Placement(node=v100, gpu=0, fraction=0.25)])


def test_a_policy_that_oversubscribes_is_caught() -> None:
    class Greedy:
        name = "bad"

        def schedule(self, view):  # type: ignore[no-untyped-def]
            g = next(iter(view.occupancy.gpus.values()))
            return {r.name: [Placement(node=g.node, gpu=g.index)] for r in view.active}

    trace = synthetic.generate(4, seed=1, p_mig=0.0, p_share=0.0, max_gang=1)
    with pytest.raises(InvariantError, match="oversubscribed"):
        Simulator(SMALL, trace, Greedy()).run()  # type: ignore[arg-type]


def test_speed_extrapolation() -> None:
    types = job_types()
    assert len(types) == 26
    rec = extrapolate("rec", p100=48.88, v100=23.32)  # slower on V100 than on P100
    assert rec.speeds["A100-SXM4-80GB"] == 1.0 and rec.speeds["T4-16GB"] == 1.0
    gan = extrapolate("gan", p100=2.40, v100=4.43)
    assert gan.speeds["H100-SXM5-80GB"] == pytest.approx((4.43 / 2.40) ** 2, rel=1e-3)
    assert all(t.speeds["V100-32GB"] == 1.0 for t in types)


def test_itp_and_pai_loaders(tmp_path: Path) -> None:
    itp = tmp_path / "itp.csv"
    itp.write_text("job_id,submission_time,duration,num_gpu\n"
                   "x,100,50,1\ny,90,70,64\nz,200,30,16\n")
    jobs = load_trace(str(itp), seed=0, max_gang=32, gpus_per_node=8)
    assert [j.submit for j in jobs] == [0.0, 10.0, 110.0]
    assert [j.job.gpus for j in jobs] == [32, 1, 16]
    assert [j.job.single_node for j in jobs] == [False, True, False]
    assert [j.work for j in jobs] == [70.0, 50.0, 30.0]
    pai = tmp_path / "pai.csv"
    pai.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1000,1,1000,,LS,Running,0,100,0\n"
        "p1,1000,1000,1,300,,LS,Running,10,40,10\n"
        "p2,1000,1000,1,700,,BE,Running,20,90,20\n"
        "p3,1000,1000,0,0,,BE,Running,30,90,30\n"
        "p4,1000,1000,2,1000,,BE,Running,40,9999999,40\n")
    jobs = load_trace(str(pai), seed=0, max_gang=8, gpus_per_node=8)
    assert [j.job.shape for j in jobs] == ["whole", "mig", "share", "whole"]
    assert jobs[1].job.mig is not None and jobs[1].job.mig.compute_slices == 3
    assert jobs[2].job.gpu_share == 0.7
    assert jobs[3].work == 2 * 86400.0
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError):
        load_trace(str(bad))


def test_real_traces_load(shared_data: Path) -> None:
    spec = load_cluster("hetero-160")
    jobs = load_trace(str(shared_data / "itp" / "cluster07.csv"), limit=50,
                      max_gang=largest_pool(spec))
    assert len(jobs) == 50 and jobs[0].submit == 0.0
    pods = load_trace(str(shared_data / "alibaba-pai-2023" / "openb_pod_list_default.csv"),
                      limit=50)
    assert len(pods) == 50 and {j.job.shape for j in pods} <= {"whole", "mig", "share"}


def test_cli_simulate(tmp_path: Path) -> None:
    spec = tmp_path / "small.json"
    spec.write_text(SMALL.model_dump_json())
    r = CliRunner().invoke(app, ["simulate", "--trace", "synthetic", "--cluster", str(spec),
                                 "--jobs", "8", "--policies", "fifo_firstfit,tiresias_las",
                                 "--out", str(tmp_path / "out"), "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "fifo_firstfit" in r.output and "tiresias_las" in r.output
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(doc["summaries"]) == {"fifo_firstfit", "tiresias_las"}
    assert len(doc["jct_s"]["fifo_firstfit"]) == 8
    assert (tmp_path / "out" / "jct_cdf.png").stat().st_size > 1000
    bad = CliRunner().invoke(app, ["simulate", "--trace", "synthetic", "--cluster", str(spec),
                                   "--policies", "nope"])
    assert bad.exit_code == 2 and "unknown policy" in bad.output
    missing = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path / "none.csv"),
                                       "--cluster", str(spec)])
    assert missing.exit_code == 2 and "cannot read" in missing.output
