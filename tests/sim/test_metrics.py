"""The ideal JCT, work per allocated GPU-hour and util busy on a tiny trace computed by hand."""

from __future__ import annotations

import pytest

from benchmarks.sim.engine import Simulator
from benchmarks.sim.metrics import ideal_avg_jct, summarize
from benchmarks.sim.policies import FifoFirstFit
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
    assert ideal_avg_jct(res.jobs, CLUSTER) == pytest.approx(1100 / 3)
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
