"""Slurm integration: read a cluster's GPU queue, plan it, pin and release the jobs.

- `build_snapshot(sinfo, squeue)`: `sinfo --json` + `squeue --json` -> PlanRequest + issues;
- `export_plan(plan, snapshot)`: the `scontrol` actions that carry the plan out;
- `sync_once` / `sync_loop`: snapshot -> plan (in process or via the service) -> apply.

docs/slurm.md documents the set-up, the mapping table and what Slurm cannot pin.
"""

from api.slurm.apply import ActionResult, SlurmAction, SlurmApply, execute, export_plan
from api.slurm.snapshot import SLURM_POLICY, Snapshot, build_snapshot
from api.slurm.sync import (
    PlannerUnavailable,
    SlurmUnavailable,
    SnapshotOptions,
    SyncRound,
    file_source,
    live_source,
    local_planner,
    service_planner,
    sync_loop,
    sync_once,
)
from api.slurm.types import TYPE_ALIASES

__all__ = [
    "SLURM_POLICY",
    "TYPE_ALIASES",
    "ActionResult",
    "PlannerUnavailable",
    "SlurmAction",
    "SlurmApply",
    "SlurmUnavailable",
    "Snapshot",
    "SnapshotOptions",
    "SyncRound",
    "build_snapshot",
    "execute",
    "export_plan",
    "file_source",
    "live_source",
    "local_planner",
    "service_planner",
    "sync_loop",
    "sync_once",
]
