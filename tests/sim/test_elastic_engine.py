"""The simulator's elastic accounting (resizes, rates, the round's request) on a trace
computed by hand, with a scripted policy so that only the engine is under test."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from benchmarks.sim.engine import Decision, InvariantError, RoundView, SimConfig, Simulator
from benchmarks.sim.metrics import ideal_time
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Gpu, Job, Node, Placement, Policy

T4 = "T4-16GB"
ONE_NODE = Cluster(nodes=[Node(name="n0", gpus=[Gpu(index=i, model=T4) for i in range(4)])])
# A: nominal 1 GPU, may take 1, 2 or 4 with speedups 1, 1.5, 2.5; 1000 s of work on 1 GPU.
ELASTIC_A = TraceJob(Job.model_validate({
    "name": "a", "gpus": 1, "throughput": {T4: 1.0},
    "elastic": {"min_gpus": 1, "max_gpus": 4, "speedup": {"1": 1.0, "2": 1.5, "4": 2.5}}}),
    submit=0.0, work=1000.0)


def _gpus(k: int) -> list[Placement]:
    return [Placement(node="n0", gpu=i) for i in range(k)]


@dataclass
class Script:
    """Gives job `a` 1 GPU before t=200, 4 GPUs until t=400, then 2; records the request
    each round sends for it."""

    sizes: tuple[tuple[float, int], ...] = ((200.0, 1), (400.0, 4), (1e18, 2))
    seen: dict[float, tuple[int | None, float | None]] = field(default_factory=dict)
    name: str = "script"

    def schedule(self, view: RoundView) -> Decision:
        job = next((j for j in view.request(Policy()).jobs if j.name == "a"), None)
        if job is None:
            return {}
        self.seen[view.now] = (job.gpus, job.remaining_work)
        k = next(k for t, k in self.sizes if view.now < t)
        return {"a": _gpus(k)}


def _run(config: SimConfig, script: Script | None = None) -> tuple[Simulator, Script]:
    script = script or Script()
    sim = Simulator(ONE_NODE, [ELASTIC_A], script, config)
    sim.run()
    return sim, script


def test_resize_accounting_by_hand() -> None:
    sim, script = _run(SimConfig(round_s=100.0, restart_overhead_s=30.0))
    a = sim.runs["a"]
    # 0..200 on 1 GPU at rate 1: 800 s left. Resize to 4 at 200: stalled to 230, then
    # rate 2.5 until 400: 800 - 2.5 * 170 = 375 left. Resize to 2 at 400: stalled to 430,
    # then rate 1.5: 375 / 1.5 = 250 s, done at 680.
    assert a.finish == pytest.approx(680.0)
    assert (a.resizes, a.migrations, a.preemptions) == (2, 0, 0)
    # GPU-seconds held: 1 x 200 + 4 x 200 + 2 x 280.
    assert a.attained == pytest.approx(1560.0)
    # Rounds stay periodic while the elastic gang runs (no arrival, no completion).
    assert sorted(script.seen) == [0.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
    # The request sends a running gang at its current size with its remaining time there:
    # t=300 on 4 GPUs, 800 - 2.5 * 70 = 625 s left on 1 GPU, i.e. 625 * 1 / 2.5 = 250 s.
    assert script.seen[100.0] == (1, pytest.approx(900.0))
    assert script.seen[300.0] == (4, pytest.approx(250.0))
    # t=500 on 2 GPUs: 375 - 1.5 * 70 = 270 on 1 GPU, 270 / 1.5 = 180 s on 2.
    assert script.seen[500.0] == (2, pytest.approx(180.0))


def test_resize_without_restart_overhead() -> None:
    sim, _ = _run(SimConfig(round_s=100.0, restart_overhead_s=0.0))
    # 800 left at 200; 4 GPUs until 400: 800 - 500 = 300; 2 GPUs: 300 / 1.5 = 200 -> 600.
    assert sim.runs["a"].finish == pytest.approx(600.0)


def test_a_size_outside_the_allowed_ones_breaks_the_invariant() -> None:
    with pytest.raises(InvariantError, match="distinct GPUs"):
        _run(SimConfig(round_s=100.0), Script(sizes=((200.0, 1), (1e18, 3))))
    fixed = TraceJob(Job(name="a", gpus=1, throughput={T4: 1.0}), submit=0.0, work=100.0)
    with pytest.raises(InvariantError, match="distinct GPUs"):
        Simulator(ONE_NODE, [fixed], Script(sizes=((1e18, 2),)), SimConfig()).run()


def test_ideal_time_of_an_elastic_gang_uses_its_fastest_size() -> None:
    assert ideal_time(ELASTIC_A, ONE_NODE) == pytest.approx(1000.0 / 2.5)
