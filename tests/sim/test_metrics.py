"""The ideal JCT, work per allocated GPU-hour and util busy: by hand, and filled by the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.sim.cluster import largest_pool, load_cluster
from benchmarks.sim.engine import Simulator
from benchmarks.sim.metrics import ideal_avg_jct, summarize, work_gpu_seconds
from benchmarks.sim.policies import FifoFirstFit
from benchmarks.sim.report import fill_figures, merged_markdown
from benchmarks.sim.workloads import load_trace
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Gpu, Job, Node

V100, H100 = "V100-32GB", "H100-SXM5-80GB"

# One V100 node (listed first) and one H100 node, one GPU each.
CLUSTER = Cluster(nodes=[Node(name="a-v100", gpus=[Gpu(index=0, model=V100)]),
                         Node(name="b-h100", gpus=[Gpu(index=0, model=H100)])])
# x: 1000 s of work, 2x faster on the H100; y: 600 s, 3x faster on the H100, arrives at
# t=100; z: 400 s, V100 only, arrives at t=0.
TRACE = [
    TraceJob(Job(name="x", gpus=1, throughput={V100: 1.0, H100: 2.0}), 0.0, 1000.0),
    TraceJob(Job(name="y", gpus=1, throughput={V100: 1.0, H100: 3.0}), 100.0, 600.0),
    TraceJob(Job(name="z", gpus=1, allowed_models=[V100], throughput={V100: 1.0}), 0.0, 400.0),
]


def test_ideal_jct_and_ratio_by_hand() -> None:
    res = Simulator(CLUSTER, TRACE, FifoFirstFit()).run()
    # ideal: x 1000 / 2 = 500, y 600 / 3 = 200, z 400 / 1 = 400: mean 1100 / 3
    assert ideal_avg_jct(TRACE, CLUSTER) == pytest.approx(1100 / 3)
    # FIFO first fit, by submission then name: at t=0 x takes a-v100 (the first node);
    # z may only use a V100, so z waits; x holds the V100 until 1000, z runs 1000..1400.
    # y arrives at 100 and takes the idle H100: 200 s. JCTs: x 1000, z 1400, y 200.
    jct = {r.name: (r.finish or 0.0) - r.submit for r in res.jobs}
    assert jct == pytest.approx({"x": 1000.0, "y": 200.0, "z": 1400.0})
    s = summarize(res, CLUSTER)
    assert s["ideal_avg_jct_s"] == pytest.approx(1100 / 3)
    assert s["jct_over_ideal"] == pytest.approx((2600 / 3) / (1100 / 3))
    # work 1000 + 600 + 400 = 2000 GPU-s at speed 1; allocated 1000 (x) + 200 (y) + 400 (z)
    assert s["work_per_gpu_hour"] == pytest.approx(2000 / 1600)
    # util busy: z waits during [0, 1000); allocated 1 GPU on [0, 100) and [300, 1000),
    # 2 on [100, 300): (100 + 400 + 700) / (2 x 1000)
    assert s["util_busy"] == pytest.approx(1200 / 2000)


def test_report_fills_the_ideal_figures_of_an_older_summary(tmp_path: Path) -> None:
    meta = {"trace": "synthetic", "cluster": "hetero-160-nomig", "jobs": 30, "seed": 3}
    cluster = load_cluster("hetero-160-nomig")
    trace = load_trace("synthetic", limit=30, seed=3, max_gang=largest_pool(cluster),
                       gpus_per_node=max(len(n.gpus) for n in cluster.nodes))
    ideal = ideal_avg_jct(trace, cluster)
    doc = {"meta": meta, "summaries": {"p": {"avg_jct_s": 2.5 * ideal, "gpu_hours": 10.0}}}
    filled = fill_figures(doc)["p"]
    assert filled["ideal_avg_jct_s"] == pytest.approx(ideal)
    assert filled["jct_over_ideal"] == pytest.approx(2.5)
    assert filled["work_per_gpu_hour"] == pytest.approx(
        work_gpu_seconds(trace, cluster) / 36_000.0)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(doc))
    row = merged_markdown([path], fill=True).splitlines()[-1]
    assert "| 2.50 |" in row
    # without --fill the figures the file lacks show as "-"
    assert "| 2.50 |" not in merged_markdown([path]).splitlines()[-1]
