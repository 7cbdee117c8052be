"""The sync loop: snapshot -> plan -> apply, once (cron) or every N seconds.

Meant for sites that submit GPU jobs held (`sbatch --hold`) and let gpuplan release them.
Each round reads `sinfo --json` and `squeue --json` (or files), builds the request, plans
it in process (`solver.plan`) or through a gpuplan service (`POST <url>/v1/plans`), turns
the plan into `scontrol` actions and runs them when asked. A round that cannot read Slurm
or get a plan changes nothing and the loop goes on.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from api.importing import SnapshotError
from api.slurm.apply import ActionResult, Runner, SlurmApply, execute, export_plan, run_command
from api.slurm.snapshot import Snapshot, build_snapshot
from models import GpuModel, Plan, PlanRequest, Policy

log = logging.getLogger(__name__)

Source = Callable[[], tuple[object, object]]
Planner = Callable[[PlanRequest], Plan]


class SlurmUnavailable(RuntimeError):
    """A Slurm command failed or printed something that is not JSON."""


class PlannerUnavailable(RuntimeError):
    """The planner (service or in process) gave no plan."""


def read_command_json(argv: Sequence[str], runner: Runner = run_command) -> object:
    """Run a Slurm command that prints JSON (`sinfo --json`) and parse its output."""
    code, text = runner(argv)
    if code != 0:
        raise SlurmUnavailable(f"{' '.join(argv)} exited {code}: {' '.join(text.split())[:300]}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SlurmUnavailable(f"{' '.join(argv)} printed no JSON ({e.msg})") from e


def live_source(sinfo: str = "sinfo", squeue: str = "squeue", scontrol: str = "scontrol",
                runner: Runner = run_command) -> Source:
    """Read the cluster with `sinfo --json` and `squeue --json`.

    When `sinfo --json` prints no `nodes` list (releases whose sinfo groups its records),
    the nodes come from `scontrol --json show nodes` (Slurm 23.02+), which lists them.
    """
    def read() -> tuple[object, object]:
        nodes = read_command_json([sinfo, "--json"], runner)
        if not (isinstance(nodes, dict) and isinstance(nodes.get("nodes"), list)):
            nodes = read_command_json([scontrol, "--json", "show", "nodes"], runner)
        return nodes, read_command_json([squeue, "--json"], runner)
    return read


def file_source(sinfo: Path, squeue: Path) -> Source:
    """Read the cluster from saved `sinfo --json` / `squeue --json` files."""
    def read() -> tuple[object, object]:
        try:
            return json.loads(sinfo.read_text()), json.loads(squeue.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SlurmUnavailable(f"cannot read the Slurm files: {e}") from e
    return read


def local_planner() -> Planner:
    """Plan in this process with `solver.plan`."""
    from solver import PlanningError, plan

    def run(request: PlanRequest) -> Plan:
        try:
            return plan(request)
        except PlanningError as e:
            raise PlannerUnavailable(str(e)) from e
    return run


def service_planner(url: str, token: str | None = None, timeout: float = 120.0) -> Planner:
    """Plan through a gpuplan service: `POST <url>/v1/plans`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def run(request: PlanRequest) -> Plan:
        body = request.model_dump(mode="json", exclude_none=True)
        try:
            resp = httpx.post(f"{url.rstrip('/')}/v1/plans", json=body, headers=headers,
                              timeout=timeout + request.policy.time_limit_s)
        except httpx.HTTPError as e:
            raise PlannerUnavailable(f"{url}: {e}") from e
        if resp.status_code != 200:
            raise PlannerUnavailable(f"{url}/v1/plans answered {resp.status_code}: "
                                     f"{' '.join(resp.text.split())[:300]}")
        return Plan.model_validate_json(resp.content)
    return run


@dataclass
class SnapshotOptions:
    """How Slurm objects map to the request (the CLI's --gres-type, --qos-weight, ...)."""

    policy: Policy | None = None
    gres_types: Mapping[str, str] = field(default_factory=dict)
    qos_weights: Mapping[str, float] = field(default_factory=dict)
    gpu_models: Mapping[str, GpuModel] = field(default_factory=dict)
    requeue_running: bool = False
    priority_weight: float = 0.0

    def build(self, sinfo: object, squeue: object) -> Snapshot:
        """`build_snapshot` with these options."""
        return build_snapshot(sinfo, squeue, policy=self.policy, gres_types=self.gres_types,
                              qos_weights=self.qos_weights, gpu_models=self.gpu_models,
                              requeue_running=self.requeue_running,
                              priority_weight=self.priority_weight)


@dataclass
class SyncRound:
    """What one round saw, planned and did."""

    snapshot: Snapshot
    plan: Plan
    actions: SlurmApply
    results: list[ActionResult]

    def summary(self) -> dict[str, object]:
        """One JSON-able line for the log."""
        failed = [r for r in self.results if r.returncode != 0]
        return {"jobs": len(self.snapshot.request.jobs), "issues": len(self.snapshot.issues),
                "status": self.plan.status, "placed": len(self.plan.assignments),
                "unplaced": len(self.plan.unplaced), "actions": len(self.actions.actions),
                "executed": len(self.results), "failed": len(failed)}


def sync_once(source: Source, planner: Planner, options: SnapshotOptions, *,
              execute_actions: bool = False, runner: Runner = run_command,
              scontrol: str = "scontrol") -> SyncRound:
    """One round. Raises SlurmUnavailable, SnapshotError or PlannerUnavailable, having
    changed nothing."""
    sinfo, squeue = source()
    snap = options.build(sinfo, squeue)
    plan = planner(snap.request)
    actions = export_plan(plan, snap, scontrol)
    results = execute(actions, runner) if execute_actions else []
    return SyncRound(snapshot=snap, plan=plan, actions=actions, results=results)


def sync_loop(source: Source, planner: Planner, options: SnapshotOptions, *, every: float,
              rounds: int | None = None, stop: threading.Event | None = None,
              execute_actions: bool = False, runner: Runner = run_command,
              scontrol: str = "scontrol",
              on_round: Callable[[SyncRound], None] | None = None) -> int:
    """Run rounds every `every` seconds until `stop` is set or `rounds` are done.

    A failed round is logged and the loop goes on. Returns the number of failed rounds.
    """
    stop = stop or threading.Event()
    failures = done = 0
    while not stop.is_set() and (rounds is None or done < rounds):
        try:
            result = sync_once(source, planner, options, execute_actions=execute_actions,
                               runner=runner, scontrol=scontrol)
        except (SlurmUnavailable, SnapshotError, PlannerUnavailable) as e:
            failures += 1
            log.error("sync round failed, nothing changed: %s", e)
        else:
            if on_round is not None:
                on_round(result)
        done += 1
        if rounds is None or done < rounds:
            stop.wait(every)
    return failures


def parse_interval(text: str) -> float:
    """`30s`, `2m`, `1h`, `90` (seconds) -> seconds. Raises ValueError."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    text = text.strip().lower()
    scale = units.get(text[-1:])
    value = float(text[:-1] if scale is not None else text)
    seconds = value * (scale or 1.0)
    if not 0 < seconds < float("inf"):
        raise ValueError(f"interval must be a positive duration, got {text!r}")
    return seconds
