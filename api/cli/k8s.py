"""`gpuplan k8s snapshot` and `gpuplan k8s export`: Kubernetes in, Kubernetes out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from api.cli.common import fail, load_model, load_plan, load_request, read_json
from api.cli.group import LazyGroup
from api.k8s import (
    SnapshotError,
    apply_script,
    bindings_yaml,
    build_snapshot,
    export_plan,
    mig_parted_yaml,
)
from api.k8s.objects import K8sObjects, objects_from_text, read_objects
from models import Policy

k8s_app = typer.Typer(name="k8s", help="Kubernetes: import a snapshot, export a plan.",
                      cls=LazyGroup, no_args_is_help=True, add_completion=False,
                      rich_markup_mode=None)


def _objects(paths: list[Path]) -> K8sObjects:
    """The queue / priority / topology / pod-group objects of `--objects` files."""
    docs: list[object] = []
    for path in paths:
        try:
            text = path.read_text()
        except OSError as e:
            fail(f"cannot read {path}: {e.strerror or e}")
        try:
            docs.extend(objects_from_text(text, str(path)))
        except SnapshotError as e:
            fail(str(e))
    return read_objects(docs)


def _aliases(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        product, sep, model = v.partition("=")
        if not sep or not product or not model:
            fail(f"--alias expects PRODUCT=MODEL, got {v!r}")
        out[product] = model
    return out


@k8s_app.command("snapshot")
def snapshot(
    nodes: Annotated[Path, typer.Option("--nodes", help="`kubectl get nodes -o json` output.")],
    pods: Annotated[Path, typer.Option("--pods", help="`kubectl get pods -A -o json` output.")],
    output: Annotated[Path | None, typer.Option("-o", "--output",
                                                help="Write the request here (default stdout).")
                      ] = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="A Policy JSON file.")] = None,
    alias: Annotated[list[str] | None, typer.Option(
        "--alias", help="Extra alias PRODUCT=MODEL (repeatable).")] = None,
    objects: Annotated[list[Path] | None, typer.Option(
        "--objects", help="Kueue ClusterQueue / LocalQueue / ResourceFlavor / Cohort / "
                          "WorkloadPriorityClass / Topology, KAI Queue / Topology, "
                          "PriorityClass and PodGroup objects: a JSON or "
                          "multi-document YAML file of objects or Lists, e.g. `kubectl get "
                          "clusterqueues,localqueues -A -o yaml` (repeatable; docs/"
                          "kubernetes.md).")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Exit 2 when any object could not be mapped.")] = False,
) -> None:
    """Build a PlanRequest from kubectl JSON; unmapped objects are listed on stderr."""
    pol = load_model(policy, Policy) if policy is not None else None
    extra = _objects(objects or [])
    try:
        snap = build_snapshot(read_json(nodes), read_json(pods), policy=pol,
                              aliases=_aliases(alias or []), objects=extra)
    except SnapshotError as e:
        source = {"nodes": nodes, "pods": pods}.get(str(e.loc[0]), "input")
        fail(f"{source}: {e}")
    for issue in snap.issues:
        typer.echo(f"gpuplan: warning: {issue.line()}", err=True)
    if strict and snap.issues:
        fail(f"{len(snap.issues)} object(s) could not be mapped (--strict)")
    text = snap.request.model_dump_json(indent=2, exclude_none=True)
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n")


@k8s_app.command("export")
def export(
    plan: Annotated[Path, typer.Argument(help="A Plan JSON file.")],
    request: Annotated[Path | None, typer.Option(
        "--request", help="The PlanRequest the plan answers (needed for MIG configs).")] = None,
    pods: Annotated[Path | None, typer.Option(
        "--pods", help="`kubectl get pods -A -o json`, to bind the pods of gangs.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write mig-parted.yaml, bindings.yaml, apply.sh and export.json here "
                      "(default: export.json on stdout).")] = None,
) -> None:
    """Turn a plan into mig-parted configs, node labels, drains, Bindings and pod patches."""
    the_plan = load_plan(plan)
    req = load_request(request) if request is not None else None
    job_pods = None
    if pods is not None:
        try:
            job_pods = build_snapshot({"kind": "List", "items": []}, read_json(pods)).job_pods
        except SnapshotError as e:
            fail(f"{pods}: {e.message}")
    result = export_plan(the_plan, req, job_pods)
    for w in result.warnings:
        typer.echo(f"gpuplan: warning: {w}", err=True)
    text = result.model_dump_json(indent=2)
    if out is None:
        typer.echo(text)
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "export.json").write_text(text + "\n")
        (out / "bindings.yaml").write_text(bindings_yaml(result))
        (out / "apply.sh").write_text(apply_script(result))
        if result.mig_parted is not None:
            (out / "mig-parted.yaml").write_text(mig_parted_yaml(result))
    except OSError as e:
        fail(f"cannot write to {out}: {e.strerror or e}")
    typer.echo(json.dumps({"out": str(out), "bindings": len(result.bindings),
                           "nodes_to_reconfigure": [d.node for d in result.drain]}))
