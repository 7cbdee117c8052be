"""`gpuplan slurm sync --once --execute` against a real slurmctld/slurmd (see conftest).

Three held jobs on one node with 2 `a100` GPUs and 7 `1g.5gb` MIG devices:
- `whole`: `--gres=gpu:2`, untyped: left to itself Slurm may hand it an a100 and a MIG
  device; the plan puts it on the two a100s and gpuplan must pin that type;
- `mig`: `--gres=gpu:1g.5gb:1`;
- `loser`: `--gres=gpu:a100:1`: with `whole` on both a100s there is no room, so the plan
  leaves it out (it is worth 1 against `whole`'s 2).
"""

from __future__ import annotations

import json
from typing import Any

from api.slurm.gres import gpu_items, parse_gres
from models import Plan
from tests.k8s.conftest import server_url  # noqa: F401  (the live-service fixture, shared)
from tests.slurm.conftest import SlurmCluster, gpuplan


def _types(job: dict[str, Any]) -> dict[str, int]:
    """GRES type -> devices the running job holds (from `gres_detail`)."""
    out: dict[str, int] = {}
    for detail in job["gres_detail"]:
        for item in gpu_items(parse_gres(detail)):
            if item.indices:
                out[str(item.type)] = out.get(str(item.type), 0) + len(item.indices)
    return out


def test_sync_once_runs_the_plan_and_comments_the_rest(slurm_cluster: SlurmCluster,
                                                       tmp_path: Any) -> None:
    c = slurm_cluster
    whole = c.sbatch("--gres=gpu:2", "--job-name=whole")
    mig = c.sbatch("--gres=gpu:1g.5gb:1", "--job-name=mig")
    loser = c.sbatch("--gres=gpu:a100:1", "--job-name=loser")

    # A dry run changes nothing.
    dry = gpuplan("slurm", "sync", "--once", env=c.env)
    assert dry.returncode == 0, dry.stderr
    jobs = c.jobs()
    assert all(jobs[j]["job_state"] == "PENDING" and jobs[j]["state_reason"] == "JobHeldUser"
               and jobs[j]["comment"] == "" for j in (whole, mig, loser))
    assert f"scontrol release {whole}" in dry.stdout

    plan_file = tmp_path / "plan.json"
    done = gpuplan("slurm", "sync", "--once", "--execute", "--plan-output", str(plan_file),
                   env=c.env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["executed"] > 0

    plan = Plan.model_validate_json(plan_file.read_text())
    placed = {a.job: a.placements for a in plan.assignments}
    assert set(placed) == {whole, mig}
    assert [u.job for u in plan.unplaced] == [loser]
    # gpuplan GPU 0-1 are the a100s, GPU 2 the MIG GPU holding the 1g.5gb devices.
    assert sorted(p.gpu for p in placed[whole]) == [0, 1]
    mig_instance = placed[mig][0].mig
    assert mig_instance is not None and mig_instance.profile == "1g.5gb"

    c.wait_for("the placed jobs to run", lambda: all(
        c.jobs()[j]["job_state"] == "RUNNING" for j in (whole, mig)))
    jobs = c.jobs()
    for job_id in (whole, mig):
        assert jobs[job_id]["nodes"] == c.node == placed[job_id][0].node
    assert _types(jobs[whole]) == {"a100": 2}
    assert _types(jobs[mig]) == {"1g.5gb": 1}
    left = jobs[loser]
    assert left["job_state"] == "PENDING" and left["state_reason"] == "JobHeldUser"
    assert left["comment"].startswith(f"gpuplan: {plan.unplaced[0].reason}")

    # A second round finds nothing to do: the comment is already there.
    again = gpuplan("slurm", "sync", "--once", "--execute", env=c.env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["actions"] == 0


def test_sync_once_plans_through_the_service(slurm_cluster: SlurmCluster,
                                             server_url: str) -> None:  # noqa: F811
    c = slurm_cluster
    job = c.sbatch("--gres=gpu:1", "--job-name=via-service")
    done = gpuplan("slurm", "sync", "--once", "--execute", "--url", server_url, env=c.env)
    assert done.returncode == 0, done.stderr
    c.wait_for("the job to run", lambda: c.jobs()[job]["job_state"] == "RUNNING")
    assert _types(c.jobs()[job]) == {"a100": 1}
