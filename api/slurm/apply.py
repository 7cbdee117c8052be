"""A Plan -> Slurm actions: `scontrol` commands per job, and what an operator must run.

For each pending job the plan places, in this order (one group per job; a failed command
stops its group, so a job is never released unpinned):

1. `scontrol hold` when the job is not held (so Slurm cannot start it half-updated);
2. `scontrol update JobId=J TresPerNode= TresPerJob= TresPerTask= TresPerSocket=`
   (Slurm 22.05 merges a new GPU request with the old one, so the old one is cleared
   first; should the next step fail, the old request is put back);
3. `scontrol update JobId=J NodeList=<planned nodes> TresPerNode=gres:gpu:<type>:<n>
   Comment="gpuplan: ..."`, the type being the Slurm GRES type of the planned GPUs;
4. `scontrol release J`.

Slurm picks the device indices on the pinned nodes itself: the plan fixes node and GPU
type (and so model and MIG profile), not which GPU of that type. Running jobs the plan
migrates or preempts get `scontrol requeuehold` (they restart from scratch; the next sync
round places them). Pending jobs the plan leaves out, and pending jobs the snapshot could
not map, get gpuplan's reason as their comment and stay as they are. MIG layout changes
are printed as operator steps (drain, nvidia-smi, gres.conf, slurmd restart, resume) and
never run; jobs placed on instances that do not exist yet wait, held, with a comment.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from api.k8s.export import final_layout
from api.slurm.jobs import TRES_FIELDS, SlurmJob
from api.slurm.snapshot import PART_SEP, Snapshot
from models import Assignment, Placement, Plan

log = logging.getLogger(__name__)

ActionKind = Literal["hold", "clear", "pin", "restore", "release", "requeue", "comment",
                     "operator"]

#: Slurm keeps comments short in listings; longer ones are cut here.
COMMENT_MAX = 200
COMMENT_PREFIX = "gpuplan: "


class SlurmAction(BaseModel):
    """One command. `operator` actions are for a person and never executed."""

    model_config = ConfigDict(extra="forbid")

    job: str | None = Field(default=None, description="Slurm job id (None: node-level).")
    kind: ActionKind
    argv: list[str]
    note: str = ""

    def line(self) -> str:
        """The command as a shell line (`# ...` for operator prose and for the restore step,
        which runs only when a pin fails)."""
        if not self.argv:
            return f"# {self.note}"
        text = shlex.join(self.argv)
        return f"# if the pin fails: {text}" if self.kind == "restore" else text


class SlurmApply(BaseModel):
    """Everything `gpuplan slurm apply` would do, in order, and what it cannot do."""

    model_config = ConfigDict(extra="forbid")

    actions: list[SlurmAction] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class ActionResult(BaseModel):
    """What running one action gave."""

    model_config = ConfigDict(extra="forbid")

    action: SlurmAction
    returncode: int
    output: str = ""


def _comment(text: str) -> str:
    text = COMMENT_PREFIX + " ".join(text.split())
    return text if len(text) <= COMMENT_MAX else text[: COMMENT_MAX - 3] + "..."


class _Exporter:
    def __init__(self, plan: Plan, snap: Snapshot, scontrol: str) -> None:
        self.plan = plan
        self.snap = snap
        self.sc = scontrol
        self.out = SlurmApply()
        self.new_instances = {
            (ch.node, ch.gpu, m.key()) for ch in plan.mig_changes for m in ch.create}

    def cmd(self, job: str | None, kind: ActionKind, *args: str, note: str = "") -> None:
        """Append `scontrol <args>` for `job`."""
        self.out.actions.append(SlurmAction(job=job, kind=kind, argv=[self.sc, *args],
                                            note=note))

    def comment(self, job: SlurmJob, text: str) -> None:
        """Set gpuplan's comment on `job` unless it is there already."""
        self.comment_id(job.id, job.comment, text)

    def comment_id(self, job_id: str, current: str, text: str) -> None:
        """Set gpuplan's comment on a job known by id and current comment."""
        comment = _comment(text)
        if current != comment:
            self.cmd(job_id, "comment", "update", f"JobId={job_id}", f"Comment={comment}",
                     note="leave pending with gpuplan's reason")

    def gres_type(self, p: Placement) -> str | None:
        """The Slurm GRES type of a planned GPU or MIG instance ('' untyped, None unknown)."""
        node = self.snap.nodes[p.node]
        if p.mig is not None:
            return node.mig_types.get(p.mig.profile)
        dev = node.devices.get(p.gpu)
        return dev.type if dev is not None and dev.instance is None else None

    def tres(self, placements: Sequence[Placement]) -> str | None:
        """`gres:gpu:a100:2[,gres:gpu:b:1]` for the placements of one node."""
        types = Counter(self.gres_type(p) for p in placements)
        if None in types:
            return None
        return ",".join(f"gres:gpu:{t}:{n}" if t else f"gres:gpu:{n}"
                        for t, n in sorted((str(t), n) for t, n in types.items()))

    def pin(self, a: Assignment, job: SlurmJob) -> None:
        """Hold (if needed), clear, pin, release (and the restore step) for a placed job."""
        by_node: dict[str, list[Placement]] = {}
        for p in a.placements:
            by_node.setdefault(p.node, []).append(p)
        waiting = [p for p in a.placements if p.mig is not None
                   and (p.node, p.gpu, p.mig.key()) in self.new_instances]
        if waiting:
            self.comment(job, f"planned on {waiting[0].node} GPU {waiting[0].gpu} "
                              f"({waiting[0].mig and waiting[0].mig.profile}), waiting for "
                              "its MIG reconfiguration")
            return
        per_node = {n: self.tres(ps) for n, ps in by_node.items()}
        problem = self._pin_problem(job, by_node, per_node)
        if problem is not None:
            self.out.warnings.append(f"job {job.id}: {problem}; left pending")
            self.comment(job, f"plan cannot be pinned in Slurm: {problem}")
            return
        nodes = ",".join(by_node)
        req = job.request
        assert req is not None
        if len(by_node) == 1 or req.per_node:
            tres = f"TresPerNode={next(iter(per_node.values()))}"
        else:
            gtype = self.gres_type(a.placements[0])
            typed = f"{gtype}:" if gtype else ""
            tres = f"TresPerJob=gres:gpu:{typed}{len(a.placements)}"
        what = "; ".join(f"{n}: {t}" for n, t in per_node.items())
        if not job.held:
            self.cmd(job.id, "hold", "hold", job.id, note="stop Slurm starting it mid-update")
        self.cmd(job.id, "clear", "update", f"JobId={job.id}", *(f"{k}=" for k in TRES_FIELDS),
                 note="Slurm merges a new GPU request with the old one: clear it first")
        self.cmd(job.id, "pin", "update", f"JobId={job.id}", f"NodeList={nodes}", tres,
                 f"Comment={_comment('placed ' + what)}", note=f"pin to {what}")
        self.cmd(job.id, "release", "release", job.id, note="let Slurm start it")
        self.cmd(job.id, "restore", "update", f"JobId={job.id}",
                 *(f"{k}={v}" for k, v in job.tres.items() if v),
                 note="only if the pin fails: the GPU request as it was")

    def _pin_problem(self, job: SlurmJob, by_node: dict[str, list[Placement]],
                     per_node: dict[str, str | None]) -> str | None:
        req = job.request
        if req is None:
            return "not a GPU job"
        if any(t is None for t in per_node.values()):
            return "a planned GPU has no Slurm GRES type"
        if job.excluded_nodes and set(by_node) & set(job.excluded_nodes):
            return f"planned on excluded node(s) {sorted(set(by_node) & set(job.excluded_nodes))}"
        ours = job.comment.startswith(COMMENT_PREFIX)
        if job.required_nodes and not ours and not set(by_node) <= set(job.required_nodes):
            return f"planned outside its required nodes {job.required_nodes}"
        types = {str(self.gres_type(p)) for ps in by_node.values() for p in ps}
        if len(by_node) > 1 and len(types) != 1:
            # One TresPerNode/TresPerJob string covers every node of the job.
            return f"planned on several GPU types {sorted(types)} across nodes"
        if req.per_node and len(by_node) > 1:
            split = {n: len(ps) for n, ps in by_node.items()}
            if len(by_node) != job.node_count or len(set(split.values())) != 1:
                return (f"plan splits it {split}; Slurm gives every node the same GPUs "
                        f"({req.count} on each of {job.node_count} nodes)")
        return None

    def run(self) -> SlurmApply:
        """All actions of the plan, in order: requeues, pins, comments, operator steps."""
        jobs = self.snap.jobs
        requeued: set[str] = set()
        migrated = set(self.plan.migrated)
        for name in [*self.plan.preempted, *self.plan.migrated]:
            job = jobs.get(name)
            if job is None or PART_SEP in name or job.id in requeued:
                continue
            requeued.add(job.id)
            why = "migrated" if name in migrated else "preempted"
            self.cmd(job.id, "requeue", "requeuehold", job.id,
                     note=f"{why} by the plan: back to pending, held, for the next round")
        for a in self.plan.assignments:
            job = jobs.get(a.job)
            if job is None or job.state != "PENDING":
                continue
            self.pin(a, job)
        for u in self.plan.unplaced:
            job = jobs.get(u.job)
            if job is not None and job.state == "PENDING":
                self.comment(job, f"{u.reason}: {u.detail}" if u.detail else u.reason)
        for job_id, (current, message) in self.snap.left_out.items():
            self.comment_id(job_id, current, f"not planned: {message}")
        self.mig_steps()
        return self.out

    def mig_steps(self) -> None:
        """The operator steps of the plan's MIG changes, per node."""
        req = self.snap.request
        gpus = {(n.name, g.index): g for n in req.cluster.nodes for g in n.gpus}
        by_node: dict[str, list[str]] = {}
        for ch in self.plan.mig_changes:
            gpu = gpus.get((ch.node, ch.gpu))
            current = [m.key() for m in gpu.mig_instances] if gpu is not None else []
            layout = final_layout(current, [m.key() for m in ch.destroy],
                                  [m.key() for m in ch.create])
            profiles = ",".join(i.profile for i in sorted(layout, key=lambda i: i.start))
            by_node.setdefault(ch.node, []).append(
                f"nvidia-smi mig -i {ch.gpu} -dci && nvidia-smi mig -i {ch.gpu} -dgi && "
                f"nvidia-smi mig -i {ch.gpu} -cgi {profiles} -C")
        for node, steps in by_node.items():
            self.cmd(None, "operator", "update", f"NodeName={node}", "State=DRAIN",
                     "Reason=gpuplan: MIG reconfiguration", note=f"drain {node}")
            for step in steps:
                self.out.actions.append(SlurmAction(kind="operator", argv=[],
                                                    note=f"on {node}: {step}"))
            self.out.actions.append(SlurmAction(kind="operator", argv=[], note=(
                f"on {node}: update gres.conf (AutoDetect=nvml does it) and the node's Gres= "
                "in slurm.conf, then restart slurmd")))
            self.cmd(None, "operator", "update", f"NodeName={node}", "State=RESUME",
                     note=f"resume {node}")


def export_plan(plan: Plan, snapshot: Snapshot, scontrol: str = "scontrol") -> SlurmApply:
    """The actions that carry out `plan` on the Slurm cluster `snapshot` was taken of."""
    return _Exporter(plan, snapshot, scontrol).run()


Runner = Callable[[Sequence[str]], tuple[int, str]]


def run_command(argv: Sequence[str], timeout: float = 60.0) -> tuple[int, str]:
    """Run one command; (return code, stdout+stderr). A missing program is code 127."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except FileNotFoundError:
        return 127, f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"{shlex.join(argv)}: timed out after {timeout:g}s"
    return done.returncode, (done.stdout + done.stderr).strip()


def execute(result: SlurmApply, runner: Runner = run_command) -> list[ActionResult]:
    """Run the actions in order, operator steps excepted.

    A failure skips the rest of that job's actions, so a job is never released unpinned.
    If its GPU request was already cleared, the `restore` action puts it back; if gpuplan
    held the job itself, it is then released, as it was. `restore` runs only then.
    Failures are logged.
    """
    out: list[ActionResult] = []
    failed: set[str] = set()
    done: dict[str, set[str]] = {}

    def run(action: SlurmAction) -> int:
        code, text = runner(action.argv)
        out.append(ActionResult(action=action, returncode=code, output=text))
        if code != 0:
            log.warning("%s failed (%d): %s", action.line(), code, text)
        return code

    def undo(job: str) -> None:
        mine = {a.kind: a for a in result.actions if a.job == job}
        if "clear" in done[job] and "restore" in mine and run(mine["restore"]) != 0:
            return
        if "hold" in done[job] and "release" in mine:
            run(mine["release"])

    for action in result.actions:
        job = action.job
        if action.kind in ("operator", "restore") or (job is not None and job in failed):
            continue
        code = run(action)
        if job is None:
            continue
        if code == 0:
            done.setdefault(job, set()).add(action.kind)
            continue
        failed.add(job)
        if action.kind != "release":
            done.setdefault(job, set())
            undo(job)
    return out
