"""Kubernetes routes: snapshot import, the kube-scheduler extender, plan and export.

The service keeps the latest snapshot (nodes + pods) it was given, or with
`GPUPLAN_K8S_WATCH=true` a live view it lists and watches (started and stopped by this
router's lifespan), so that a scheduler configured with `nodeCacheCapable: true` can send
node names only. Importing and the extender verbs are plain `def` handlers: FastAPI runs
them in its thread pool, never on the event loop. Planning goes through the same solve
service as `POST /v1/plans` (worker pool, time-limit cap, kill on overrun, metrics, size
limits); a snapshot over the size limits is refused (422) and leaves the cached one as it
was; a plan put in the cache must pass the validator against the cached snapshot.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from api.errors import error_responses
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
from api.k8s.objects import K8sObjects, read_objects
from api.k8s.snapshot import Snapshot, build_snapshot
from api.k8s.watch import WatchOptions, bind_pod
from api.pool import PlanJSON
from api.routers.body import ThreadedBodyRoute
from api.routers.deps import ServiceDep, SettingsDep, check_limits
from api.settings import Settings
from models import Plan, PlanRequest, Policy
from solver.validate import validate_plan

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
            watcher = Watcher(live, api, WatchOptions(timeout_s=settings.watch_timeout_s,
                                                      objects=settings.watch_objects))
            app.state.k8s.binder = functools.partial(bind_pod, api)
            watcher.start()
            log.info("watching nodes and pods%s for the extender",
                     " and queue objects" if settings.watch_objects else "")
    try:
        yield
    finally:
        if watcher is not None:
            watcher.stop(wait_s=0.0)


router = APIRouter(tags=["kubernetes"], lifespan=_lifespan, route_class=ThreadedBodyRoute)


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
    objects: list[dict[str, Any]] | None = Field(
        default=None, description=(
            "Kueue ClusterQueue / LocalQueue / ResourceFlavor / Cohort / "
            "WorkloadPriorityClass / Topology, KAI Queue / Topology, PriorityClass and "
            "PodGroup objects (or Lists of them): quotas, "
            "tenants, priorities, topology levels and elastic gangs (docs/kubernetes.md). "
            "Absent: the objects of the last snapshot that had them."))


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


#: The 422 answers of the routes that import or plan a snapshot.
UNPROCESSABLE: dict[int | str, dict[str, Any]] = {422: {
    "description": "Invalid input, a snapshot over the server's size limits, no cached "
                   "snapshot, or a plan the validator rejects.",
    "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/HTTPValidationError"}}},
}}


def _too_many_nodes(nodes: dict[str, Any], settings: Settings) -> None:
    """422 before importing a NodeList with more items than GPUPLAN_MAX_NODES allows."""
    items = nodes.get("items")
    if isinstance(items, list) and len(items) > settings.max_nodes:
        raise RequestValidationError([{
            "type": "limit_exceeded", "loc": ("body", "nodes", "items"), "input": None,
            "msg": f"{len(items)} nodes exceed the server limit max_nodes={settings.max_nodes}",
            "ctx": {"limit": "max_nodes", "max": settings.max_nodes, "actual": len(items)}}])


def _import(state: K8sState, settings: Settings, nodes: dict[str, Any],
            pods: dict[str, Any] | None, policy: Policy | None = None,
            aliases: dict[str, str] | None = None,
            objects: K8sObjects | None = None) -> Snapshot:
    """Import and cache a snapshot within the server's size limits (else 422, and the
    cached snapshot stays what it was)."""
    _too_many_nodes(nodes, settings)
    with state.lock:  # reentrant: update() takes it too
        # K8sState keeps no history: what update() replaces is put back on a refusal.
        before = (state.nodes, state.pods, state.policy, state.aliases, state.objects,
                  state._snapshot, state.plan, state._live_seen)
        try:
            snap = state.update(nodes, pods, policy, aliases, objects)
        except SnapshotError as e:
            raise _unprocessable(e) from e
        try:
            check_limits(snap.request, settings, ("body", "nodes"))
        except RequestValidationError:
            (state.nodes, state.pods, state.policy, state.aliases, state.objects,
             state._snapshot, state.plan, state._live_seen) = before
            raise
    return snap


@router.post("/snapshot", response_model=SnapshotResponse, responses=UNPROCESSABLE)
def snapshot(body: SnapshotBody, state: StateDep, settings: SettingsDep) -> SnapshotResponse:
    """Import nodes and pods into a PlanRequest; the snapshot is cached for the extender.

    The imported request must be within GPUPLAN_MAX_NODES / _GPUS / _JOBS (else 422).
    """
    objects = read_objects(body.objects) if body.objects is not None else None
    snap = _import(state, settings, body.nodes, body.pods, body.policy, body.aliases, objects)
    return SnapshotResponse(request=snap.request, warnings=snap.issues)


@router.post("/nodes", response_model=SnapshotResponse, responses=UNPROCESSABLE)
def nodes(body: NodesBody, state: StateDep, settings: SettingsDep) -> SnapshotResponse:
    """Replace the cached nodes (keeping the cached pods) and re-import."""
    snap = _import(state, settings, body.nodes, None)
    return SnapshotResponse(request=snap.request, warnings=snap.issues)


def _cached(state: K8sState) -> Snapshot:
    snap = state.snapshot
    if snap is None:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "input": None,
                                       "msg": "no snapshot cached; POST /v1/k8s/snapshot"}])
    return snap


def _keep_plan(state: K8sState, snap: Snapshot, result: PlanJSON) -> None:
    """Cache the plan for prioritize, unless a newer snapshot arrived meanwhile (blocking)."""
    plan = result.parse()
    with state.lock:
        if state.snapshot is snap:
            state.plan = plan


@router.post("/plan", response_model=Plan, summary="Plan the cached snapshot",
             responses={**UNPROCESSABLE, **error_responses(429, 500, 504)})
async def plan_snapshot(state: StateDep, service: ServiceDep, settings: SettingsDep
                        ) -> Response:
    """Plan the cached snapshot on the solve service and cache the plan for prioritize.

    As for `POST /v1/plans`: the snapshot's time limit is capped by the server
    (`GPUPLAN_MAX_TIME_LIMIT_S`) and an overrun is stopped (504); a full queue is 429.
    """
    snap = _cached(state)
    check_limits(snap.request, settings, ("body",))
    result = await service.solve(snap.request)
    await run_in_threadpool(_keep_plan, state, snap, result)
    return Response(content=result.json, media_type="application/json")


def _put(state: K8sState, plan: Plan) -> None:
    """Validate `plan` against the cached snapshot and cache it (blocking)."""
    snap = _cached(state)
    found = validate_plan(snap.request, plan)
    if found:
        raise RequestValidationError([
            {"type": "invalid_plan", "loc": ("body",), "input": None,
             "msg": f"{v.rule}: {v.message}",
             "ctx": {"rule": v.rule, "job": v.job, "node": v.node, "gpu": v.gpu}}
            for v in found])
    with state.lock:
        if state.snapshot is snap:
            state.plan = plan


@router.put("/plan", response_model=Plan, summary="Cache a plan for the cached snapshot",
            responses=UNPROCESSABLE)
async def put_plan(plan: Plan, state: StateDep) -> Plan:
    """Cache a plan computed elsewhere for prioritize, once the validator accepts it for the
    cached snapshot (every violation is a 422 entry)."""
    await run_in_threadpool(_put, state, plan)
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
