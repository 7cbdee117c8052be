"""`gpuplan simulate --sessions`: the gpuplan policy drives its rounds through a planning
session, whose state after each round's events is that round's request."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from api.cli import app
from benchmarks.sim.cluster import hetero_cluster
from benchmarks.sim.engine import Simulator
from benchmarks.sim.policies.gpuplan import GpuPlan
from benchmarks.sim.workloads import synthetic
from models import Placement, Plan, PlanRequest
from solver.session import apply_events, diff_events

SMALL = hetero_cluster({"V100-32GB": 4, "A100-SXM4-80GB": 4, "H100-SXM5-80GB": 4},
                       {"H100-SXM5-80GB": 0.5}, gpus_per_node=2)


def _key(req: PlanRequest) -> tuple[object, ...]:
    """The state up to the order of jobs and nodes."""
    return (sorted(j.model_dump_json() for j in req.jobs),
            sorted(n.model_dump_json() for n in req.cluster.nodes))


class _Checked(GpuPlan):
    """GpuPlan in sessions mode that checks each round's session state."""

    rounds: int = 0

    def _session_plan(self, request: PlanRequest) -> Plan:
        out = super()._session_plan(request)
        self.rounds += 1
        assert self.session is not None and self.session.last_plan is out
        return out

    def _plan(self, request: PlanRequest) -> dict[str, list[Placement]]:
        if self.session is not None:
            before = self.session.request
            assert _key(apply_events(before, diff_events(before, request))) == _key(request)
        return super()._plan(request)


def test_a_sessions_run_completes_every_job_through_events() -> None:
    trace = synthetic.generate(12, seed=3, mean_interarrival_s=200.0, median_work_s=600.0,
                               max_gang=2, gpus_per_node=2)
    pol = _Checked(sessions=True, time_limit_s=0.2)
    res = Simulator(SMALL, trace, pol).run()  # capacity and conservation checked per round
    assert len(res.jobs) == 12 and all(r.finish is not None for r in res.jobs)
    assert pol.rounds > 1 and pol.events_sent > 0


def test_the_cli_takes_sessions(tmp_path: Path) -> None:
    cluster = tmp_path / "c.json"
    cluster.write_text(SMALL.model_dump_json())
    res = CliRunner().invoke(app, [
        "simulate", "--trace", "synthetic", "--cluster", str(cluster), "--policies",
        "gpuplan", "--jobs", "6", "--time-limit", "0.2", "--sessions", "--no-progress",
        "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert '"gpuplan_sessions": true' in (tmp_path / "out" / "summary.json").read_text()
