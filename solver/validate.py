"""The independent plan validator: every invariant of contract section 3, and the objective.

`validate_plan(request, plan)` returns a list of `Violation`s (empty = valid). It shares no
code with the planners' bookkeeping (models/objective.py, models/instance.py,
solver/build.py), so that a slip in either place is caught.

Re-derived here on purpose (the planners' copies live in models/rules.py,
models/capacity.py and models/objective.py): speed, size and value of a job (`_speed`,
`_size`, `_value`), the objective terms and their horizon (`HORIZON_S`), the fairness
demands D_k, MIG demand cover (`_check_mig_covers`), gang topology (one model, one node,
one domain, a node without a domain being a domain of its own), whole-GPU exclusivity, and
the elastic gangs' allowed sizes, speedups and remaining times on n GPUs (`_allowed`,
`_speedup`, `_remaining`), every capacity sum (shares, GPU memory, host CPU / memory)
with its own `CAPACITY_TOL`
(equal to the planners' `models.rules.HOST_TOL`, so that nothing a planner accepts is
rejected here; a test pins the two constants and the two horizons together).
Shared with the planners, because they are the contract's definitions rather than
bookkeeping: the request and plan types, the MIG layout geometry of the catalog
(`layout_violations`) and the model eligibility rule (`models.rules.model_eligible`).

Rule names (`Violation.rule`), one per invariant:

- `accounting`: every job exactly once in `assignments` or `unplaced`, no unknown job, no
  empty assignment, no assignment at all when the status is `infeasible`.
- `eligibility`: new placements name existing healthy GPUs of schedulable nodes of an
  eligible model; every placement's kind matches the job's shape and the GPU's mode; a
  shared placement's fraction is the job's `gpu_share`; a MIG instance covers the demand.
- `whole_gpu`: a whole GPU hosts at most one whole-GPU job; a gang has exactly `gpus`
  (an elastic gang: its chosen number of) distinct GPUs of one model, on one node
  (`single_node`) or in one domain (`same_domain`).
- `mig`: final layouts (current - destroy + create) are valid; destroy/create are
  consistent with the current layout; MIG changes only on MIG GPUs and only when
  reconfiguration is allowed; an instance hosts at most one job and exists in the final
  layout; instances of kept running jobs are not destroyed.
- `shared`: per GPU, fractions sum to <= 1 and `gpu_memory_gib` to <= the GPU's memory;
  never on a MIG GPU, never beside a whole-GPU job.
- `host_resources`: per node, `cpu_millicores` and `memory_gib` hold the placed jobs' host
  requests (a gang's request split pro rata over its GPUs).
- `elastic` (E1, contract 5.1): a placed elastic gang has an allowed number of GPUs (an
  integer of [min_gpus, max_gpus] that is a key of a non-empty `speedup`). A running
  elastic job whose GPU set changes in any way, size included, is moved (`running`).
- `running`: non-preemptible running jobs are kept; with `allow_preemption: false` no
  running job is stopped; `preempted` / `migrated` list exactly the stopped / moved jobs.
- `topology` (T1, contract 5.5): a gang's GPUs lie in one domain of each level its
  `topology.required` names ("host" = one node; a domain of a listed level is the path of
  the node's domains from the widest level down). v1's `same_domain` is the same rule at
  the level "domain" and keeps its v1 rule name, `whole_gpu`.
- `objective`: `objective_value` is the recomputed objective (with the topology costs of
  contract 5.5: `topology_cost` per domain beyond the first that a gang spans at its
  preferred level, charged wherever migration costs are); `best_bound` and `gap` agree.
- `interference` (contract 5.2): `stats.interference_loss` is the recomputed loss (0 or
  absent when no placed job is slowed). The factors themselves (`_colocation_factors`: per
  GPU, the product over a shared job's co-residents of the (class, class) speeds) are
  re-derived here and scale every job term of the objective.
- `quota` (Q1, contract 5.3): no tenant's usage (its own jobs and its descendants', sizes
  re-derived) exceeds its `limit` on any key, beyond what its non-preemptible running jobs
  kept in place already use.
- `priority` (contract 5.4): a lower class never displaces a higher one. A stopped
  preemptible running job h of class p is displaced when the plan could have kept it by
  removing only lower-class work: with C = the removable (preemptible or new) jobs of
  classes below p on h's GPUs and on h's host-limited nodes, the plan
  minus C plus h kept fits (GPUs, MIG layout, shares, host, quota limits), serves no less
  guaranteed usage, and h is worth something to its class (value + preemption cost > 0).
  Which of a tenant's jobs use its quota limit is left to the levels (the exact planners
  optimise them, the heuristics serve the classes from the highest): a job kept out by
  a limit alone is not flagged.
  Such a plan would be lexicographically better, so no optimum is ever flagged.
- `levels`: with quotas or several priority classes, `stats.quota` (usage, guaranteed,
  limit per tenant and key) and `stats.levels` (the guaranteed usage served, then each
  class's value from the highest) are the values recomputed here.

Kept placements of running jobs (placed exactly on their `current` GPUs / instances) are
grandfathered: health, schedulability, model eligibility and gang topology are not checked
for them, capacity always is. The validator never raises on a well-typed plan, however
nonsensical: unknown nodes, GPUs, jobs or profiles are reported as violations.

Cost: every attribute of a request or plan object read on a large plan is a cache miss,
so each object is read once, in one pass per kind of object. `_context` reads the jobs,
the GPUs (`_GpuTable`, one small table per node) and, in `_read_plan`, every assignment
and placement (the MIG and shared rows, the whole GPUs' jobs), deriving while a job is at
hand what the checks need of it: its host sums, its objective term, and whether the
eligibility and gang checks need to read it at all. A job whose placements the fast paths
clear (`_read_plan`'s, switched by `_fast_reads`, for eligibility; `_plain_gang` /
`_plain_fresh_gang` for the gang; what a valid plan holds) is not read again, nor made
into `_Row`s; the MIG hosting check first compares sets (`_plain_instances`). Each fast
path answers the questions of its general check and sends anything odd to it, so the
violations are the same: tests/solver/test_validate_fast_paths.py holds them to the
general checks, tests/solver/test_validate_differential.py has every rule flag the plans
broken its way.
"""

from __future__ import annotations

import math
import operator
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import TypeVar

from models.catalog import GpuModel, Instance, layout_violations
from models.plan import Plan
from models.request import Gpu, Job, MigInstance, Node, Placement, PlanRequest
from models.rules import model_eligible

#: Slack on capacity sums (fractions, GiB, millicores).
CAPACITY_TOL = 1e-9
#: Relative tolerance on the objective value, bound and gap.
OBJECTIVE_RTOL = 1e-6
#: Normalising horizon H of the `jct` and `makespan` objectives (docs/semantics.md).
HORIZON_S = 3600.0

GpuKey = tuple[str, int]
K = TypeVar("K")
V = TypeVar("V")
PlacementKey = tuple[str, int, str, int]


@dataclass(frozen=True)
class Violation:
    """One broken invariant: the rule's name, a message, and where (job / node / GPU)."""

    rule: str
    message: str
    job: str | None = None
    node: str | None = None
    gpu: int | None = None

    def where(self) -> str:
        """A short location, e.g. `job=x node=n gpu=3` ('-' when the plan as a whole)."""
        parts = [f"{k}={v}" for k, v in (("job", self.job), ("node", self.node),
                                          ("gpu", self.gpu)) if v is not None]
        return " ".join(parts) or "-"


#: A GPU as the checks read it: (the GPU, its model, the model's catalog entry or None
#: when the catalog has no such model, whether MIG mode is on).
_GpuInfo = tuple[Gpu, str, "GpuModel | None", bool]
#: One placement of a placed job, read once: (job, placement, GPU key, the GPU's
#: `_GpuInfo` or None when the cluster has no such GPU, the MIG instance, the fraction).
_Row = tuple[str, Placement, GpuKey, "_GpuInfo | None", "MigInstance | None", "float | None"]


class _GpuTable:
    """(node, index) -> the GPU's `_GpuInfo`, held as one small table per node (a lookup
    reads the node's table and then the GPU's entry, rather than one table of every GPU of
    a large cluster); iterated in cluster order, the first of a repeated key winning."""

    __slots__ = ("_order", "by_node")

    def __init__(self, cluster: list[Node], catalog: Mapping[str, GpuModel]) -> None:
        by_node: dict[str, dict[int, _GpuInfo]] = {}
        repeated = False
        for n in cluster:
            gpus = n.gpus
            table = {g.index: (g, g.model, catalog.get(g.model), g.mig_enabled) for g in gpus}
            if len(table) != len(gpus):   # (an index repeated on the node: the first wins)
                table = {}
                for g in gpus:
                    if g.index not in table:
                        table[g.index] = (g, g.model, catalog.get(g.model), g.mig_enabled)
            mine = by_node.setdefault(n.name, table)
            if mine is not table:   # (a repeated node name: its first GPU of an index wins)
                repeated = True
                for idx, info in table.items():
                    mine.setdefault(idx, info)
        self.by_node = by_node
        #: The keys in cluster order when a node name repeats (else read from `by_node`).
        self._order: list[GpuKey] | None = None
        if repeated:
            order: dict[GpuKey, None] = {}
            for n in cluster:
                for g in n.gpus:
                    order.setdefault((n.name, g.index), None)
            self._order = list(order)

    def get(self, key: GpuKey) -> _GpuInfo | None:
        table = self.by_node.get(key[0])
        return None if table is None else table.get(key[1])

    def __getitem__(self, key: GpuKey) -> _GpuInfo:
        return self.by_node[key[0]][key[1]]

    def __iter__(self) -> Iterator[GpuKey]:
        if self._order is not None:
            return iter(self._order)
        return ((name, idx) for name, table in self.by_node.items() for idx in table)

    def in_order(self, keys: set[GpuKey]) -> list[GpuKey]:
        """The GPUs of `keys` that the table holds, in cluster order."""
        if len(keys) < 2 or self._order is not None:
            return [key for key in (self._order or keys) if key in keys and self.get(key)]
        nodes = {node for node, _ in keys}
        return [(node, idx) for node, table in self.by_node.items() if node in nodes
                for idx in table if (node, idx) in keys]

    def values(self) -> Iterator[_GpuInfo]:
        if self._order is not None:
            return (self[key] for key in self._order)
        return (info for table in self.by_node.values() for info in table.values())


@dataclass
class _Ctx:
    """Everything the rule checks share, computed once from the request and the plan: the
    request's lookups, and the plan's placements read once into what the checks walk (a
    placement is a pydantic object whose every attribute read costs)."""

    request: PlanRequest
    plan: Plan
    catalog: dict[str, GpuModel]
    jobs: dict[str, Job]
    nodes: dict[str, Node]
    #: (node, index) -> the GPU, as a `_GpuInfo`.
    gpu_info: _GpuTable
    #: Running jobs (with `current`) in request order.
    running: list[str]
    #: The jobs' priority classes, the highest first.
    classes: list[int]
    #: Placed known jobs -> their placements (the first assignment of each job).
    placed: dict[str, list[Placement]] = field(default_factory=dict)
    #: The jobs of `odd` and `gangs` -> their placements as rows.
    rows: dict[str, list[_Row]] = field(default_factory=dict)
    #: The jobs of `odd` -> their shape ("whole", "mig" or "share").
    shapes: dict[str, str] = field(default_factory=dict)
    #: The placed jobs the eligibility check reads (in `placed` order): all but those whose
    #: placements `_read_plan`'s fast paths clear.
    odd: list[str] = field(default_factory=list)
    #: The names of the nodes that are not schedulable.
    unschedulable: set[str] = field(default_factory=set)
    #: The placed whole-GPU jobs the gang check reads: all but the gangs of one GPU and
    #: those `_plain_gang` (kept) or `_plain_fresh_gang` clears (in `placed` order).
    gangs: list[str] = field(default_factory=list)
    #: The rows on existing GPUs of MIG instances, in row order, and those of them on
    #: MIG-enabled GPUs as (GPU, profile, start).
    mig_rows: list[_Row] = field(default_factory=list)
    mig_named: list[tuple[GpuKey, str, int]] = field(default_factory=list)
    #: The rows on existing GPUs with a fraction, in row order, as (job, GPU, its
    #: `_GpuInfo`, the fraction, the job's `gpu_memory_gib` or 0).
    frac_rows: list[tuple[str, GpuKey, _GpuInfo, float, float]] = field(
        default_factory=list)
    #: The rows on existing GPUs of whole-GPU jobs with neither a MIG instance nor a
    #: fraction (whole GPUs), in row order: the first job on each GPU, and the jobs of the
    #: GPU's later rows (a job again when it lists the GPU again).
    whole_first: dict[GpuKey, str] = field(default_factory=dict)
    whole_more: dict[GpuKey, list[str]] = field(default_factory=dict)
    #: The `job` of every assignment, in order, and those of assignments with no placements.
    assigned: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    #: Running jobs placed exactly on their current placements, and how many running jobs
    #: are placed elsewhere (moved).
    kept: set[str] = field(default_factory=set)
    moved: int = 0
    #: The placed jobs with a `topology` and the elastic ones, each in `placed` order.
    topo: list[str] = field(default_factory=list)
    elastic: list[str] = field(default_factory=list)
    #: Per node on which a placed job with host requests has a placement on an existing
    #: GPU: the placed jobs' `cpu_millicores` and `host_memory_gib` there (a gang's split
    #: pro rata over its GPUs), summed in `placed` and row order.
    host_cpu: dict[str, float] = field(default_factory=dict)
    host_mem: dict[str, float] = field(default_factory=dict)
    #: With an additive objective, placed jobs of a known model -> their term of it
    #: (`_ADDITIVE`, before the co-location factor), on their first placement's model.
    terms: dict[str, float] = field(default_factory=dict)
    #: Contract 5.2: placed shared job -> product of its co-location factors (absent: 1).
    factors: dict[str, float] = field(default_factory=dict)
    out: list[Violation] = field(default_factory=list)
    _running: tuple[list[str], list[str]] | None = None
    _models: dict[str, tuple[str, GpuModel]] | None = None
    #: Q1 / levels, derived once per plan: tenant -> its quota chain, (tenant, model) ->
    #: the keys a placement there counts for, the usage of every key by the placed jobs
    #: and by the non-preemptible running jobs kept in place (never changed by callers)
    _chains: dict[str, list[str]] = field(default_factory=dict)
    _qkeys: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    _usage: dict[tuple[str, str], float] | None = None
    _fixed: dict[tuple[str, str], float] | None = None
    #: fairness: job -> its term of its tenant's demand (`_job_demands`)
    _demands: dict[str, float | None] | None = None

    def add(self, rule: str, message: str, *, job: str | None = None,
            node: str | None = None, gpu: int | None = None) -> None:
        self.out.append(Violation(rule, message, job, node, gpu))

    def model_of(self, key: GpuKey) -> tuple[str, GpuModel] | None:
        info = self.gpu_info.get(key)
        return None if info is None or info[2] is None else (info[1], info[2])


def _pkey(p: Placement) -> PlacementKey:
    """A placement as (node, gpu, MIG profile, MIG start); fractions are not part of it."""
    return (p.node, p.gpu, p.mig.profile if p.mig else "", p.mig.start if p.mig else -1)


def _same_places(cur: list[Placement], pls: list[Placement]) -> bool:
    """Whether `pls` are where the `cur`rent placements of a running job are, fractions
    aside (a running job placed so is kept)."""
    return {_pkey(p) for p in pls} == {_pkey(p) for p in cur}


def _where(p: Placement) -> str:
    mig = f" {p.mig.profile}@{p.mig.start}" if p.mig else ""
    return f"{p.node}/{p.gpu}{mig}"


# ---------------------------------------------------------------- 1. accounting


#: An assignment's or an unplaced entry's job (read in C over a list of them).
_JOB = operator.attrgetter("job")


def _check_accounting(c: _Ctx) -> None:
    jobs = c.jobs
    unplaced = list(map(_JOB, c.plan.unplaced))
    placed = c.placed
    if len(placed) == len(c.assigned) and len(placed) + len(unplaced) == len(jobs):
        # every assignment a distinct job of the request with placements (`placed`); then
        # every job is listed exactly once when the unplaced are distinct other jobs
        rest = set(unplaced)
        fine = len(rest) == len(unplaced) and rest.isdisjoint(placed) and jobs.keys() >= rest
    else:
        listed = set(c.assigned)
        listed.update(unplaced)
        fine = len(listed) == len(jobs) == len(c.assigned) + len(unplaced) \
            and listed == jobs.keys()
    if fine:
        # every job exactly once, so every entry names a job of the request
        for name in c.empty:
            c.add("accounting", "assignment with no placements", job=name)
    else:
        _accounting_errors(c, unplaced)
    if c.plan.status == "infeasible" and c.plan.assignments:
        c.add("accounting", f"status infeasible but {len(c.plan.assignments)} assignments")


def _accounting_errors(c: _Ctx, unplaced: list[str]) -> None:
    """The accounting violations of a plan that does not list every job exactly once."""
    jobs = c.jobs
    for a in c.plan.assignments:
        if a.job not in jobs:
            c.add("accounting", "assignment of a job that is not in the request", job=a.job)
        elif not a.placements:
            c.add("accounting", "assignment with no placements", job=a.job)
    for name in unplaced:
        if name not in jobs:
            c.add("accounting", "unplaced entry for a job that is not in the request",
                  job=name)
    seen = Counter(c.assigned)
    seen.update(unplaced)
    for name in jobs:
        n = seen.get(name, 0)
        if n == 0:
            c.add("accounting", "job appears in neither assignments nor unplaced", job=name)
        elif n > 1:
            c.add("accounting", f"job appears {n} times in assignments/unplaced", job=name)


# ---------------------------------------------------------------- 2. eligibility


def _check_eligibility(c: _Ctx) -> None:
    # model eligibility per (job, model), asked once per gang rather than per GPU
    eligible: dict[tuple[str, str], bool] = {}
    kept_set = c.kept
    for name in c.odd:   # (the others: cleared by `_read_plan`)
        rows = c.rows[name]
        shape = c.shapes[name]
        if shape != "whole" and len(rows) != 1:
            c.add("eligibility", f"a {shape} job takes exactly one placement, got {len(rows)}",
                  job=name)
        kept = name in kept_set
        job = c.jobs[name]
        for row in rows:
            _check_placement(c, job, shape, row[1], kept, eligible)


def _bad_placement(c: _Ctx, job: Job, p: Placement, msg: str) -> None:
    c.add("eligibility", f"{_where(p)}: {msg}", job=job.name, node=p.node, gpu=p.gpu)


def _check_placement(c: _Ctx, job: Job, shape: str, p: Placement, kept: bool,
                     eligible: dict[tuple[str, str], bool]) -> None:
    node = c.nodes.get(p.node)
    info = c.gpu_info.get((p.node, p.gpu))
    gpu = None if info is None else info[0]
    if node is None or gpu is None:
        _bad_placement(c, job, p, "no such node" if node is None else "no such GPU on this node")
        return
    if not kept:
        if not node.schedulable:
            _bad_placement(c, job, p, "node is not schedulable")
        if not gpu.healthy:
            _bad_placement(c, job, p, "GPU is not healthy")
    spec = c.catalog.get(gpu.model)
    if spec is None:
        _bad_placement(c, job, p, f"GPU model {gpu.model!r} is not in the catalog")
        return
    if not kept:
        ok = eligible.get((job.name, gpu.model))
        if ok is None:
            ok = eligible[(job.name, gpu.model)] = model_eligible(job, gpu.model, spec)
        if not ok:
            _bad_placement(c, job, p, f"model {gpu.model} is not eligible for the job")
    # The placement's kind must match the job's shape and the GPU's MIG mode. A fraction on
    # a MIG GPU is reported by the `shared` rule (contract invariant 5).
    if shape == "whole":
        if p.mig is not None or p.fraction is not None:
            _bad_placement(c, job, p, "a whole-GPU job's placement carries a MIG instance or "
                           "a fraction")
        elif gpu.mig_enabled:
            _bad_placement(c, job, p, "whole-GPU placement on a MIG-enabled GPU")
    elif shape == "share":
        if p.fraction is None:
            _bad_placement(c, job, p, "a shared job's placement needs a fraction")
        else:
            allowed = [job.gpu_share] + [q.fraction for q in job.current or [] if kept]
            if not any(f is not None and abs(p.fraction - f) <= CAPACITY_TOL for f in allowed):
                _bad_placement(c, job, p, f"fraction {p.fraction} differs from the job's "
                               f"gpu_share {job.gpu_share}")
    elif p.mig is None:
        _bad_placement(c, job, p, "a MIG job's placement needs a MIG instance")
    elif not gpu.mig_enabled:
        _bad_placement(c, job, p, "MIG placement on a GPU without MIG mode")
    elif not kept:
        _check_mig_covers(job, p, spec, lambda msg: _bad_placement(c, job, p, msg))


def _check_mig_covers(job: Job, p: Placement, spec: GpuModel,
                      bad: Callable[[str], None]) -> None:
    assert p.mig is not None
    msg = _mig_cover_error(job, p.mig, spec)
    if msg is not None:
        bad(msg)


def _mig_cover_error(job: Job, mig: MigInstance, spec: GpuModel) -> str | None:
    """Why MIG instance `mig` of a GPU of `spec` does not cover `job`'s demand (None: it
    does)."""
    prof = spec.profile(mig.profile)
    if prof is None:
        return f"model has no MIG profile {mig.profile!r}"
    if job.mig_profile is not None:
        if prof.name != job.mig_profile:
            return f"instance {prof.name} is not the demanded profile {job.mig_profile}"
    elif job.mig is not None and (prof.compute_slices < job.mig.compute_slices
                                  or prof.memory_gib < job.mig.memory_gib - CAPACITY_TOL):
        return (f"instance {prof.name} ({prof.compute_slices} compute slices, "
                f"{prof.memory_gib} GiB) does not cover the demand "
                f"({job.mig.compute_slices}, {job.mig.memory_gib} GiB)")
    return None


# ---------------------------------------------------------------- 3. whole GPUs


def _check_whole_gpu(c: _Ctx) -> None:
    for name in c.gangs:   # (the others: kept gangs `_plain_gang` clears)
        _check_gang(c, c.jobs[name], c.rows[name])
    first, more = _whole_on(c)
    for key in sorted(more):
        names = {first[key], *more[key]}
        if len(names) > 1:
            c.add("whole_gpu", f"whole GPU hosts {len(names)} whole-GPU jobs: "
                  f"{', '.join(sorted(names))}", node=key[0], gpu=key[1])


def _whole_on(c: _Ctx) -> tuple[dict[GpuKey, str], dict[GpuKey, list[str]]]:
    """The whole-GPU jobs' whole-GPU placements on the cluster's GPUs: the first job on
    each GPU, and the jobs of the GPU's later placements (a job again when it lists the
    GPU again), in row order (`_read_plan`'s; the whole-GPU and shared checks read them)."""
    return c.whole_first, c.whole_more


def _plain_gang(keys: list[GpuKey], need: int | None) -> bool:
    """Whether `_check_gang` finds nothing wrong with a kept gang placed on the GPUs `keys`,
    by the questions it asks of one: the gang's size is `need` (None for an elastic gang,
    which the check asks about) and its GPUs are distinct."""
    n = len(keys)
    return n == need and (n == 1 or len(set(keys)) == n)


def _plain_fresh_gang(job: Job, keys: list[GpuKey], infos: list[_GpuInfo | None]) -> bool:
    """Whether `_check_gang` finds nothing wrong with a gang placed on the GPUs `keys` (kept
    or not; `infos`: their `_GpuInfo`s), by the questions it asks of a gang without a
    domain rule: its size is `gpus` (an elastic gang: any), its GPUs are distinct existing
    GPUs of one model, and on one node when `single_node`. False (a `same_domain` gang,
    anything odd) sends it through `_check_gang`."""
    n = len(keys)
    if (job.elastic is None and n != job.gpus) or (job.same_domain and not job.single_node):
        return False
    first = infos[0]
    if first is None:
        return False
    model = first[1]
    for info in infos:
        if info is None or info[1] != model:
            return False
    if job.single_node:
        node = keys[0][0]
        for key in keys:
            if key[0] != node:
                return False
    return len(set(keys)) == n


def _check_gang(c: _Ctx, job: Job, rows: list[_Row]) -> None:
    name = job.name
    keys = [row[2] for row in rows]
    if job.elastic is None and len(rows) != job.gpus:
        c.add("whole_gpu", f"gang needs {job.gpus} GPUs, got {len(rows)}", job=name)
    if len(set(keys)) != len(keys):
        c.add("whole_gpu", "gang lists the same GPU more than once", job=name)
    if name in c.kept:
        return
    models = {row[3][1] for row in rows if row[3] is not None}
    if len(models) > 1:
        c.add("whole_gpu", f"gang spans several models: {', '.join(sorted(models))}", job=name)
    nodes = {row[2][0] for row in rows if row[3] is not None}
    if job.single_node:
        if len(nodes) > 1:
            c.add("whole_gpu", f"single-node gang spans nodes {', '.join(sorted(nodes))}",
                  job=name)
    elif job.same_domain:
        _check_level(c, job, nodes, "domain", "whole_gpu", "same-domain gang")


def _node_domain(c: _Ctx, node: str, level: str) -> str:
    """The domain of `node` at `level`: itself at "host", its `topology_domain` (else its
    own singleton domain) at "domain", the path of its domains down to a listed level."""
    n = c.nodes[node]
    if level == "host":
        return node
    if level == "domain":
        return n.topology_domain or f"(node {node})"
    levels = c.request.cluster.topology_levels
    if level not in levels:
        return f"(unknown level {level})"
    return " > ".join(repr(n.topology.get(lv, "")) for lv in levels[:levels.index(level) + 1])


def _check_level(c: _Ctx, job: Job, nodes: set[str], level: str, rule: str,
                 what: str) -> None:
    """The nodes of a new gang placement lie in one domain of `level`."""
    domains = {_node_domain(c, n, level) for n in nodes}
    if len(domains) > 1:
        where = "domains" if level == "domain" else f"{level} domains"
        c.add(rule, f"{what} spans {where} {', '.join(sorted(domains))}", job=job.name)


# ---------------------------------------------------------------- T1. topology levels


def _check_topology(c: _Ctx) -> None:
    """T1: new placements of a job with `topology.required` lie in one domain of it (kept
    placements are grandfathered)."""
    for name in c.topo:
        job = c.jobs[name]
        required = job.topology.required if job.topology is not None else None
        if required is None or name in c.kept:
            continue
        nodes = {p.node for p in c.placed[name] if p.node in c.nodes}
        _check_level(c, job, nodes, required, "topology", f"gang requiring one {required}")


# ---------------------------------------------------------------- E1. elastic gangs


def _allowed(job: Job, n: int) -> bool:
    """Whether an elastic gang may get n GPUs: n in [min_gpus, max_gpus] and, when the
    speedup curve is given, one of its keys."""
    el = job.elastic
    assert el is not None
    if not el.min_gpus <= n <= el.max_gpus:
        return False
    return not el.speedup or str(n) in el.speedup


def _check_elastic(c: _Ctx) -> None:
    """E1: a placed elastic gang has an allowed number of GPUs."""
    for name in c.elastic:
        job = c.jobs[name]
        pls = c.placed[name]
        if job.elastic is not None and job.gpus is not None and not _allowed(job, len(pls)):
            el = job.elastic
            sizes = (", ".join(sorted(el.speedup, key=int)) if el.speedup
                     else f"{el.min_gpus}..{el.max_gpus}")
            c.add("elastic", f"elastic gang placed on {len(pls)} GPUs; allowed: {sizes}",
                  job=name)


# ---------------------------------------------------------------- 4. MIG


def _check_mig(c: _Ctx) -> None:
    policy = c.request.policy
    destroy: dict[GpuKey, list[Instance]] = defaultdict(list)
    create: dict[GpuKey, list[Instance]] = defaultdict(list)
    listed: Counter[GpuKey] = Counter()
    for ch in c.plan.mig_changes:
        key = (ch.node, ch.gpu)
        listed[key] += 1
        info = c.gpu_info.get(key)
        if info is None:
            c.add("mig", "MIG change on a GPU that does not exist", node=ch.node, gpu=ch.gpu)
            continue
        if not info[3]:
            c.add("mig", "MIG change on a GPU without MIG mode", node=ch.node, gpu=ch.gpu)
            continue
        if (ch.destroy or ch.create) and not policy.allow_mig_reconfiguration:
            c.add("mig", "MIG change while allow_mig_reconfiguration is false",
                  node=ch.node, gpu=ch.gpu)
        destroy[key].extend(m.key() for m in ch.destroy)
        create[key].extend(m.key() for m in ch.create)
    for (node, idx), n in sorted(listed.items()):
        if n > 1:
            c.add("mig", f"GPU listed {n} times in mig_changes", node=node, gpu=idx)

    # the final layouts of the GPUs the plan changes, in cluster order; the others keep
    # their current layout (read below only where a placement names an instance)
    final: dict[GpuKey, list[Instance]] = {}
    changed = set(destroy) | set(create)
    for key in c.gpu_info.in_order(changed):
        final[key] = _final_layout(c, key, c.gpu_info[key][0], destroy[key], create[key])

    # Each instance hosts at most one job and exists in the final layout. Instances are
    # compared as (profile, start) pairs here (what `Instance` equality and order are),
    # without building an `Instance` per placement.
    if not _plain_instances(c, final):
        _check_instances(c, final)

    # A kept running job's instance is busy: destroying it would fail (the kept jobs' MIG
    # placements are their rows on MIG instances of existing GPUs: `destroy` names no
    # other GPU).
    if any(destroy.values()):
        kept = c.kept
        busy = [(name, key, mig) for name, _, key, _, mig, _ in c.mig_rows
                if name in kept and mig is not None and key in destroy
                and mig.key() in destroy[key]]
        busy.sort(key=lambda hit: hit[0])   # (by job, each job's in placement order)
        for name, (node, idx), mig in busy:
            c.add("mig", f"destroys {mig.profile}@{mig.start}, which hosts the kept "
                  "running job", job=name, node=node, gpu=idx)


def _plain_instances(c: _Ctx, final: Mapping[GpuKey, list[Instance]]) -> bool:
    """Whether `_check_instances` finds nothing wrong: the MIG rows on MIG-enabled GPUs
    name distinct instances, each in its GPU's final layout (`final`, else its current
    one), compared as (GPU, profile, start) triples, in sets."""
    named = c.mig_named
    distinct = set(named)
    if len(distinct) != len(named):
        return False
    on_node = c.gpu_info.by_node
    layouts: set[tuple[GpuKey, str, int]] = set()
    for key in {key for key, _, _ in named}:
        layout = final.get(key)
        if layout is not None:
            layouts.update((key, i.profile, i.start) for i in layout)
        else:
            layouts.update((key, m.profile, m.start)
                           for m in on_node[key[0]][key[1]][0].mig_instances)
    return layouts.issuperset(distinct)


def _check_instances(c: _Ctx, final: Mapping[GpuKey, list[Instance]]) -> None:
    """Each instance named by a MIG row on a MIG-enabled GPU hosts one job and is in the
    GPU's final layout (`final`, else its current one)."""
    host: dict[tuple[GpuKey, tuple[str, int]], str] = {}   # each instance's first job
    hosts: dict[tuple[GpuKey, tuple[str, int]], list[str]] = {}   # those with several
    pairs: dict[GpuKey, set[tuple[str, int]]] = {
        key: {(i.profile, i.start) for i in layout} for key, layout in final.items()}
    for name, _, key, info, mig, _ in c.mig_rows:
        if info is None or mig is None or not info[3]:
            continue
        inst = (mig.profile, mig.start)
        if (key, inst) in host:
            hosts.setdefault((key, inst), [host[(key, inst)]]).append(name)
        else:
            host[(key, inst)] = name
        layout = pairs.get(key)
        if layout is None:   # unchanged (a layout is checked only where the plan changes it)
            layout = pairs[key] = {(m.profile, m.start) for m in info[0].mig_instances}
        if inst not in layout:
            c.add("mig", f"instance {inst[0]}@{inst[1]} is not in the final layout",
                  job=name, node=key[0], gpu=key[1])
    for (node, idx), inst in sorted(hosts):
        names = hosts[((node, idx), inst)]
        c.add("mig", f"instance {inst[0]}@{inst[1]} hosts {len(names)} jobs: "
              f"{', '.join(sorted(names))}", node=node, gpu=idx)


def _final_layout(c: _Ctx, key: GpuKey, gpu: Gpu, destroy: list[Instance],
                  create: list[Instance]) -> list[Instance]:
    node, idx = key
    current = [m.key() for m in gpu.mig_instances]
    for inst, n in Counter(destroy).items():
        if inst not in current:
            c.add("mig", f"destroys {inst.profile}@{inst.start}, not in the current layout",
                  node=node, gpu=idx)
        elif n > 1:
            c.add("mig", f"destroys {inst.profile}@{inst.start} {n} times", node=node, gpu=idx)
    remaining = [i for i in current if i not in destroy]
    for inst in create:
        if inst in remaining:
            c.add("mig", f"creates {inst.profile}@{inst.start}, which already exists",
                  node=node, gpu=idx)
    layout = remaining + create
    spec = c.catalog.get(gpu.model)
    if spec is not None and (create or destroy):
        for msg in layout_violations(spec, layout):
            c.add("mig", f"invalid final layout: {msg}", node=node, gpu=idx)
    return layout


# ---------------------------------------------------------------- 5. shared GPUs


def _check_shared(c: _Ctx) -> None:
    fractions: dict[GpuKey, float] = defaultdict(float)
    memory: dict[GpuKey, float] = defaultdict(float)
    whole: dict[GpuKey, list[str]] = defaultdict(list)
    sharers: dict[GpuKey, list[str]] = defaultdict(list)
    caps: dict[GpuKey, float | None] = {}
    for name, key, info, frac, mem in c.frac_rows:
        if info[3]:
            c.add("shared", "shared placement on a MIG-enabled GPU",
                  job=name, node=key[0], gpu=key[1])
        fractions[key] += frac
        memory[key] += mem
        sharers[key].append(name)
        caps[key] = info[2].memory_gib if info[2] is not None else None
    if sharers:   # the whole-GPU jobs beside them
        first, more = _whole_on(c)
        for key in sharers:
            if key in first:
                whole[key] = [first[key], *more.get(key, ())]
    # (the GPUs with something to report, in GPU order)
    bad = [key for key, total in fractions.items() if total > 1 + CAPACITY_TOL
           or key in whole or ((cap := caps[key]) is not None
                               and memory[key] > cap + CAPACITY_TOL)]
    for key in sorted(bad):
        node, idx = key
        cap = caps[key]
        over = fractions[key] > 1 + CAPACITY_TOL
        heavy = cap is not None and memory[key] > cap + CAPACITY_TOL
        names = ", ".join(sorted(sharers[key]))
        if over:
            c.add("shared", f"fractions sum to {fractions[key]:.6g} > 1 ({names})",
                  node=node, gpu=idx)
        if heavy:
            c.add("shared", f"shared jobs need {memory[key]:.6g} GiB > the GPU's {cap:.6g} "
                  f"({names})", node=node, gpu=idx)
        if whole[key]:
            c.add("shared", f"shared jobs ({names}) beside whole-GPU job "
                  f"{', '.join(sorted(whole[key]))}", node=node, gpu=idx)


# ---------------------------------------------------------------- 6. host resources


def _check_host_resources(c: _Ctx) -> None:
    # (the sums, `_read_plan`'s; a node only jobs without host requests use holds them:
    # capacities are >= 0)
    cpu, mem = c.host_cpu, c.host_mem
    nodes = c.nodes
    over = []   # (the nodes with something to report, in name order below)
    for node, used in cpu.items():
        spec = nodes[node]
        cap, cap_mem = spec.cpu_millicores, spec.memory_gib
        if (cap is not None and used > cap * (1 + CAPACITY_TOL) + CAPACITY_TOL) or (
                cap_mem is not None
                and mem[node] > cap_mem * (1 + CAPACITY_TOL) + CAPACITY_TOL):
            over.append(node)
    for node in sorted(over):
        spec = nodes[node]
        for what, used, cap in (("cpu_millicores", cpu[node], spec.cpu_millicores),
                                ("memory_gib", mem[node], spec.memory_gib)):
            if cap is not None and used > cap * (1 + CAPACITY_TOL) + CAPACITY_TOL:
                c.add("host_resources", f"{what}: placed jobs need {used:.6g} > {cap:.6g}",
                      node=node)


# ---------------------------------------------------------------- 7. running jobs


def _running_outcome(c: _Ctx) -> tuple[list[str], list[str]]:
    """(moved, stopped) running jobs, in request order (derived once per plan: the running
    and objective checks both read it)."""
    if c._running is None:
        running, placed, kept = c.running, c.placed, c.kept
        # (`_read_plan` counts the moved jobs: none moved, or every running job placed,
        # needs no walk)
        c._running = ([n for n in running if n in placed and n not in kept] if c.moved else [],
                      [n for n in running if n not in placed]
                      if len(running) > len(kept) + c.moved else [])
    return c._running


def _check_running(c: _Ctx) -> None:
    moved, stopped = _running_outcome(c)
    # An infeasible plan reports that the hard constraints conflict; it keeps nothing.
    if c.plan.status != "infeasible":
        for name in moved:
            if not c.jobs[name].preemptible:
                c.add("running", "non-preemptible running job is moved off its current "
                      "placement", job=name)
        for name in stopped:
            if not c.jobs[name].preemptible:
                c.add("running", "non-preemptible running job is stopped", job=name)
            elif not c.request.policy.allow_preemption:
                c.add("running", "running job is stopped while allow_preemption is false",
                      job=name)
    for label, listed, truth in (("preempted", c.plan.preempted, stopped),
                                 ("migrated", c.plan.migrated, moved)):
        for name, n in Counter(listed).items():
            if n > 1:
                c.add("running", f"{label} lists the job {n} times", job=name)
        listed_set = set(listed)
        for name in sorted(listed_set - set(truth)):
            c.add("running", f"listed in {label} but the plan does not "
                  f"{'stop' if label == 'preempted' else 'move'} it", job=name)
        for name in truth:
            if name not in listed_set:
                c.add("running", f"{'stopped' if label == 'preempted' else 'moved'} running "
                      f"job missing from {label}", job=name)


# ---------------------------------------------------------------- 8. objective


def _speed(job: Job, model: str, spec: GpuModel) -> float:
    if job.throughput:
        return job.throughput.get(model, 0.0)
    return spec.relative_speed


def _speedup(job: Job, n: int) -> float:
    """speedup_j[n]: the curve's entry for an elastic gang with a curve, else n."""
    el = job.elastic
    if el is None or not el.speedup:
        return float(n)
    return el.speedup.get(str(n), 0.0)


def _size(job: Job, spec: GpuModel, n: int | None = None) -> float:
    """size_j in the value: speedup_j[n] for an elastic gang on n GPUs (contract 5.1)."""
    if job.gpus is not None:
        return _speedup(job, n) if job.elastic is not None and n is not None \
            else float(job.gpus)
    if job.gpu_share is not None:
        return job.gpu_share
    return _demanded_slices(job, spec) / spec.compute_slices


def _demanded_slices(job: Job, spec: GpuModel) -> int:
    """A MIG job's demanded compute slices on a GPU of `spec`: its demand's, else its
    profile's (0 when the model has no such profile)."""
    if job.mig is not None:
        return job.mig.compute_slices
    prof = spec.profile(job.mig_profile or "")
    return prof.compute_slices if prof is not None else 0


def _value(job: Job, model: str, spec: GpuModel, n: int | None = None) -> float:
    """value_j(m) = weight_j * size_j(m) * speed_j(m), on n GPUs for an elastic gang."""
    # (`_speed`, and `_size` of a fixed gang or a share, inline: the objective asks this
    # of every placed job)
    tp = job.throughput
    speed = tp.get(model, 0.0) if tp else spec.relative_speed
    gpus = job.gpus
    if gpus is not None and job.elastic is None:
        return job.weight * float(gpus) * speed
    share = job.gpu_share
    if gpus is None and share is not None:
        return job.weight * share * speed
    return job.weight * _size(job, spec, n) * speed


def _remaining(job: Job, n: int | None = None) -> float:
    """max(R, 1) (H when absent); an elastic gang on n GPUs: R * speedup[gpus] /
    speedup[n] in place of R, infinite on a size its curve does not list (no progress;
    the plan breaks E1 then, and the objective must still be computable)."""
    if job.remaining_work is None:
        return HORIZON_S
    r = job.remaining_work
    if job.elastic is not None and job.gpus is not None and n is not None and n != job.gpus:
        at_n = _speedup(job, n)
        if at_n <= 0:
            return math.inf
        r = r * _speedup(job, job.gpus) / at_n
    return max(r, 1.0)


#: The throughput term is the job's value (one call less per job: the objective calls it
#: for every placed job).
_job_term_throughput: Callable[[Job, str, GpuModel, int], float] = _value


def _job_term_jct(job: Job, model: str, spec: GpuModel, n: int) -> float:
    return job.weight * _speed(job, model, spec) * HORIZON_S / _remaining(job, n)


def _job_term_makespan(job: Job, model: str, spec: GpuModel, n: int) -> float:
    value = _value(job, model, spec, n)
    # (a size off the curve: value 0, remaining time infinite; the term is 0)
    return value * _remaining(job, n) / HORIZON_S if value else 0.0


#: Per-job contribution of each additive objective (before migration/preemption costs),
#: for a job placed on `n` placements.
_ADDITIVE: Mapping[str, Callable[[Job, str, GpuModel, int], float]] = {
    "throughput": _job_term_throughput,
    "priority_fifo": _job_term_throughput,
    "jct": _job_term_jct,
    "makespan": _job_term_makespan,
}


def _placed_models(c: _Ctx) -> dict[str, tuple[str, GpuModel]]:
    """Placed job -> the model of its first placement (jobs on unknown GPUs are skipped);
    derived once per plan (several checks read it; callers do not change it)."""
    if c._models is None:
        c._models = {}
        gpus = c.gpu_info
        for name, pls in c.placed.items():
            info = gpus.get((pls[0].node, pls[0].gpu))
            if info is not None and info[2] is not None:
                c._models[name] = (info[1], info[2])
    return c._models


def _fairness(c: _Ctx, models: Mapping[str, tuple[str, GpuModel]],
              priority: int | None = None) -> float:
    """min over tenants k of (value of k's placed jobs) / D_k (docs/semantics.md); with
    `priority`, over the jobs of that class only (demands included)."""
    demand: dict[str, float] = defaultdict(float)
    got: dict[str, float] = defaultdict(float)
    demands = _job_demands(c)
    for name, job in c.jobs.items():
        if priority is not None and job.priority != priority:
            continue
        best = demands[name]
        if best is not None:
            demand[job.tenant] += best
        if name in models:
            got[job.tenant] += (_value(job, *models[name], len(c.placed[name]))
                                * c.factors.get(name, 1.0))
    return min((got[k] / d for k, d in demand.items() if d > 0), default=0.0)


def _job_demands(c: _Ctx) -> dict[str, float | None]:
    """Per job, its best value over the models present in its MIG mode that are eligible
    for it (or that it runs on) and its allowed sizes, None without such a model (its term
    of D_k); derived once per plan (`_fairness` asks it per class)."""
    if c._demands is None:
        # Models present in each mode: MIG jobs need MIG-enabled GPUs, the others non-MIG.
        present = {mig: {model for _, model, _, on in c.gpu_info.values() if on == mig}
                   for mig in (False, True)}
        c._demands = {}
        for name, job in c.jobs.items():
            mode = job.mig is not None or job.mig_profile is not None
            options = {m for m in present[mode]
                       if m in c.catalog and model_eligible(job, m, c.catalog[m])}
            if job.current:
                # A running job's own model counts even when no longer eligible.
                cur = c.gpu_info.get((job.current[0].node, job.current[0].gpu))
                if cur is not None and cur[1] in c.catalog:
                    options.add(cur[1])
            sizes: list[int | None] = [None]
            if job.elastic is not None:
                el = job.elastic
                sizes = [n for n in range(el.min_gpus, el.max_gpus + 1) if _allowed(job, n)]
            c._demands[name] = max(_value(job, m, c.catalog[m], n)
                                   for m in options for n in sizes) if options else None
    return c._demands


def recompute_objective(request: PlanRequest, plan: Plan) -> float:
    """The objective of `plan` under `request.policy.objective`, from its placements only."""
    c = _context(request, plan)
    return _objective(c)


def _objective(c: _Ctx) -> float:
    objective = c.request.policy.objective
    if objective == "fairness":
        return _fairness(c, _placed_models(c))
    moved, stopped = _running_outcome(c)
    policy = c.request.policy
    costs = (policy.migration_cost * len(moved) + policy.preemption_cost * len(stopped)
             + _topology_costs(c))
    # (the terms of the placed jobs of a known model, `_read_plan`'s; summed in request
    # order, a job without a term adding 0.0: x + 0.0 is x)
    terms, factors = c.terms, c.factors
    if factors:
        total = sum(terms[n] * factors.get(n, 1.0) for n in c.jobs if n in terms)
    else:   # (every factor 1: x * 1.0 is x, the same sum; the same order, walked in C)
        total = sum(map(terms.get, c.jobs, repeat(0.0)))
    return total - costs


def _topology_costs(c: _Ctx, names: set[str] | None = None) -> float:
    """sum over placed jobs (of `names`, default all) with a preferred level of
    topology_cost * (domains spanned there - 1) (contract 5.5)."""
    cost = c.request.policy.topology_cost
    total = 0.0
    for name in c.topo:
        if names is not None and name not in names:
            continue
        job = c.jobs[name]
        level = job.topology.preferred if job.topology is not None else None
        if level is None:
            continue
        spanned = {_node_domain(c, p.node, level) for p in c.placed[name] if p.node in c.nodes}
        total += cost * max(len(spanned) - 1, 0)
    return total


def _check_objective(c: _Ctx) -> None:
    plan = c.plan
    value = plan.objective_value
    if not math.isfinite(value):
        c.add("objective", f"objective_value {value} is not finite")
        return
    expected = _objective(c)
    tol = OBJECTIVE_RTOL * max(1.0, abs(expected))
    if abs(value - expected) > tol:
        c.add("objective", f"objective_value {value:.9g} but the plan's "
              f"{c.request.policy.objective} objective is {expected:.9g}")
    bound = plan.best_bound
    if bound is not None:
        if not math.isfinite(bound) or bound < value - OBJECTIVE_RTOL * max(1.0, abs(value)):
            c.add("objective", f"best_bound {bound} is below objective_value {value:.9g}")
        elif plan.gap is not None:
            want = (bound - value) / max(1.0, abs(bound))
            if not math.isfinite(plan.gap) or abs(plan.gap - want) > OBJECTIVE_RTOL * max(
                1.0, abs(want)
            ):
                c.add("objective", f"gap {plan.gap} but (bound - value) / max(1, |bound|) "
                      f"= {want:.9g}")


# ---------------------------------------------------------------- 5.2 interference


def _colocation_factors(c: _Ctx) -> dict[str, float]:
    """Placed shared job with a class -> the product, over the other shared jobs on its
    GPU, of speed(its class, their class) (an absent pair or a classless job: 1)."""
    speeds = {(p.a, p.b): p.speed for p in c.request.interference}
    if not speeds:
        return {}
    residents: dict[GpuKey, list[str]] = defaultdict(list)
    for name, pls in c.placed.items():
        if c.jobs[name].gpu_share is not None and len(pls) == 1 and pls[0].fraction:
            residents[(pls[0].node, pls[0].gpu)].append(name)
    out: dict[str, float] = {}
    for names in residents.values():
        for name in names:
            mine = c.jobs[name].colocation_class
            if mine is None or len(names) < 2:
                continue
            f = 1.0
            for other in names:
                theirs = c.jobs[other].colocation_class
                if other != name and theirs is not None:
                    f *= speeds.get((mine, theirs), 1.0)
            out[name] = f
    return out


def _check_interference(c: _Ctx) -> None:
    """stats.interference_loss = sum over placed jobs slowed (factor < 1) of their
    throughput value * (1 - factor); required when some job is slowed."""
    want = 0.0
    for n, f in c.factors.items():
        got_model = c.model_of((c.placed[n][0].node, c.placed[n][0].gpu)) if f < 1.0 else None
        if got_model is not None:
            want += _value(c.jobs[n], *got_model) * (1.0 - f)
    got = getattr(c.plan.stats, "interference_loss", None)
    if got is None:
        if want > 0:
            c.add("interference", f"stats.interference_loss missing; the plan loses {want:.9g}")
        return
    if not isinstance(got, int | float) or not math.isfinite(got) or got < 0 or abs(
            got - want) > OBJECTIVE_RTOL * max(1.0, abs(want)):
        c.add("interference", f"stats.interference_loss {got} but the plan loses {want:.9g}")
# ---------------------------------------------------------------- Q1, priority, levels


ANY = "*"
QKey = tuple[str, str]


def _chain(c: _Ctx, tenant: str) -> list[str]:
    """The tenant (when it has a quota) and its ancestors (once per tenant and plan)."""
    out = c._chains.get(tenant)
    if out is None:
        quotas = c.request.cluster.quotas
        out = c._chains[tenant] = []
        t: str | None = tenant
        while t is not None and t in quotas and t not in out:
            out.append(t)
            t = quotas[t].parent
    return out


def _keys(c: _Ctx, tenant: str, model: str) -> list[QKey]:
    """The keys a placement of a job of `tenant` on `model` counts for: per tenant of its
    chain, `model` and "*" where that tenant guarantees or limits them (once per pair)."""
    out = c._qkeys.get((tenant, model))
    if out is None:
        quotas = c.request.cluster.quotas
        out = c._qkeys[(tenant, model)] = [
            (t, key) for t in _chain(c, tenant) for key in (model, ANY)
            if key in quotas[t].guaranteed or key in quotas[t].limit]
    return out


def _usage(c: _Ctx, names: Iterable[str], models: Mapping[str, tuple[str, GpuModel]]
           ) -> dict[QKey, float]:
    """Usage per (tenant, key) of the jobs `names`, each on the model it is placed on (a
    job that counts for no key adds nothing: its size is not read)."""
    out: dict[QKey, float] = defaultdict(float)
    jobs, placed = c.jobs, c.placed
    for name in names:
        got = models.get(name)
        if got is None:
            continue
        job = jobs[name]
        model, spec = got
        keys = _keys(c, job.tenant, model)
        if not keys:
            continue
        # a gang uses the GPUs it got, other shapes their size
        size = float(len(placed.get(name) or job.current or [])) if job.gpus is not None \
            else _size(job, spec)
        for key in keys:
            out[key] += size
    return out


def _plan_usage(c: _Ctx) -> dict[QKey, float]:
    """`_usage` of every placed job (once per plan; callers do not change it)."""
    if c._usage is None:
        c._usage = _usage(c, c.placed, _placed_models(c))
    return c._usage


def _served(c: _Ctx, usage: Mapping[QKey, float]) -> float:
    """sum over tenants and keys of min(usage, guaranteed)."""
    return sum(min(usage.get((t, k), 0.0), g)
               for t, q in c.request.cluster.quotas.items() for k, g in q.guaranteed.items())


def _fixed_usage(c: _Ctx) -> dict[QKey, float]:
    """Usage of the non-preemptible running jobs kept in place (they may exceed limits;
    once per plan, callers do not change it)."""
    if c._fixed is None:
        c._fixed = _usage(c, [n for n in c.kept if not c.jobs[n].preemptible],
                          _placed_models(c))
    return c._fixed


def _over_limit(c: _Ctx, usage: Mapping[QKey, float], fixed: Mapping[QKey, float],
                keys: Iterable[QKey]) -> list[tuple[QKey, float, float]]:
    """(key, usage, limit) of each key of `keys` whose usage breaks its limit."""
    quotas = c.request.cluster.quotas
    out = []
    for t, k in keys:
        lim = quotas[t].limit.get(k)
        if lim is None:
            continue
        cap = max(lim, fixed.get((t, k), 0.0))
        if usage.get((t, k), 0.0) > cap * (1 + CAPACITY_TOL) + CAPACITY_TOL:
            out.append(((t, k), usage.get((t, k), 0.0), lim))
    return out


def _check_quota(c: _Ctx) -> None:
    quotas = c.request.cluster.quotas
    if not quotas:
        return
    usage = _plan_usage(c)
    keys = [(t, k) for t, q in quotas.items() for k in q.limit]
    for (t, k), used, lim in _over_limit(c, usage, _fixed_usage(c), keys):
        c.add("quota", f"tenant {t!r} uses {used:.6g} on {k!r}, over its limit {lim:.6g}")


def _classes(c: _Ctx) -> list[int]:
    """The jobs' priority classes, the highest first."""
    return c.classes


@dataclass
class _Index:
    """What the priority check looks up per stopped job, computed once per plan: the
    placed jobs per GPU and per node, the usage of every key, the fixed usage and the
    guaranteed usage served."""

    models: Mapping[str, tuple[str, GpuModel]]
    on_gpu: dict[GpuKey, list[str]]
    on_node: dict[str, set[str]]
    usage: dict[QKey, float]
    fixed: dict[QKey, float]
    served: float


def _index(c: _Ctx) -> _Index:
    models = _placed_models(c)
    on_gpu: dict[GpuKey, list[str]] = defaultdict(list)
    on_node: dict[str, set[str]] = defaultdict(set)
    for name, pls in c.placed.items():
        for p in pls:
            on_gpu[(p.node, p.gpu)].append(name)
            on_node[p.node].add(name)
    usage = _plan_usage(c)
    return _Index(models, on_gpu, on_node, usage, _fixed_usage(c), _served(c, usage))


def _keeps_fit(c: _Ctx, h: Job, others: Iterable[str], usage: Mapping[QKey, float],
               ix: _Index) -> bool:
    """Whether running job h, kept exactly in place, fits beside the jobs `others` (every
    job left on its GPUs and host-limited nodes) as they are placed: its GPUs (whole,
    shares, MIG layout), its nodes' host capacity, and the quota limits of its tenants
    given `usage` (the plan's without the jobs taken out)."""
    cur = h.current or []
    mine = {(p.node, p.gpu) for p in cur}
    nodes = {p.node for p in cur}
    frac: dict[GpuKey, float] = defaultdict(float)
    mem: dict[GpuKey, float] = defaultdict(float)
    insts: dict[GpuKey, list[Instance]] = defaultdict(list)
    busy: set[GpuKey] = set()
    cpu: dict[str, float] = defaultdict(float)
    hmem: dict[str, float] = defaultdict(float)
    for name in [*others, h.name]:
        job = c.jobs[name]
        pls = cur if name == h.name else c.placed[name]
        part = 1.0 / len(pls) if job.shape == "whole" else 1.0
        for p in pls:
            key = (p.node, p.gpu)
            if p.node in nodes:
                cpu[p.node] += (job.cpu_millicores or 0.0) * part
                hmem[p.node] += (job.host_memory_gib or 0.0) * part
            if key not in mine:
                continue
            if p.mig is not None:
                insts[key].append(p.mig.key())
            elif p.fraction is not None:
                frac[key] += p.fraction
                mem[key] += job.gpu_memory_gib or 0.0
            else:
                if key in busy:
                    return False
                busy.add(key)
    for key in mine:
        got = c.model_of(key)
        if got is None:
            return False
        spec = got[1]
        if (key in busy and frac[key] > 0) or frac[key] > 1 + CAPACITY_TOL:
            return False
        if spec.memory_gib is not None and mem[key] > spec.memory_gib + CAPACITY_TOL:
            return False
        if insts[key] and (len(set(insts[key])) != len(insts[key])
                           or layout_violations(spec, insts[key])):
            return False
    for n in nodes:
        node = c.nodes[n]
        for used, cap in ((cpu[n], node.cpu_millicores), (hmem[n], node.memory_gib)):
            if cap is not None and used > cap * (1 + CAPACITY_TOL) + CAPACITY_TOL:
                return False
    return not _over_limit(c, usage, ix.fixed, [k for k in usage if k[0] in _chain(c, h.tenant)])


def _displaced_by(c: _Ctx, h: Job, ix: _Index) -> list[str]:
    """The removable lower-class jobs whose removal would let running job h be kept
    (empty when keeping h would need more than that; see the module doc)."""
    cur = h.current or []
    got = c.model_of((cur[0].node, cur[0].gpu)) if cur else None
    if got is None:
        return []
    model, spec = got
    gpus = {(p.node, p.gpu) for p in cur}
    nodes = {p.node for p in cur if c.nodes[p.node].cpu_millicores is not None
             or c.nodes[p.node].memory_gib is not None}
    local = {n for g in gpus for n in ix.on_gpu.get(g, [])}
    for nd in nodes:
        local |= ix.on_node.get(nd, set())

    def removable(name: str) -> bool:
        job = c.jobs[name]
        return job.priority < h.priority and not (name in c.kept and not job.preemptible)

    gone = {n for n in local if removable(n)}
    if not gone:
        return []
    # h's usage on its keys; the keys whose limit it would break
    quotas = c.request.cluster.quotas
    size = _size(h, spec)
    keys = _keys(c, h.tenant, model)
    usage = dict(ix.usage)
    for key, u in _usage(c, gone, ix.models).items():
        usage[key] -= u
    if not _keeps_fit(c, h, sorted(local - gone), {**usage, **{
            key: usage.get(key, 0.0) + size for key in keys}}, ix):
        return []
    if quotas:
        for key in keys:
            usage[key] = usage.get(key, 0.0) + size
        if _served(c, usage) < ix.served - OBJECTIVE_RTOL * max(1.0, ix.served):
            return []
    return sorted(gone)


def _check_priority(c: _Ctx) -> None:
    policy = c.request.policy
    if len(_classes(c)) < 2 or not policy.allow_preemption or c.plan.status == "infeasible":
        return
    term = _ADDITIVE.get(policy.objective, _job_term_throughput)
    _, stopped = _running_outcome(c)
    ix: _Index | None = None
    for name in stopped:
        h = c.jobs[name]
        if not h.preemptible or not h.current:
            continue
        got = c.model_of((h.current[0].node, h.current[0].gpu))
        if got is None or term(h, *got, len(h.current)) + policy.preemption_cost <= CAPACITY_TOL:
            continue
        ix = ix or _index(c)
        by = _displaced_by(c, h, ix)
        if by:
            c.add("priority", f"running job of class {h.priority} stopped while removing "
                  f"lower-class work ({', '.join(by[:5])}{', ...' if len(by) > 5 else ''}) "
                  "would have kept it", job=name)


def _class_values(c: _Ctx, models: Mapping[str, tuple[str, GpuModel]]
                  ) -> list[tuple[str, float]]:
    """(level, value): the guaranteed usage served (with quotas), then each class."""
    out: list[tuple[str, float]] = []
    if c.request.cluster.quotas:
        out.append(("quota", _served(c, _plan_usage(c))))
    policy = c.request.policy
    moved, stopped = _running_outcome(c)
    term = _ADDITIVE.get(policy.objective, _job_term_throughput)
    # each class's jobs in request order, sorted out in one pass
    of_class: dict[int, list[str]] = {p: [] for p in _classes(c)}
    if policy.objective != "fairness":
        for n, j in c.jobs.items():
            of_class[j.priority].append(n)
    for p in _classes(c):
        if policy.objective == "fairness":
            out.append((f"priority {p}", _fairness(c, models, p)))
            continue
        jobs = of_class[p]
        value = sum(term(c.jobs[n], *models[n], len(c.placed[n])) * c.factors.get(n, 1.0)
                    for n in jobs if n in models)
        value -= _topology_costs(c, set(jobs))
        value -= policy.migration_cost * sum(1 for n in moved if c.jobs[n].priority == p)
        value -= policy.preemption_cost * sum(1 for n in stopped if c.jobs[n].priority == p)
        out.append((f"priority {p}", value))
    return out


def _check_levels(c: _Ctx) -> None:
    quotas = c.request.cluster.quotas
    if not quotas and len(_classes(c)) < 2:
        return
    stats = c.plan.stats.model_dump()
    models = _placed_models(c)
    want = _class_values(c, models)
    got = stats.get("levels")
    if not isinstance(got, list) or [x.get("level") for x in got if isinstance(x, dict)] \
            != [lvl for lvl, _ in want]:
        c.add("levels", f"stats.levels lists {got!r}, expected levels "
              f"{[lvl for lvl, _ in want]}")
    else:
        for (lvl, v), item in zip(want, got, strict=True):
            if abs(float(item.get("value", math.nan)) - v) > OBJECTIVE_RTOL * max(1.0, abs(v)):
                c.add("levels", f"stats.levels {lvl} is {item.get('value')}, recomputed {v:.9g}")
    if not quotas:
        return
    usage = _plan_usage(c)
    table = stats.get("quota")
    for t, q in quotas.items():
        for k in sorted(set(q.guaranteed) | set(q.limit)):
            row = table.get(t, {}).get(k) if isinstance(table, dict) else None
            u = usage.get((t, k), 0.0)
            if not isinstance(row, dict) or abs(row.get("usage", math.nan) - u) > 1e-6 \
                    or row.get("guaranteed") != q.guaranteed.get(k, 0.0) \
                    or row.get("limit") != q.limit.get(k):
                c.add("levels", f"stats.quota[{t!r}][{k!r}] is {row!r}, expected usage "
                      f"{u:.6g}, guaranteed {q.guaranteed.get(k, 0.0)}, limit {q.limit.get(k)}")


# ---------------------------------------------------------------- driver


def _first_wins(items: Iterable[tuple[K, V]]) -> dict[K, V]:
    """`items` as a dict in their order, the first of equal keys winning (one `dict` call,
    then a loop only when some key repeats)."""
    pairs = list(items)
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    out = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def _context(request: PlanRequest, plan: Plan) -> _Ctx:
    cluster = request.cluster.nodes
    nodes = _first_wins((n.name, n) for n in cluster)
    catalog = request.cluster.catalog()
    jobs: dict[str, Job] = {}
    running: list[str] = []
    classes: set[int] = set()
    for j in request.jobs:   # (a repeated name: the first job wins)
        name = j.name
        if name not in jobs:
            jobs[name] = j
            if j.current:
                running.append(name)
            classes.add(j.priority)
    c = _Ctx(request=request, plan=plan, catalog=catalog, jobs=jobs, nodes=nodes,
             gpu_info=_GpuTable(cluster, catalog), running=running,
             classes=sorted(classes, reverse=True),
             unschedulable={name for name, n in nodes.items() if not n.schedulable})
    _read_plan(c)
    c.factors = _colocation_factors(c)
    return c


def _fast_reads() -> bool:
    """Whether `_read_plan` clears, while reading them, the jobs whose placements a valid
    plan holds (the tests turn this off, with `_plain_gang`, `_plain_fresh_gang` and
    `_plain_instances`, to hold the verdicts to those of the general checks)."""
    return True


def _read_plan(c: _Ctx) -> None:
    """Fill `c`'s views of the plan in one pass over its assignments (each job and each
    placement is read here once, and what the checks need of it derived while it is at
    hand): `assigned`, `empty`, `placed`, `kept`, `moved`, `topo`, `elastic`, `mig_rows`,
    `mig_named`, `frac_rows`, the whole GPUs' jobs, the host sums, the objective's `terms`,
    and the jobs the eligibility and gang checks are left to read (`odd` with their
    `shapes`, `gangs`, each with its `rows`: the others are jobs the fast paths clear).

    The fast paths (`_fast_reads`), per shape: a kept whole-GPU or MIG job on existing GPUs
    of a catalog model and of the mode of its kind (a whole GPU: no MIG instance, no
    fraction); a new one also on schedulable nodes' healthy GPUs of an eligible model (a
    new MIG job's instance covering its demand); a shared job on one existing GPU of a
    catalog model with its `gpu_share` as the fraction (a new one also on an open, healthy
    GPU of an eligible model), or a kept one on its current placement with a finite
    fraction. A gang on such GPUs is cleared of the gang check when `_plain_gang` (kept)
    or `_plain_fresh_gang` clears it. A running job's placements are its current ones when
    they are the very objects of `current` (compared by `is`), else by `_same_places`;
    whether they equal `current` (only a kept shared job asks) is asked only then."""
    jobs, placed, all_rows = c.jobs, c.placed, c.rows
    on_node: dict[str, dict[int, _GpuInfo]] = c.gpu_info.by_node
    no_gpus: dict[int, _GpuInfo] = {}
    closed = c.unschedulable
    mig_rows, mig_named, frac_rows = c.mig_rows, c.mig_named, c.frac_rows
    whole_first, whole_more = c.whole_first, c.whole_more
    assigned, empty, kept, odd, gangs = c.assigned, c.empty, c.kept, c.odd, c.gangs
    shapes, topo, elastics = c.shapes, c.topo, c.elastic
    host_cpu, host_mem = c.host_cpu, c.host_mem
    term = _ADDITIVE.get(c.request.policy.objective)
    terms = c.terms
    # (the throughput term of one placement is written out below: `_value`'s products)
    value_term = term is _value
    slices: dict[tuple[str, str | None], int] = {}
    fast = _fast_reads()
    moved = 0
    for a in c.plan.assignments:
        name, pls = a.job, a.placements
        assigned.append(name)
        if not pls:
            empty.append(name)
            continue
        job = jobs.get(name)
        if job is None or name in placed:   # (the first assignment of a job wins)
            continue
        placed[name] = pls
        n = len(pls)
        cur = job.current
        if cur:
            # (kept placements are the very objects of `current`: compared by `is` first)
            identical = pls is cur or (n == len(cur) and (
                pls[0] is cur[0] if n == 1 else all(map(operator.is_, pls, cur))))
            if identical:
                is_kept = True
            elif n == len(cur) == 1:   # (one placement: where it is, then its instance)
                p, q = pls[0], cur[0]
                is_kept = p.node == q.node and p.gpu == q.gpu and _pkey(p) == _pkey(q)
            else:
                is_kept = _same_places(cur, pls)
            if is_kept:
                kept.add(name)
            else:
                moved += 1
        else:
            identical = is_kept = False
        if job.topology is not None:
            topo.append(name)
        elastic = job.elastic
        if elastic is not None:
            elastics.append(name)
        if n > 1:
            _read_placements(c, name, job, pls, is_kept, fast, term)
            continue
        # one placement (most jobs): read without a loop
        gpus = job.gpus
        share = None if gpus is not None else job.gpu_share
        p = pls[0]
        key = (p.node, p.gpu)
        info = on_node.get(key[0], no_gpus).get(key[1])
        mig, frac = p.mig, p.fraction
        plain = False
        if info is not None:
            spec = info[2]
            if mig is not None:
                mig_rows.append((name, p, key, info, mig, frac))
                if info[3]:
                    mig_named.append((key, mig.profile, mig.start))
            if frac is not None:
                frac_rows.append((name, key, info, frac, job.gpu_memory_gib or 0.0))
            elif mig is None and gpus is not None:
                if key in whole_first:
                    whole_more.setdefault(key, []).append(name)
                else:
                    whole_first[key] = name
            cpu_request, mem_request = job.cpu_millicores, job.host_memory_gib
            if cpu_request or mem_request:
                # A gang's host request is split pro rata over its GPUs (docs/semantics.md).
                part = 1.0 / gpus if gpus else 1.0
                node = key[0]
                host_cpu[node] = host_cpu.get(node, 0.0) + (cpu_request or 0.0) * part
                host_mem[node] = host_mem.get(node, 0.0) + (mem_request or 0.0) * part
            if spec is not None:
                model = info[1]
                if term is None:
                    pass
                elif value_term and elastic is None:
                    # `_value`, the same products: weight * size * speed
                    tp = job.throughput
                    speed = tp.get(model, 0.0) if tp else spec.relative_speed
                    if gpus is not None:
                        size = float(gpus)
                    elif share is not None:
                        size = share
                    elif job.mig is not None:
                        size = _size(job, spec)
                    else:   # (a named profile: its slices looked up once per model)
                        got = slices.get((model, job.mig_profile))
                        if got is None:
                            got = slices[(model, job.mig_profile)] = \
                                _demanded_slices(job, spec)
                        size = got / spec.compute_slices
                    terms[name] = job.weight * size * speed
                else:
                    terms[name] = term(job, model, spec, 1)
                # eligibility: the placement's kind, then (when new) where it is
                if not fast:
                    pass
                elif gpus is not None:
                    plain = mig is None and frac is None and not info[3]
                elif share is not None:
                    plain = frac is not None and (
                        (is_kept and math.isfinite(frac) and (identical or pls == cur))
                        or abs(frac - share) <= CAPACITY_TOL)
                else:
                    plain = mig is not None and info[3] and (
                        is_kept or _mig_cover_error(job, mig, spec) is None)
                if plain and not is_kept:
                    plain = key[0] not in closed and info[0].healthy \
                        and model_eligible(job, model, spec)
        # (a gang of one GPU, or an elastic gang, on one GPU: no gang to check)
        gang = gpus is not None and gpus != 1 and elastic is None
        if not plain or gang:
            all_rows[name] = [(name, p, key, info, mig, frac)]
            if not plain:
                odd.append(name)
                shapes[name] = "whole" if gpus is not None else \
                    "share" if share is not None else "mig"
            if gang:
                gangs.append(name)
    c.moved = moved


def _read_placements(c: _Ctx, name: str, job: Job, pls: list[Placement], kept: bool,
                     fast: bool, term: Callable[[Job, str, GpuModel, int], float] | None
                     ) -> None:
    """`_read_plan` of a job with several placements (a gang; a shared or MIG job so
    placed is odd): a gang all of whose GPUs are whole GPUs is read into keys first."""
    on_node = c.gpu_info.by_node
    no_gpus: dict[int, _GpuInfo] = {}
    whole_first, whole_more = c.whole_first, c.whole_more
    gpus = job.gpus
    rows: list[_Row] | None = None
    plain = fast and gpus is not None
    keys = [(p.node, p.gpu) for p in pls]
    infos = [on_node.get(key[0], no_gpus).get(key[1]) for key in keys]
    if plain:
        for p, info in zip(pls, infos, strict=True):
            if info is None or p.mig is not None or p.fraction is not None \
                    or info[2] is None or info[3]:
                plain = False
                break
    if plain:   # (every GPU an existing whole GPU of a catalog model)
        for key in keys:
            if key in whole_first:
                whole_more.setdefault(key, []).append(name)
            else:
                whole_first[key] = name
        if not kept:
            closed = c.unschedulable
            model = None
            for key, info in zip(keys, infos, strict=True):
                assert info is not None and info[2] is not None
                if key[0] in closed or not info[0].healthy:
                    plain = False
                    break
                if info[1] != model:
                    if not model_eligible(job, info[1], info[2]):
                        plain = False
                        break
                    model = info[1]
    else:
        rows = [(name, p, key, info, p.mig, p.fraction)
                for p, key, info in zip(pls, keys, infos, strict=True)]
        for row in rows:
            info = row[3]
            if info is not None:
                mig, frac = row[4], row[5]
                if mig is not None:
                    c.mig_rows.append(row)
                    if info[3]:
                        c.mig_named.append((row[2], mig.profile, mig.start))
                if frac is not None:
                    c.frac_rows.append((name, row[2], info, frac, job.gpu_memory_gib or 0.0))
                elif mig is None and gpus is not None:
                    key = row[2]
                    if key in whole_first:
                        whole_more.setdefault(key, []).append(name)
                    else:
                        whole_first[key] = name
    gang = gpus is not None and not (kept and job.elastic is None and _plain_gang(keys, gpus)) \
        and not _plain_fresh_gang(job, keys, infos)
    if not plain or gang:
        c.rows[name] = rows or [(name, p, key, info, None, None)
                                for p, key, info in zip(pls, keys, infos, strict=True)]
        if not plain:
            c.odd.append(name)
            c.shapes[name] = job.shape
        if gang:
            c.gangs.append(name)
    cpu_request, mem_request = job.cpu_millicores, job.host_memory_gib
    if cpu_request or mem_request:
        # A gang's host request is split pro rata over its GPUs (docs/semantics.md).
        part = 1.0 / gpus if gpus else 1.0
        job_cpu = (cpu_request or 0.0) * part
        job_mem = (mem_request or 0.0) * part
        host_cpu, host_mem = c.host_cpu, c.host_mem
        for key, info in zip(keys, infos, strict=True):
            if info is not None:
                node = key[0]
                host_cpu[node] = host_cpu.get(node, 0.0) + job_cpu
                host_mem[node] = host_mem.get(node, 0.0) + job_mem
    first = infos[0]
    if term is not None and first is not None and first[2] is not None:
        c.terms[name] = term(job, first[1], first[2], len(pls))


#: The rule checks, keyed by rule name (contract section 3 order).
CHECKS: Mapping[str, Callable[[_Ctx], None]] = {
    "accounting": _check_accounting,
    "eligibility": _check_eligibility,
    "whole_gpu": _check_whole_gpu,
    "elastic": _check_elastic,
    "mig": _check_mig,
    "shared": _check_shared,
    "host_resources": _check_host_resources,
    "running": _check_running,
    "topology": _check_topology,
    "objective": _check_objective,
    "interference": _check_interference,
    "quota": _check_quota,
    "priority": _check_priority,
    "levels": _check_levels,
}

#: The rule names, in the order of contract section 3.
RULES: tuple[str, ...] = tuple(CHECKS)


def validate_plan(request: PlanRequest, plan: Plan) -> list[Violation]:
    """Every violation of contract section 3 by `plan` for `request` (empty = valid)."""
    c = _context(request, plan)
    for check in CHECKS.values():
        check(c)
    return c.out
