"""`gpuplan slurm snapshot|apply|sync`: read a Slurm cluster, act on a plan, loop."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from api.cli.common import fail, load_model, load_plan
from api.importing import SnapshotError
from api.slurm import (
    PlannerUnavailable,
    SlurmUnavailable,
    Snapshot,
    SnapshotOptions,
    SyncRound,
    execute,
    export_plan,
    file_source,
    live_source,
    local_planner,
    service_planner,
    sync_loop,
    sync_once,
)
from api.slurm.sync import Source, parse_interval
from models import Policy

log = logging.getLogger(__name__)

slurm_app = typer.Typer(name="slurm", no_args_is_help=True,
                        help="Slurm: snapshot the GPU queue, apply a plan, sync in a loop.")

SinfoOpt = Annotated[Path | None, typer.Option(
    "--sinfo", help="`sinfo --json` output (or `scontrol --json show nodes`).")]
SqueueOpt = Annotated[Path | None, typer.Option("--squeue", help="`squeue --json` output.")]
LiveOpt = Annotated[bool, typer.Option(
    "--live", help="Run `sinfo --json` and `squeue --json` instead of reading files.")]
PolicyOpt = Annotated[Path | None, typer.Option(
    "--policy", help="A Policy JSON file (default: no preemption, no MIG changes).")]
GresTypeOpt = Annotated[list[str] | None, typer.Option(
    "--gres-type", help="Map a GRES type to a catalog model: TYPE=MODEL (repeatable; "
                        "`gpu=MODEL` for untyped GPUs).")]
QosOpt = Annotated[list[str] | None, typer.Option(
    "--qos-weight", help="Job weight of a QOS: QOS=WEIGHT (repeatable; default 1).")]
ScontrolOpt = Annotated[str, typer.Option("--scontrol", help="The scontrol program.")]
PriorityOpt = Annotated[float, typer.Option(
    "--priority-weight", min=0.0, help="Scale job weights by Slurm priority: the top job "
                                       "weighs 1 + this more than the lowest (default 0).")]
RequeueOpt = Annotated[bool, typer.Option(
    "--requeue-running", help="Let the plan move or stop running jobs that Slurm may requeue "
                              "(they restart from scratch). Default: running jobs stay.")]


def _pairs(values: list[str] | None, flag: str, form: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or []:
        key, sep, value = v.partition("=")
        if not sep or not key or not value:
            fail(f"{flag} expects {form}, got {v!r}")
        out[key] = value
    return out


def _options(policy: Path | None, gres_type: list[str] | None, qos_weight: list[str] | None,
             requeue_running: bool = False, priority_weight: float = 0.0) -> SnapshotOptions:
    weights: dict[str, float] = {}
    for qos, raw in _pairs(qos_weight, "--qos-weight", "QOS=WEIGHT").items():
        try:
            weights[qos] = float(raw)
        except ValueError:
            fail(f"--qos-weight {qos}: {raw!r} is not a number")
        if not 0 < weights[qos] < float("inf"):
            fail(f"--qos-weight {qos}: the weight must be > 0")
    return SnapshotOptions(policy=load_model(policy, Policy) if policy is not None else None,
                           gres_types=_pairs(gres_type, "--gres-type", "TYPE=MODEL"),
                           qos_weights=weights, requeue_running=requeue_running,
                           priority_weight=priority_weight)


def _source(sinfo: Path | None, squeue: Path | None, live: bool) -> Source:
    if live:
        if sinfo is not None or squeue is not None:
            fail("give either --live or --sinfo/--squeue files, not both")
        return live_source()
    if sinfo is None or squeue is None:
        fail("give --sinfo FILE and --squeue FILE, or --live")
    return file_source(sinfo, squeue)


def _snapshot(source: Source, options: SnapshotOptions) -> Snapshot:
    try:
        sinfo, squeue = source()
    except SlurmUnavailable as e:
        fail(str(e), code=1)
    try:
        snap = options.build(sinfo, squeue)
    except SnapshotError as e:
        fail(f"{'sinfo' if e.loc and e.loc[0] == 'nodes' else 'squeue'}: {e}")
    for issue in snap.issues:
        typer.echo(f"gpuplan: warning: {issue.line()}", err=True)
    return snap


@slurm_app.command("snapshot")
def snapshot(
    sinfo: SinfoOpt = None,
    squeue: SqueueOpt = None,
    live: LiveOpt = False,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the request here (default stdout).")] = None,
    policy: PolicyOpt = None,
    gres_type: GresTypeOpt = None,
    qos_weight: QosOpt = None,
    requeue_running: RequeueOpt = False,
    priority_weight: PriorityOpt = 0.0,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Exit 2 when any node or job could not be mapped.")] = False,
) -> None:
    """Build a PlanRequest from Slurm's JSON; what cannot be mapped is listed on stderr."""
    snap = _snapshot(_source(sinfo, squeue, live),
                     _options(policy, gres_type, qos_weight, requeue_running, priority_weight))
    if strict and snap.issues:
        fail(f"{len(snap.issues)} node(s)/job(s) could not be mapped as they stand (--strict)")
    text = snap.request.model_dump_json(indent=2, exclude_none=True)
    if output is None:
        typer.echo(text)
        return
    try:
        output.write_text(text + "\n")
    except OSError as e:
        fail(f"cannot write {output}: {e.strerror or e}")


def _report(round_: SyncRound | None, actions_only: bool = False) -> None:
    if round_ is None:
        return
    for w in round_.actions.warnings:
        typer.echo(f"gpuplan: warning: {w}", err=True)
    if actions_only:
        for a in round_.actions.actions:
            typer.echo(a.line())
    for r in round_.results:
        status = "ok" if r.returncode == 0 else f"failed ({r.returncode}): {r.output}"
        typer.echo(f"{r.action.line()}  # {status}", err=True)


@slurm_app.command("apply")
def apply(
    plan: Annotated[Path, typer.Argument(help="A Plan JSON file answering the snapshot.")],
    sinfo: SinfoOpt = None,
    squeue: SqueueOpt = None,
    live: LiveOpt = False,
    gres_type: GresTypeOpt = None,
    run: Annotated[bool, typer.Option(
        "--execute", help="Run the scontrol commands (default: print them).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the actions as JSON.")] = False,
    scontrol: ScontrolOpt = "scontrol",
) -> None:
    """Turn PLAN into scontrol commands: pin and release placed jobs, requeue preempted
    ones, comment left-out ones; MIG changes as operator steps. Dry run by default."""
    the_plan = load_plan(plan)
    snap = _snapshot(_source(sinfo, squeue, live), _options(None, gres_type, None))
    known = {j.name for j in snap.request.jobs}
    stale = [a.job for a in the_plan.assignments if a.job not in known]
    if stale:
        typer.echo(f"gpuplan: warning: {len(stale)} planned job(s) not in the current "
                   f"queue, ignored: {', '.join(stale[:10])}", err=True)
    result = export_plan(the_plan, snap, scontrol)
    results = execute(result) if run else []
    _report(SyncRound(snap, the_plan, result, results), actions_only=not as_json)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    if any(r.returncode != 0 for r in results):
        raise typer.Exit(1)


@slurm_app.command("sync")
def sync(
    every: Annotated[str, typer.Option(
        "--every", help="Interval between rounds: 30s, 2m, 1h.")] = "30s",
    once: Annotated[bool, typer.Option("--once", help="One round, then exit (cron).")] = False,
    url: Annotated[str | None, typer.Option(
        "--url", help="Plan through this gpuplan service (default: in process).")] = None,
    token: Annotated[str | None, typer.Option(
        "--token", envvar="GPUPLAN_API_TOKEN", help="Bearer token for --url.")] = None,
    run: Annotated[bool, typer.Option(
        "--execute", help="Run the scontrol commands (default: print them).")] = False,
    policy: PolicyOpt = None,
    gres_type: GresTypeOpt = None,
    qos_weight: QosOpt = None,
    requeue_running: RequeueOpt = False,
    priority_weight: PriorityOpt = 0.0,
    plan_output: Annotated[Path | None, typer.Option(
        "--plan-output", help="Write each round's plan here (overwritten every round).")
                           ] = None,
    scontrol: ScontrolOpt = "scontrol",
) -> None:
    """Snapshot the live cluster, plan, apply; every INTERVAL, or once. One JSON summary
    line per round on stdout; a round that fails changes nothing."""
    try:
        interval = parse_interval(every)
    except ValueError:
        fail(f"--every: {every!r} is not a duration such as 30s, 2m or 1h")
    options = _options(policy, gres_type, qos_weight, requeue_running, priority_weight)
    planner = service_planner(url, token) if url else local_planner()
    source = live_source(scontrol=scontrol)

    def show(r: SyncRound) -> None:
        if plan_output is not None:
            try:
                plan_output.write_text(r.plan.model_dump_json(indent=1) + "\n")
            except OSError as e:
                log.error("cannot write %s: %s", plan_output, e.strerror or e)
        for issue in r.snapshot.issues:
            typer.echo(f"gpuplan: warning: {issue.line()}", err=True)
        _report(r, actions_only=not run)
        typer.echo(json.dumps(r.summary()))

    if once:
        try:
            result = sync_once(source, planner, options, execute_actions=run, scontrol=scontrol)
        except (SlurmUnavailable, PlannerUnavailable) as e:
            fail(str(e), code=1)
        except SnapshotError as e:
            fail(str(e))
        show(result)
        if any(r.returncode != 0 for r in result.results):
            raise typer.Exit(1)
        return
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    sync_loop(source, planner, options, every=interval, stop=stop, execute_actions=run,
              scontrol=scontrol, on_round=show)

