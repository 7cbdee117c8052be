"""Dress a planner's placements as a wire Plan: MIG changes, moves, reasons, objective, stats.

Every backend (exact or heuristic) ends here, so the bookkeeping is written once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from heuristics.fragmentation import PlanUse, fragmentation, mig_layouts, plan_use
from heuristics.result import HeuristicResult
from models import (
    Assignment,
    GpuModel,
    Instance,
    MigChange,
    MigInstance,
    Placement,
    Plan,
    PlanRequest,
    PlanStats,
    PlanStatus,
    Unplaced,
    is_valid_layout,
)
from models.instance import per_request
from models.objective import Evaluation, compiled_infos, evaluate, gpu_models_of
from models.rules import lexicographic_levels
from solver.level_report import level_reasons, level_stats


def final_layouts(
    request: PlanRequest,
    placements: Mapping[str, Sequence[Placement]],
    use: PlanUse | None = None,
) -> dict[tuple[str, int], frozenset[Instance]]:
    """The final layout of every MIG GPU (`use`: the placements' `plan_use` when the
    caller has it).

    Instances hosting a placed job always stay; current instances that host nothing are
    kept when they fit beside those (fewer reconfigurations, in current-layout order), and
    nothing else is created.
    """
    used = (plan_use(request, placements) if use is None else use).mig
    out: dict[tuple[str, int], frozenset[Instance]] = {}
    for g in _mig_facts(request):
        hosting = used.get(g.key)
        if hosting is None:
            out[g.key] = g.idle
        elif g.keeps_now and hosting <= g.now:
            # jobs only on current instances of a layout `_layout` keeps whole (what a
            # running job kept in place leaves): the current layout, without the search
            out[g.key] = g.now
        else:
            out[g.key] = _layout(request, g.model, g.current, hosting)
    return out


def _layout(request: PlanRequest, model: GpuModel, current: list[Instance],
            used: set[Instance]) -> frozenset[Instance]:
    """The final layout of one MIG GPU whose instances `used` host jobs (`final_layouts`)."""
    layout = set(used)
    if not request.policy.allow_mig_reconfiguration:
        layout |= set(current)
        return frozenset(layout)
    every = layout | set(current)
    if is_valid_layout(model, every):
        # every part of a valid layout is valid: the loop below would keep them all
        return frozenset(every)
    for inst in current:
        if inst not in layout and is_valid_layout(model, [*layout, inst]):
            layout.add(inst)
    return frozenset(layout)


class _MigGpu(NamedTuple):
    """What finishing reads of one MIG GPU, the same for every plan of a request."""

    key: tuple[str, int]
    model: GpuModel
    current: list[Instance]
    #: the current instances as a set
    now: frozenset[Instance]
    #: the final layout when it hosts no job
    idle: frozenset[Instance]
    #: `_layout` keeps the whole current layout beside any of its own instances (no
    #: reconfiguration, or the current layout is valid)
    keeps_now: bool


def _mig_facts(request: PlanRequest) -> list[_MigGpu]:
    """Per MIG GPU, in cluster order, what `final_layouts` and `mig_changes` read of it
    (computed once per request, so that a plan pays only for the MIG GPUs it uses; GPUs
    with the same current layout share its facts, which no reader changes)."""
    def build(r: PlanRequest) -> list[_MigGpu]:
        catalog = r.cluster.catalog()
        # (model, current layout object) -> (idle layout, kept whole): `mig_layouts`
        # gives GPUs of one layout one list, and a large cluster has few layouts
        seen: dict[tuple[str, int], tuple[frozenset[Instance], bool]] = {}
        out = []
        for g in mig_layouts(r):
            model = catalog[g.model]
            facts = seen.get((g.model, id(g.instances)))
            if facts is None:
                idle = _layout(r, model, g.instances, set())
                # with reconfiguration, `_layout` keeps all of an invalid current layout
                # never (each instance it adds keeps the layout valid): idle == now then
                # says the current layout is valid
                facts = seen[(g.model, id(g.instances))] = (
                    idle, not r.policy.allow_mig_reconfiguration or idle == g.now)
            out.append(_MigGpu(g.gpu, model, g.instances, g.now, *facts))
        return out
    return per_request(request, "mig_facts", build)


def mig_changes(
    request: PlanRequest, layouts: Mapping[tuple[str, int], frozenset[Instance]]
) -> list[MigChange]:
    """Per MIG GPU, the instances to destroy and create to reach its final layout."""
    out: list[MigChange] = []
    for g in _mig_facts(request):
        fin = layouts.get(g.key)
        if fin is None or fin == g.now:
            continue
        destroy = sorted(g.now - fin, key=lambda i: (i.start, i.profile))
        create = sorted(fin - g.now, key=lambda i: (i.start, i.profile))
        out.append(MigChange(
            node=g.key[0], gpu=g.key[1],
            destroy=[MigInstance(profile=i.profile, start=i.start) for i in destroy],
            create=[MigInstance(profile=i.profile, start=i.start) for i in create],
        ))
    return out


def plan_stats(
    request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
    use: PlanUse | None = None, placed: int | None = None,
) -> dict[str, float | int]:
    """gpus_total, gpus_allocated, utilization and job counts (docs/semantics.md);
    `use`: the placements' `plan_use`, `placed`: the request's jobs they place, when the
    caller has them."""
    total = len(per_request(request, "gpu_models", gpu_models_of))
    taken = (plan_use(request, placements) if use is None else use).taken
    allocated = sum(taken.values())
    if placed is None:
        placed = sum(1 for j in request.jobs if placements.get(j.name))
    return {
        "gpus_total": total,
        "gpus_allocated": round(allocated, 9),
        "utilization": round(allocated / total, 9) if total else 0.0,
        "jobs_placed": placed,
        "jobs_unplaced": len(request.jobs) - placed,
    }


def _accounts(request: PlanRequest, placements: Mapping[str, list[Placement]],
              reasons: Mapping[str, tuple[str, str]], feasible: bool, levels: bool,
              default_reason: tuple[str, str]) -> tuple[list[Assignment], list[Unplaced]]:
    """Every job of `request` in request order, as an Assignment (placed) or an Unplaced
    with its reason (a running job left out is `preempted`; `levels`: the reasons say who
    reclaimed it or which class).

    The jobs' names and current placements are read from their JobInfos when the request
    is compiled (`compiled_infos`: a tenth of the cost of reading them from the job
    models on 20,000 jobs)."""
    assigned: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    assign, leave = assigned.append, left.append
    placed, why_of = placements.get, reasons.get
    infos = compiled_infos(request)
    for job in request.jobs if infos is None else infos:
        name = job.name
        pl = placed(name)
        if pl:
            assign({"job": name, "placements": pl})
            continue
        if job.current and feasible:
            detail = "a running job this plan stops"
            why = why_of(name)
            if why is not None and why[0] != "preempted":
                detail = f"stopped: {why[1]}"
            elif why is not None and levels:  # who reclaimed it, or which class
                detail = str(why[1])
            leave({"job": name, "reason": "preempted", "detail": detail})
        else:
            reason, detail = why_of(name, default_reason)
            leave({"job": name, "reason": str(reason), "detail": str(detail)})
    # built from checked parts (a str and Placement models, three str): not validated
    # again, which costs more than the rest of this loop on 20,000 jobs
    return Assignment.many(assigned), Unplaced.many(left)


def build_plan(
    request: PlanRequest,
    result: HeuristicResult,
    *,
    status: PlanStatus,
    solver: str,
    best_bound: float | None = None,
    solve_time_s: float = 0.0,
    default_reason: tuple[str, str] = ("insufficient_capacity",
                                       "eligible GPUs exist but are taken by other work"),
    extra_stats: Mapping[str, float | int | str] | None = None,
    explanation: Sequence[str] = (),
    evaluation: Evaluation | None = None,
) -> Plan:
    """A complete Plan for `result`; reasons default to `default_reason` where missing.
    `evaluation`: `evaluate(request, result.placements)` when the caller has it."""
    placements = {j: list(p) for j, p in result.placements.items() if p}
    use = plan_use(request, placements)
    layouts = final_layouts(request, placements, use)
    ev = evaluate(request, placements) if evaluation is None else evaluation
    levels = lexicographic_levels(request) and status != "infeasible"
    reasons = level_reasons(request, placements, result.reasons) if levels else result.reasons
    assignments, unplaced = _accounts(request, placements, reasons, status != "infeasible",
                                      levels, default_reason)
    value = ev.objective_value
    gap = None
    if best_bound is not None:
        best_bound = max(best_bound, value)
        gap = max(0.0, (best_bound - value) / max(1.0, abs(best_bound)))
        if gap < 1e-12:  # float noise between the solver's bound and the recomputed value
            gap = 0.0
    stats = PlanStats(**plan_stats(request, placements, use, len(assignments)))
    extras: dict[str, float | int | str] = {
        "throughput": round(ev.throughput, 9),
        "fragmentation": round(fragmentation(request, placements, use), 6),
    }
    if request.interference:
        # Contract 5.2 (models/objective.py: interference_loss); absent without pairs, so a
        # v1 request's plan is unchanged.
        extras["interference_loss"] = round(ev.interference_loss, 9)
    extras.update(extra_stats or {})
    for k, v in extras.items():
        setattr(stats, k, v)
    if lexicographic_levels(request):
        for k, obj in level_stats(request, placements).items():
            setattr(stats, k, obj)
    return Plan(
        status=status,
        solver=solver,
        objective_value=value,
        best_bound=best_bound,
        gap=gap,
        solve_time_s=round(solve_time_s, 6),
        assignments=assignments,
        unplaced=unplaced,
        preempted=list(ev.preempted),
        migrated=list(ev.migrated),
        mig_changes=mig_changes(request, layouts),
        stats=stats,
        explanation=list(explanation),
    )
