"""Fixtures of the Slurm tests: recorded JSON, and a real Slurm started on loopback.

`slurm_cluster` starts munged, slurmctld and slurmd (Debian's `slurm-wlm` and `munge`) as
root in a temporary directory: one node with 2 GPUs typed `a100` and 7 typed `1g.5gb`,
fake device files, free ports on 127.0.0.1, pid files in the directory. It is skipped with
a message where slurmctld is not installed or the tests do not run as root.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.load import free_port

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]

#: Generous bounds: the machine may be loaded by other work.
START_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 60.0


def load(name: str) -> dict[str, Any]:
    """A fixture file as JSON."""
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


@pytest.fixture
def sinfo() -> dict[str, Any]:
    """The recorded `sinfo --json` (a fresh copy a test may edit)."""
    return load("sinfo_22.05.json")


@pytest.fixture
def squeue() -> dict[str, Any]:
    """The recorded `squeue --json`: job 1 on an a100, job 2 on three 1g.5gb, 3 pending."""
    return load("squeue_22.05.json")


def job_like(squeue: dict[str, Any], index: int, **changes: Any) -> dict[str, Any]:
    """A copy of recorded job `index` with fields changed (hand-written variants)."""
    job: dict[str, Any] = copy.deepcopy(squeue["jobs"][index])
    job.update(changes)
    return job


@dataclass
class SlurmCluster:
    """A running one-node Slurm: its directory, environment and node name."""

    root: Path
    env: dict[str, str]
    node: str

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=check)

    def sbatch(self, *args: str) -> str:
        """Submit a job held (`sbatch --hold --wrap 'sleep 60'`); its id."""
        out = self.run("sbatch", "--parsable", "--hold", "--mem=100", "-c1",
                       f"--chdir={self.root}", "--output=/dev/null", *args,
                       "--wrap", "sleep 60")
        return out.stdout.strip().split(";")[0]

    def jobs(self) -> dict[str, dict[str, Any]]:
        """`squeue --json`, pending and running jobs by id."""
        data = json.loads(self.run("squeue", "--json").stdout)
        return {str(j["job_id"]): j for j in data["jobs"]
                if j["job_state"] in ("PENDING", "RUNNING")}

    def wait_for(self, what: str, check: Any, timeout: float = START_TIMEOUT_S) -> None:
        """Poll `check()` until true (Slurm offers no event to wait on) within `timeout`."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in (self.root / "log").glob("*"))
                raise AssertionError(f"timed out waiting for {what}\n{logs}")
            time.sleep(0.5)


def _write_conf(root: Path, host: str, node: str) -> None:
    dev = root / "dev"
    dev.mkdir()
    for i in range(9):
        (dev / f"nvidia{i}").touch()
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir()
    (root / "slurm.conf").write_text(f"""\
ClusterName=gpuplantest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ReturnToService=2
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
NodeName={node} NodeAddr=127.0.0.1 CPUs=4 RealMemory=4000 Gres=gpu:a100:2,gpu:1g.5gb:7 \
State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    (root / "gres.conf").write_text(f"""\
AutoDetect=off
NodeName={node} Name=gpu Type=a100 File={dev}/nvidia[0-1]
NodeName={node} Name=gpu Type=1g.5gb File={dev}/nvidia[2-8]
""")


def _pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(pid_file: Path) -> None:
    """SIGTERM the daemon named by `pid_file` (one we started); SIGKILL if it lingers."""
    pid = _pid(pid_file)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _kill_leftover_steps(root: Path) -> None:
    """SIGKILL processes working in `root` (job steps of this cluster that outlived it)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = (proc / "cwd").readlink()
        except OSError:
            continue
        if cwd.is_relative_to(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _teardown(cluster: SlurmCluster, pid_files: list[Path]) -> None:
    """Cancel the jobs, let slurmd end their steps, then stop the daemons in order."""
    if _pid(cluster.root / "slurmctld.pid") is not None:
        cluster.run("scancel", "--user=root", check=False)
        with contextlib.suppress(AssertionError, subprocess.SubprocessError):
            cluster.wait_for("the jobs to end", lambda: cluster.run(
                "squeue", "-h", check=False).stdout.strip() == "", timeout=30)
    for pid_file in pid_files:
        _stop(pid_file)
    _kill_leftover_steps(cluster.root)


@pytest.fixture
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """munged + slurmctld + slurmd on loopback, torn down after the test."""
    missing = [p for p in ("slurmctld", "slurmd", "munged", "sbatch")
               if shutil.which(p) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing): "
                    "apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("the Slurm end-to-end test starts slurmd, which needs root")
    root = tmp_path_factory.mktemp("slurm")
    root.chmod(0o755)
    host = socket.gethostname().split(".")[0]
    node = "gpn1"
    _write_conf(root, host, node)
    munge = root / "munge"
    munge.mkdir(mode=0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    pid_files = [root / "slurmd.pid", root / "slurmctld.pid", munge / "munged.pid"]
    try:
        subprocess.run(["munged", "--force", f"--socket={munge}/munge.socket",
                        f"--key-file={key}", f"--pid-file={munge}/munged.pid",
                        f"--log-file={root}/log/munged.log", f"--seed-file={munge}/seed"],
                       check=True, timeout=COMMAND_TIMEOUT_S, env=env)
        subprocess.run(["slurmctld", "-i"], check=True, timeout=COMMAND_TIMEOUT_S, env=env)
        subprocess.run(["slurmd", "-N", node], check=True, timeout=COMMAND_TIMEOUT_S, env=env)
        cluster = SlurmCluster(root=root, env=env, node=node)

        def node_idle() -> bool:
            out = cluster.run("sinfo", "-h", "-n", node, "-o", "%T", check=False)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        cluster.wait_for(f"node {node} to come up idle", node_idle)
        yield cluster
    finally:
        _teardown(SlurmCluster(root=root, env=env, node=node), pid_files)


def gpuplan(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m api.cli ...` from the repository root (this worktree's code)."""
    return subprocess.run([sys.executable, "-m", "api.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
