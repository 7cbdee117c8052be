"""The Pollux workload loader: allowed sizes, nominal sizes, work, the trace spec."""

from __future__ import annotations

import csv

import pytest

from benchmarks.data import pollux
from benchmarks.paths import data_dir
from benchmarks.sim.workloads import TraceError, load_trace
from benchmarks.sim.workloads.pollux import allowed_curve, workload_path
from models.rules import allowed_sizes, speedup

needs_data = pytest.mark.skipif(not (data_dir() / "pollux").is_dir(),
                                reason="../shared/data/pollux is not available")


def test_allowed_curve_keeps_sizes_that_beat_every_smaller_one_and_the_nominal() -> None:
    curve = {1: 1.0, 2: 1.8, 4: 3.0, 6: 2.5, 8: 3.5, 12: 3.2, 16: 5.1234567}
    assert allowed_curve(curve, 6, 64) == {1: 1.0, 2: 1.8, 4: 3.0, 6: 2.5, 8: 3.5,
                                           16: 5.123457}
    assert allowed_curve(curve, 1, 8) == {1: 1.0, 2: 1.8, 4: 3.0, 8: 3.5}


@needs_data
def test_workload_1_as_jobs() -> None:
    trace = load_trace("pollux:1")
    with workload_path(1).open(newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    assert len(trace) == len(rows) == 160
    curves = pollux.curves()
    for tj in trace:
        row = rows[tj.name]
        app = row["application"]
        assert tj.job_type == app
        assert tj.job.gpus == int(row["num_replicas"])
        if app == "ncf":
            assert tj.job.elastic is None
        else:
            assert tj.job.elastic is not None
            assert not tj.job.single_node
            assert tj.job.gpus in allowed_sizes(tj.job)
            assert speedup(tj.job, 1) == 1.0
        work_1 = pollux.SAMPLES[app] / curves[app].throughput_1
        assert tj.work == pytest.approx(work_1 / curves[app].speedup[tj.job.gpus], rel=1e-5)
    assert min(tj.submit for tj in trace) == 0.0


def test_bad_pollux_spec_is_a_trace_error() -> None:
    with pytest.raises(TraceError, match="pollux:1 to pollux:8"):
        load_trace("pollux:9")
