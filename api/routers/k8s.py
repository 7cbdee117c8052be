"""Kubernetes routes: snapshot import, the kube-scheduler extender, plan and export.

The service keeps the latest snapshot (nodes + pods) it was given, or with
`GPUPLAN_K8S_WATCH=true` a live view it lists and watches (started and stopped by this
router's lifespan), so that a scheduler configured with `nodeCacheCapable: true` can send
node names only. Route handlers are plain `def`: FastAPI runs them in its thread pool,
never on the event loop.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from api.k8s import (
    ClusterCache,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
    ImportIssue,
    K8sExport,
    K8sSettings,
    K8sState,
    SnapshotError,
    Watcher,
    export_plan,
    extender_bind,
    extender_filter,
    extender_prioritize,
    make_api,
)
from api.k8s.snapshot import build_snapshot
from api.k8s.watch import WatchOptions, bind_pod
from models import Plan, PlanRequest, Policy
from solver import plan as solve

log = logging.getLogger("gpuplan.k8s")


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Build the Kubernetes state at start-up; with `watch`, list and watch the cluster."""
    settings: K8sSettings = getattr(app.state, "k8s_settings", None) or K8sSettings()
    watcher: Watcher | None = None
    if getattr(app.state, "k8s", None) is None:
        live = ClusterCache() if settings.watch else None
        app.state.k8s = K8sState(settings, live=live)
        if live is not None:
            api = make_api(settings.kubeconfig, settings.context)
            watcher = Watcher(live, api, WatchOptions(timeout_s=settings.watch_timeout_s))
            app.state.k8s.binder = functools.partial(bind_pod, api)
            watcher.start()
            log.info("watching nodes and pods for the extender")
    try:
        yield
    finally:
        if watcher is not None:
            watcher.stop(wait_s=0.0)


router = APIRouter(tags=["kubernetes"], lifespan=_lifespan)


def get_state(request: Request) -> K8sState:
    """The app's Kubernetes state (created on first use)."""
    state: K8sState | None = getattr(request.app.state, "k8s", None)
    if state is None:
        state = K8sState()
        request.app.state.k8s = state
    return state


StateDep = Annotated[K8sState, Depends(get_state)]


class SnapshotBody(BaseModel):
    """`kubectl get nodes -o json` and `kubectl get pods -A -o json`, plus options."""

    model_config = ConfigDict(extra="forbid")

    nodes: dict[str, Any] = Field(description="A v1 NodeList (or List of Nodes).")
    pods: dict[str, Any] = Field(description="A v1 PodList (or List of Pods).")
    policy: Policy | None = None
    aliases: dict[str, str] | None = Field(
        default=None, description="Extra GFD product -> catalog model aliases.")


class SnapshotResponse(BaseModel):
    """The imported request and what could not be mapped."""

    model_config = ConfigDict(extra="forbid")

    request: PlanRequest
    warnings: list[ImportIssue]


class NodesBody(BaseModel):
    """A fresh NodeList; the cached pods are kept."""

    model_config = ConfigDict(extra="forbid")

    nodes: dict[str, Any]


class ExportBody(BaseModel):
    """A plan to export, with the request it answers and optionally the pods."""

    model_config = ConfigDict(extra="forbid")

    plan: Plan
    request: PlanRequest | None = None
    pods: dict[str, Any] | None = Field(default=None, description="A v1 PodList, for gangs.")


def _unprocessable(err: SnapshotError) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": ("body", *err.loc),
                                    "msg": err.message, "input": None}])


@router.post("/snapshot", response_model=SnapshotResponse)
def snapshot(body: SnapshotBody, state: StateDep) -> SnapshotResponse:
    """Import nodes and pods into a PlanRequest; the snapshot is cached for the extender."""
    try:
        snap = state.update(body.nodes, body.pods, body.policy, body.aliases)
    except SnapshotError as e:
        raise _unprocessable(e) from e
    return SnapshotResponse(request=snap.request, warnings=snap.issues)


@router.post("/nodes", response_model=SnapshotResponse)
def nodes(body: NodesBody, state: StateDep) -> SnapshotResponse:
    """Replace the cached nodes (keeping the cached pods) and re-import."""
    try:
        snap = state.update(body.nodes, None)
    except SnapshotError as e:
        raise _unprocessable(e) from e
    return SnapshotResponse(request=snap.request, warnings=snap.issues)


@router.post("/plan", response_model=Plan)
def plan_snapshot(state: StateDep) -> Plan:
    """Plan the cached snapshot with `solver.plan` and cache the plan for prioritize."""
    snap = state.snapshot
    if snap is None:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "input": None,
                                       "msg": "no snapshot cached; POST /v1/k8s/snapshot"}])
    result = solve(snap.request)
    with state.lock:
        if state.snapshot is snap:
            state.plan = result
    return result


@router.put("/plan", response_model=Plan)
def put_plan(plan: Plan, state: StateDep) -> Plan:
    """Cache a plan computed elsewhere (for the cached snapshot) for prioritize."""
    with state.lock:
        state.plan = plan
    return plan


@router.post("/export", response_model=K8sExport)
def export(body: ExportBody) -> K8sExport:
    """mig-parted configs, node labels, drains, Bindings and pod patches for a plan."""
    job_pods = None
    if body.pods is not None:
        try:
            job_pods = build_snapshot({"kind": "List", "items": []}, body.pods).job_pods
        except SnapshotError as e:
            raise _unprocessable(SnapshotError(("pods",), e.message)) from e
    return export_plan(body.plan, body.request, job_pods)


class ExtenderStatus(BaseModel):
    """What the extender judges against: the view's source and the assumed pods."""

    model_config = ConfigDict(extra="forbid")

    watching: bool = Field(description="A live list/watch feeds the view.")
    synced: bool = Field(description="The watch has listed nodes and pods at least once.")
    resource_versions: dict[str, str | None]
    view: bool = Field(description="A view exists (synced watch or posted snapshot).")
    gpu_nodes: int
    assumed: dict[str, str] = Field(description="Assumed pod (ns/name) -> node.")
    bound: list[str] = Field(description="Assumed pods gpuplan bound itself (bindVerb).")


@router.get("/extender/status", response_model=ExtenderStatus)
def extender_status(state: StateDep) -> ExtenderStatus:
    """The extender's view: watch progress, node count and the pods it assumes placed."""
    snap = state.view()
    live = state.live
    with state.lock:
        assumed = {a.pod: a.node for a in state.assumed.values()}
        bound = sorted(a.pod for a in state.assumed.values() if a.bound)
    return ExtenderStatus(
        watching=live is not None, synced=live is not None and live.synced,
        resource_versions=dict(live.resource_versions) if live is not None else {},
        view=snap is not None, gpu_nodes=len(snap.snapshot.nodes) if snap else 0,
        assumed=assumed, bound=bound)


@router.post("/extender/filter", response_model=ExtenderFilterResult,
             response_model_exclude_none=False)
def filter_nodes(args: Annotated[ExtenderArgs, Body()], state: StateDep
                 ) -> ExtenderFilterResult:
    """kube-scheduler extender filter verb (extenderv1.ExtenderArgs -> FilterResult)."""
    return extender_filter(args, state)


@router.post("/extender/prioritize", response_model=list[HostPriority])
def prioritize_nodes(args: Annotated[ExtenderArgs, Body()], state: StateDep
                     ) -> list[HostPriority]:
    """kube-scheduler extender prioritize verb (ExtenderArgs -> HostPriorityList)."""
    return extender_prioritize(args, state)


@router.post("/extender/bind", response_model=ExtenderBindingResult)
def bind_node(args: Annotated[ExtenderBindingArgs, Body()], state: StateDep
              ) -> ExtenderBindingResult:
    """kube-scheduler extender bind verb (ExtenderBindingArgs -> ExtenderBindingResult)."""
    return extender_bind(args, state)
