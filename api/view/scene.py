"""What the plan view draws, computed from a request and its plan (no drawing here).

Every GPU gets two occupancy rows, *before* (the request's running jobs and MIG layouts)
and *after* (the plan's placements and the layouts left by its MIG changes). A row is a
list of segments, each a span [x0, x1) of the GPU's width: the whole width for a whole
GPU, memory slices [start, start + size) / total for a MIG instance (its real position on
the GPU), and consecutive spans of the fractions for a shared GPU.

Every job gets one status: `kept` (runs where it runs), `started` (placed, not running),
`migrated` (placed elsewhere than it runs), `preempted` (running, stopped by the plan) or
`waiting` (neither running nor placed). Segments carry what happens to them: a kept
placement, a placement the plan starts or moves in, or one the plan vacates.

The scene trusts nothing: a plan naming a GPU or job the request lacks, or a MIG profile
its model does not have, becomes a warning shown on the page, never an exception.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from models import GpuModel, Instance, Job, MigInstance, Placement, Plan, PlanRequest

NO_DOMAIN = "(no topology domain)"


class JobStatus(StrEnum):
    """What the plan does with a job."""

    kept = "kept"
    started = "started"
    migrated = "migrated"
    preempted = "preempted"
    waiting = "waiting"


class Mark(StrEnum):
    """What the plan does with one segment of a GPU."""

    kept = "kept"          # same job, same place, before and after
    started = "started"    # after: a job the plan starts
    moved_in = "moved_in"  # after: a migrated job's new place
    moved_out = "moved_out"  # before: a migrated job's old place
    preempted = "preempted"  # before: a preempted job's place
    idle = "idle"          # a MIG instance hosting no job


@dataclass(frozen=True, slots=True)
class Segment:
    """A span [x0, x1) of a GPU's width (fractions of it) held by a job or an idle instance."""

    x0: float
    x1: float
    job: str | None
    mark: Mark
    what: str  # "whole", "3g.40gb@4", "0.25"


@dataclass(slots=True)
class GpuCell:
    """One GPU: its before and after rows and MIG layouts."""

    node: str
    index: int
    model: str
    healthy: bool
    mig_enabled: bool
    memory_slices: int
    before: list[Segment] = field(default_factory=list)
    after: list[Segment] = field(default_factory=list)
    layout_before: tuple[Instance, ...] = ()
    layout_after: tuple[Instance, ...] = ()

    @property
    def mig_changed(self) -> bool:
        """True when the plan reconfigures this GPU's MIG layout."""
        return set(self.layout_before) != set(self.layout_after)

    @property
    def changed(self) -> bool:
        """True when anything on this GPU differs between before and after."""
        return self.mig_changed or any(s.mark not in (Mark.kept, Mark.idle)
                                       for s in (*self.before, *self.after))

    @property
    def used_after(self) -> float:
        """Width held by jobs after the plan (0..1)."""
        return min(1.0, sum(s.x1 - s.x0 for s in self.after if s.job is not None))


@dataclass(slots=True)
class NodeRow:
    """A node and its GPUs, in index order."""

    name: str
    schedulable: bool
    gpus: list[GpuCell]


@dataclass(slots=True)
class Domain:
    """A topology domain and its nodes, in request order."""

    name: str
    nodes: list[NodeRow]

    def cells(self) -> Iterable[GpuCell]:
        """Every GPU of the domain."""
        for n in self.nodes:
            yield from n.gpus


@dataclass(frozen=True, slots=True)
class Move:
    """A running job the plan disturbs: where it was, where it goes (empty = stopped)."""

    job: str
    status: JobStatus
    before: tuple[str, ...]
    after: tuple[str, ...]
    detail: str = ""


@dataclass(frozen=True, slots=True)
class MigRow:
    """A MIG reconfiguration: the layout before and after, and the running jobs it touches."""

    node: str
    gpu: int
    model: str
    before: tuple[Instance, ...]
    after: tuple[Instance, ...]
    destroy: tuple[Instance, ...]
    create: tuple[Instance, ...]
    touches: tuple[str, ...]


@dataclass(slots=True)
class Scene:
    """Everything the page shows."""

    domains: list[Domain]
    status: dict[str, JobStatus]
    moves: list[Move]
    mig_rows: list[MigRow]
    unplaced: list[tuple[str, str, str]]
    placed: dict[str, tuple[JobStatus, tuple[str, ...]]]
    warnings: list[str]
    colors: dict[str, str] = field(default_factory=dict)

    def count(self, status: JobStatus) -> int:
        """How many jobs have `status`."""
        return sum(1 for s in self.status.values() if s == status)


def _key(p: Placement) -> tuple[str, int, str]:
    """Identity of a placement: the GPU and what of it (whole, an instance, a fraction)."""
    if p.mig is not None:
        return (p.node, p.gpu, f"{p.mig.profile}@{p.mig.start}")
    if p.fraction is not None:
        return (p.node, p.gpu, f"{p.fraction:.9g}")
    return (p.node, p.gpu, "whole")


def where(p: Placement) -> str:
    """A placement as text: node/gpu, with the instance or fraction."""
    _, _, what = _key(p)
    return f"{p.node}/{p.gpu}" + ("" if what == "whole" else f" {what}")


def job_statuses(request: PlanRequest, plan: Plan) -> dict[str, JobStatus]:
    """Each request job's status under the plan (placement sets compared, not trusted)."""
    placed = {a.job: {_key(p) for p in a.placements} for a in plan.assignments}
    out: dict[str, JobStatus] = {}
    for job in request.jobs:
        after = placed.get(job.name)
        if job.current is None:
            out[job.name] = JobStatus.waiting if after is None else JobStatus.started
        elif after is None:
            out[job.name] = JobStatus.preempted
        elif after == {_key(p) for p in job.current} and job.name not in plan.migrated:
            out[job.name] = JobStatus.kept
        else:
            out[job.name] = JobStatus.migrated
    return out


def _layouts_after(request: PlanRequest, plan: Plan, warnings: list[str]
                   ) -> dict[tuple[str, int], tuple[Instance, ...]]:
    """Every MIG GPU's layout after the plan's changes (destroys first, then creates)."""
    layouts = {(n.name, g.index): tuple(m.key() for m in g.mig_instances)
               for n in request.cluster.nodes for g in n.gpus if g.mig_enabled}
    for ch in plan.mig_changes:
        key = (ch.node, ch.gpu)
        if key not in layouts:
            warnings.append(f"MIG change on {ch.node}/{ch.gpu}, which is not a MIG GPU "
                            "of the request")
            continue
        gone = {m.key() for m in ch.destroy}
        kept = [i for i in layouts[key] if i not in gone]
        layouts[key] = tuple(sorted({*kept, *(m.key() for m in ch.create)},
                                    key=lambda i: i.start))
    return layouts


def _mig_span(model: GpuModel | None, mig: MigInstance | Instance, slices: int
              ) -> tuple[float, float] | None:
    spec = model.profile(mig.profile) if model is not None else None
    if spec is None:
        return None
    return mig.start / slices, (mig.start + spec.memory_slices) / slices


class _Builder:
    """Fills the GPU cells from the request's running jobs and the plan's placements."""

    def __init__(self, request: PlanRequest, plan: Plan, status: dict[str, JobStatus]) -> None:
        self.request = request
        self.catalog = request.cluster.catalog()
        self.status = status
        self.warnings: list[str] = []
        self.cells: dict[tuple[str, int], GpuCell] = {}
        self.after_keys = {a.job: {_key(p) for p in a.placements} for a in plan.assignments}
        self.layouts = _layouts_after(request, plan, self.warnings)
        self._shares: dict[tuple[str, int, str], list[tuple[str, float, Mark]]] = {}
        for node in request.cluster.nodes:
            for g in node.gpus:
                model = self.catalog.get(g.model)
                self.cells[(node.name, g.index)] = GpuCell(
                    node=node.name, index=g.index, model=g.model, healthy=g.healthy,
                    mig_enabled=g.mig_enabled,
                    memory_slices=model.memory_slices if model is not None else 8,
                    layout_before=tuple(sorted((m.key() for m in g.mig_instances),
                                               key=lambda i: i.start)),
                    layout_after=self.layouts.get((node.name, g.index), ()),
                )

    def place(self, job: str, p: Placement, row: str, mark: Mark) -> None:
        """Add job `job`'s placement `p` to `row` ("before" or "after") of its GPU."""
        cell = self.cells.get((p.node, p.gpu))
        if cell is None:
            self.warnings.append(f"{job}: {row} placement on {p.node}/{p.gpu}, a GPU the "
                                 "request does not have")
            return
        if p.fraction is not None:
            self._shares.setdefault((p.node, p.gpu, row), []).append((job, p.fraction, mark))
            return
        if p.mig is None:
            getattr(cell, row).append(Segment(0.0, 1.0, job, mark, "whole"))
            return
        span = _mig_span(self.catalog.get(cell.model), p.mig, cell.memory_slices)
        if span is None:
            self.warnings.append(f"{job}: MIG profile {p.mig.profile} is not a profile of "
                                 f"{cell.model} ({p.node}/{p.gpu})")
            return
        getattr(cell, row).append(Segment(*span, job, mark, f"{p.mig.profile}@{p.mig.start}"))

    def finish(self) -> None:
        """Lay out shared GPUs and the idle MIG instances of every row."""
        for (node, gpu, row), shares in self._shares.items():
            # Kept shares first, in the same order in both rows, so they line up.
            shares.sort(key=lambda s: (s[2] != Mark.kept, s[0]))
            x = 0.0
            segs = getattr(self.cells[(node, gpu)], row)
            for job, frac, mark in shares:
                segs.append(Segment(x, min(1.0, x + frac), job, mark, f"{frac:g}"))
                x += frac
        for cell in self.cells.values():
            model = self.catalog.get(cell.model)
            for row, layout in (("before", cell.layout_before), ("after", cell.layout_after)):
                segs = getattr(cell, row)
                used = {s.what for s in segs}
                for inst in layout:
                    span = _mig_span(model, inst, cell.memory_slices)
                    name = f"{inst.profile}@{inst.start}"
                    if span is not None and name not in used:
                        segs.append(Segment(*span, None, Mark.idle, name))
                segs.sort(key=lambda s: s.x0)


def _before_mark(status: JobStatus, key: tuple[str, int, str], after: set[tuple[str, int, str]]
                 ) -> Mark:
    if status == JobStatus.preempted:
        return Mark.preempted
    return Mark.kept if key in after else Mark.moved_out


def _after_mark(job: Job | None, key: tuple[str, int, str]) -> Mark:
    if job is None or job.current is None:
        return Mark.started
    return Mark.kept if key in {_key(p) for p in job.current} else Mark.moved_in


def _fill(b: _Builder, request: PlanRequest, plan: Plan) -> None:
    jobs = {j.name: j for j in request.jobs}
    for job in request.jobs:
        after = b.after_keys.get(job.name, set())
        for p in job.current or []:
            b.place(job.name, p, "before", _before_mark(b.status[job.name], _key(p), after))
    for a in plan.assignments:
        job_or_none = jobs.get(a.job)
        if job_or_none is None:
            b.warnings.append(f"the plan places {a.job!r}, which is not a job of the request")
        for p in a.placements:
            b.place(a.job, p, "after", _after_mark(job_or_none, _key(p)))
    b.finish()


def _domains(request: PlanRequest, cells: dict[tuple[str, int], GpuCell]) -> list[Domain]:
    by_name: dict[str, Domain] = {}
    for node in request.cluster.nodes:
        name = node.topology_domain or NO_DOMAIN
        dom = by_name.setdefault(name, Domain(name, []))
        gpus = sorted((cells[(node.name, g.index)] for g in node.gpus), key=lambda c: c.index)
        dom.nodes.append(NodeRow(node.name, node.schedulable, gpus))
    return list(by_name.values())


def _moves(request: PlanRequest, plan: Plan, status: dict[str, JobStatus]) -> list[Move]:
    placed = {a.job: a.placements for a in plan.assignments}
    details = {u.job: u.detail or u.reason for u in plan.unplaced}
    out = []
    for job in request.jobs:
        s = status[job.name]
        if s in (JobStatus.migrated, JobStatus.preempted):
            out.append(Move(job.name, s, tuple(where(p) for p in job.current or []),
                            tuple(where(p) for p in placed.get(job.name, [])),
                            details.get(job.name, "")))
    return out


def _mig_rows(cells: Iterable[GpuCell], request: PlanRequest) -> list[MigRow]:
    holders: dict[tuple[str, int, str], str] = {}
    for job in request.jobs:
        for p in job.current or []:
            holders[_key(p)] = job.name
    out = []
    for c in cells:
        if not c.mig_changed:
            continue
        destroyed = tuple(i for i in c.layout_before if i not in c.layout_after)
        touches = tuple(sorted({holders[k] for i in destroyed
                                if (k := (c.node, c.index, f"{i.profile}@{i.start}"))
                                in holders}))
        out.append(MigRow(c.node, c.index, c.model, c.layout_before, c.layout_after,
                          destroyed, tuple(i for i in c.layout_after
                                           if i not in c.layout_before), touches))
    return out


def build_scene(request: PlanRequest, plan: Plan) -> Scene:
    """The scene of `plan` answering `request`."""
    status = job_statuses(request, plan)
    b = _Builder(request, plan, status)
    _fill(b, request, plan)
    domains = _domains(request, b.cells)
    known = {j.name for j in request.jobs}
    for job in plan.preempted:
        if job in status and status[job] != JobStatus.preempted:
            b.warnings.append(f"the plan lists {job!r} as preempted but places it")
    unplaced = [(u.job, u.reason, u.detail) for u in plan.unplaced]
    for name in sorted(known - {a.job for a in plan.assignments} - {u.job for u in
                                                                    plan.unplaced}):
        b.warnings.append(f"job {name!r} is neither placed nor listed as unplaced")
    return Scene(domains=domains, status=status, moves=_moves(request, plan, status),
                 mig_rows=_mig_rows((c for d in domains for c in d.cells()), request),
                 unplaced=unplaced,
                 placed={a.job: (status.get(a.job, JobStatus.started),
                                 tuple(where(p) for p in a.placements))
                         for a in plan.assignments},
                 warnings=b.warnings)
