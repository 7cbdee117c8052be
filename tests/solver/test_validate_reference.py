"""solver/validate.py gives the verdicts of the validator as it was before its read pass
was reworked (fast paths in `_read_plan`, per-node GPU tables, the MIG hosting check in
sets): the same violations (rules, messages, locations, order) on valid plans and on
plans broken one way at a time, on S and M instances and their v1.1 variants (elastic
gangs, topology levels, quotas and priority classes, co-location), and with its fast
paths off.

The former validator is kept below as a private reference copy (`_reference`), verbatim
but for its module docstring and the names of its two entry points; it lives here only,
not in solver/, and is not to be edited: it is what the current one must agree with.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from benchmarks.generator import generate
from heuristics.greedy import plan_greedy
from models import Assignment, MigChange, Unplaced
from models.catalog import GpuModel, Instance, layout_violations
from models.plan import Plan
from models.request import Gpu, Job, MigInstance, Node, Placement, PlanRequest
from models.rules import model_eligible
from solver import validate as current
from solver.build import build_plan
from tests.solver.strategies import random_levels_request, random_request
from tests.solver.test_validate_tallies import _corrupt

Rows = list[tuple[str, list[Placement]]]
Mutation = Callable[[PlanRequest, Plan, random.Random], "tuple[PlanRequest, Plan] | None"]

#: The fast paths of the current validator, each replaced by "no" in `_general`.
FAST_PATHS = ("_plain_kept", "_plain_gang", "_plain_new", "_plain_instances",
              "_plain_fresh_gang")


def _verdict(check: Callable[[PlanRequest, Plan], list[Any]], request: PlanRequest,
             plan: Plan) -> list[tuple[Any, ...]]:
    return [(v.rule, v.message, v.job, v.node, v.gpu) for v in check(request, plan)]


def _general(request: PlanRequest, plan: Plan) -> list[Any]:
    """The current validator with its fast paths off."""
    with pytest.MonkeyPatch.context() as mp:
        for name in FAST_PATHS:
            mp.setattr(current, name, lambda *_: False)
        return current.validate_plan(request, plan)


def _agree(request: PlanRequest, plan: Plan) -> list[tuple[Any, ...]]:
    """The verdict of the current validator, asserted equal to the reference's and to its
    own with the fast paths off."""
    new = _verdict(current.validate_plan, request, plan)
    assert new == _verdict(_reference, request, plan)
    assert new == _verdict(_general, request, plan)
    assert current.recompute_objective(request, plan) == _reference_objective(request, plan)
    return new


def _base(request: PlanRequest, seed: int = 0) -> Plan:
    result = plan_greedy(request, seed=seed, deadline=time.monotonic() + 60)
    return build_plan(request, result, status="heuristic", solver="greedy")


def _rows(plan: Plan) -> Rows:
    return [(a.job, list(a.placements)) for a in plan.assignments]


def _with(plan: Plan, rows: Rows | None = None, **update: Any) -> Plan:
    if rows is not None:
        update["assignments"] = [Assignment.model_construct(job=j, placements=p)
                                 for j, p in rows]
    return plan.model_copy(update=update)


def _jobs(request: PlanRequest) -> dict[str, Job]:
    return {j.name: j for j in request.jobs}


def _pick(rng: random.Random, rows: Rows, request: PlanRequest,
          test: Callable[[Job, list[Placement]], bool]) -> int | None:
    jobs = _jobs(request)
    hits = [i for i, (name, pls) in enumerate(rows) if name in jobs and test(jobs[name], pls)]
    return rng.choice(hits) if hits else None


def _move(p: Placement, q: Placement) -> Placement:
    return p.model_copy(update={"node": q.node, "gpu": q.gpu})


# ---------------------------------------------------------------- the mutations


def _onto_busy(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A job's placement moved onto a GPU another job uses (its kind kept)."""
    rows = _rows(plan)
    if len(rows) < 2:
        return None
    i, k = rng.sample(range(len(rows)), 2)
    pls = rows[i][1]
    j = rng.randrange(len(pls))
    pls[j] = _move(pls[j], rng.choice(rows[k][1]))
    return request, _with(plan, rows)


def _overfill_share(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A shared job put beside another shared job, with a large fraction."""
    rows = _rows(plan)
    shared = [i for i, (_, pls) in enumerate(rows) if pls[0].fraction is not None]
    if len(shared) < 2:
        return None
    i, k = rng.sample(shared, 2)
    frac = rng.choice([None, 0.9, 1.0])
    p = _move(rows[i][1][0], rows[k][1][0])
    rows[i] = (rows[i][0], [p if frac is None else p.model_copy(update={"fraction": frac})])
    return request, _with(plan, rows)


def _break_gang(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A gang with a GPU fewer, a GPU twice, or a GPU of another node."""
    rows = _rows(plan)
    i = _pick(rng, rows, request, lambda job, pls: len(pls) > 1)
    if i is None:
        return None
    pls = rows[i][1]
    how = rng.randrange(3)
    if how == 0:
        pls.pop()
    elif how == 1:
        pls[1] = pls[0]
    else:
        others = [q for _, qs in rows for q in qs if q.node != pls[0].node and q.mig is None]
        if not others:
            return None
        pls[-1] = _move(pls[-1], rng.choice(others)).model_copy(update={"fraction": None})
    return request, _with(plan, rows)


def _mig_profile(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A MIG placement on another profile or start (absent, too small, not in the layout)."""
    rows = _rows(plan)
    i = _pick(rng, rows, request, lambda job, pls: pls[0].mig is not None)
    if i is None:
        return None
    p = rows[i][1][0]
    assert p.mig is not None
    inst = MigInstance(profile=rng.choice(["1g.10gb", "1g.5gb", "2g.20gb", "3g.40gb",
                                           "7g.80gb", "4g.20gb", p.mig.profile]),
                       start=rng.choice([0, 1, 2, 4, 6, p.mig.start]))
    rows[i] = (rows[i][0], [p.model_copy(update={"mig": inst})])
    return request, _with(plan, rows)


def _mig_twice(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A MIG job put on another MIG job's instance."""
    rows = _rows(plan)
    migs = [i for i, (_, pls) in enumerate(rows) if pls[0].mig is not None]
    if len(migs) < 2:
        return None
    i, k = rng.sample(migs, 2)
    rows[i] = (rows[i][0], [rows[k][1][0]])
    return request, _with(plan, rows)


def _destroy_kept(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A MIG change destroying (or creating over) the instance of a placed MIG job."""
    rows = _rows(plan)
    i = _pick(rng, rows, request, lambda job, pls: pls[0].mig is not None)
    if i is None:
        return None
    p = rows[i][1][0]
    assert p.mig is not None
    change = MigChange(node=p.node, gpu=p.gpu, destroy=[p.mig],
                       create=[p.mig] if rng.random() < 0.5 else [])
    changes = [ch for ch in plan.mig_changes if (ch.node, ch.gpu) != (p.node, p.gpu)]
    if rng.random() < 0.3:
        changes.append(change)   # (and listed twice)
    return request, _with(plan, mig_changes=[*changes, change])


def _host_overcommit(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A node hosting placed jobs given less host capacity than they request."""
    jobs = _jobs(request)
    used = {p.node for a in plan.assignments for p in a.placements
            if a.job in jobs and (jobs[a.job].cpu_millicores or jobs[a.job].host_memory_gib)}
    if not used:
        return None
    req = request.model_copy(deep=True)
    name = rng.choice(sorted(used))
    for node in req.cluster.nodes:
        if node.name == name:
            node.cpu_millicores = rng.choice([0.0, 1000.0])
            node.memory_gib = rng.choice([None, 1.0])
    return req, plan


def _figures(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """The objective value, bound, gap or status off."""
    how = rng.randrange(5)
    if how == 0:
        return request, _with(plan, objective_value=plan.objective_value + 1.5)
    if how == 1:
        return request, _with(plan, objective_value=math.nan)
    if how == 2:
        return request, _with(plan, best_bound=plan.objective_value - 10.0)
    if how == 3:
        return request, _with(plan, best_bound=plan.objective_value + 5.0, gap=0.5)
    return request, _with(plan, status="infeasible")


def _listing(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A job dropped, listed twice, both placed and unplaced, or unknown."""
    rows = _rows(plan)
    unplaced = list(plan.unplaced)
    how = rng.randrange(5)
    if how == 0 and rows:
        rows.pop(rng.randrange(len(rows)))
    elif how == 1 and rows:
        rows.append(rng.choice(rows))
    elif how == 2 and rows:
        unplaced.append(Unplaced(job=rng.choice(rows)[0], reason="time_limit"))
    elif how == 3 and unplaced:
        unplaced.pop(rng.randrange(len(unplaced)))
    elif how == 4:
        rows.append(("no-such-job", [Placement(node="no-such-node", gpu=0)]))
        rows.append(("no-such-job-either", []))
    else:
        return None
    return request, _with(plan, rows, unplaced=unplaced)


def _elastic_size(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """An elastic gang on a GPU more or fewer."""
    rows = _rows(plan)
    i = _pick(rng, rows, request, lambda job, pls: job.elastic is not None)
    if i is None:
        return None
    pls = rows[i][1]
    if len(pls) > 1 and rng.random() < 0.5:
        pls.pop()
    else:
        node = next(n for n in request.cluster.nodes if n.name == pls[0].node)
        free = [g.index for g in node.gpus if g.index not in {p.gpu for p in pls}]
        if not free:
            return None
        pls.append(Placement(node=node.name, gpu=rng.choice(free)))
    return request, _with(plan, rows)


def _quota(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A tenant's quota limit cut below its usage."""
    if not request.cluster.quotas:
        return None
    req = request.model_copy(deep=True)
    tenant = rng.choice(sorted(req.cluster.quotas))
    q = req.cluster.quotas[tenant]
    q.limit = dict.fromkeys([*q.limit, "*"], 0.0)
    return req, plan


def _health(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A used GPU marked unhealthy, its node cordoned, or its model not eligible."""
    used = [p for a in plan.assignments for p in a.placements]
    if not used:
        return None
    p = rng.choice(used)
    req = request.model_copy(deep=True)
    how = rng.randrange(3)
    for node in req.cluster.nodes:
        if node.name == p.node:
            if how == 0:
                node.schedulable = False
            for g in node.gpus:
                if g.index == p.gpu and how == 1:
                    g.healthy = False
    if how == 2:
        for job in req.jobs:
            if any(a.job == job.name and a.placements and a.placements[0] is p
                   for a in plan.assignments):
                job.allowed_models = ["no-such-model"]
    return req, plan


def _running_lists(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """`preempted` / `migrated` with a job too many, too few or twice."""
    placed = [a.job for a in plan.assignments]
    key = rng.choice(["preempted", "migrated"])
    listed = list(getattr(plan, key))
    how = rng.randrange(3)
    if how == 0 and placed:
        listed.append(rng.choice(placed))
    elif how == 1 and listed:
        listed.pop(rng.randrange(len(listed)))
    elif how == 2 and listed:
        listed.append(listed[0])
    else:
        return None
    return request, _with(plan, **{key: listed})


def _fraction(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A shared placement on another fraction, none, or on an unknown GPU."""
    rows = _rows(plan)
    i = _pick(rng, rows, request, lambda job, pls: pls[0].fraction is not None)
    if i is None:
        return None
    p = rows[i][1][0]
    how = rng.randrange(3)
    q = p.model_copy(update={"fraction": rng.choice([0.05, 0.3, 0.75])}) if how == 0 else \
        p.model_copy(update={"fraction": None}) if how == 1 else \
        p.model_copy(update={"gpu": 99})
    rows[i] = (rows[i][0], [q])
    return request, _with(plan, rows)


def _stats(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """`stats.interference_loss` or `stats.levels` off."""
    stats = plan.stats.model_dump()
    if rng.random() < 0.5:
        stats["interference_loss"] = rng.choice([0.0, 1.0, -1.0])
    elif isinstance(stats.get("levels"), list) and stats["levels"]:
        stats["levels"] = [dict(x) for x in stats["levels"]]
        stats["levels"][0]["value"] = float(stats["levels"][0].get("value", 0.0)) + 1.0
    else:
        return None
    return request, _with(plan, stats=type(plan.stats).model_validate(stats))


def _random(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """Up to four random corruptions (tests/solver/test_validate_tallies.py's)."""
    return request, _corrupt(request, plan, rng, rng.randint(1, 4))


MUTATIONS: dict[str, Mutation] = {
    "onto_busy": _onto_busy,
    "overfill_share": _overfill_share,
    "break_gang": _break_gang,
    "mig_profile": _mig_profile,
    "mig_twice": _mig_twice,
    "destroy_kept": _destroy_kept,
    "host_overcommit": _host_overcommit,
    "figures": _figures,
    "listing": _listing,
    "elastic_size": _elastic_size,
    "quota": _quota,
    "health": _health,
    "running_lists": _running_lists,
    "fraction": _fraction,
    "stats": _stats,
    "random": _random,
}

#: The generated instances: (size, seed, `generate` options).
INSTANCES: list[tuple[str, int, dict[str, Any]]] = [
    ("S", 0, {}),
    ("S", 1, {"elastic": 0.4}),
    ("S", 2, {"topology": ("zone", "block", "rack")}),
    ("S", 3, {"tenants_quota": 4, "priority_classes": 3}),
    ("S", 4, {"elastic": 0.3, "topology": ("zone", "rack"), "tenants_quota": 3,
              "priority_classes": 2}),
    ("M", 0, {}),
    ("M", 1, {"elastic": 0.3, "topology": ("zone", "block", "rack"), "tenants_quota": 4,
              "priority_classes": 3}),
]


def _mutated(request: PlanRequest, plan: Plan, seed: int, tries: int) -> Iterable[Any]:
    """`tries` mutants of each kind (those that apply)."""
    for name, mutate in MUTATIONS.items():
        for k in range(tries):
            got = mutate(request, plan, random.Random(f"{seed}-{name}-{k}"))
            if got is not None:
                yield name, got


@pytest.mark.parametrize(("size", "seed", "options"), INSTANCES,
                         ids=[f"{s}{k}-{'-'.join(o) or 'v1'}" for s, k, o in INSTANCES])
def test_agrees_with_the_reference_on_generated_instances(size: str, seed: int,
                                                          options: dict[str, Any]) -> None:
    request = generate(size, seed, **options)
    plan = _base(request, seed)
    assert _agree(request, plan) == []   # (the greedy plan is valid)
    tries = 3 if size == "S" else 2
    broken = 0
    for _, (req, bad) in _mutated(request, plan, seed, tries):
        broken += bool(_agree(req, bad))
    assert broken >= len(MUTATIONS)   # (most mutants break something)


@pytest.mark.parametrize("seed", range(40))
def test_agrees_with_the_reference_on_small_random_requests(seed: int) -> None:
    """Every feature at once, co-location included: tiny requests, their greedy plans and
    one mutant of each kind."""
    rng = random.Random(seed)
    kw: dict[str, Any] = {"max_gpus": 6, "max_jobs": 7, "max_nodes": 3,
                          "elastic": rng.choice([0.0, 0.4]), "topology": rng.random() < 0.5,
                          "interference": rng.random() < 0.6}
    request = random_levels_request(rng, **kw) if seed % 3 == 0 else \
        random_request(rng, **kw)
    plan = _base(request, rng.randrange(3))
    _agree(request, plan)
    for _, (req, bad) in _mutated(request, plan, seed, 1):
        _agree(req, bad)


def test_agrees_on_a_plan_that_keeps_every_running_job() -> None:
    """The kept jobs' fast paths: an M plan placing exactly the running jobs where they
    run (and the same with one of them moved)."""
    request = generate("M", 2)
    running = [j for j in request.jobs if j.current]
    plan = _base(request)
    rows: Rows = [(j.name, list(j.current or [])) for j in running]
    kept = _with(plan, rows, unplaced=[Unplaced(job=j.name, reason="time_limit")
                                       for j in request.jobs if not j.current],
                 preempted=[], migrated=[], mig_changes=[])
    kept = _with(kept, objective_value=current.recompute_objective(request, kept),
                 best_bound=None, gap=None)
    assert _agree(request, kept) == []
    for k in range(6):
        _agree(*_onto_busy(request, kept, random.Random(k)))


# ---------------------------------------------------------------- the reference
# solver/validate.py as of commit 9aaa1c7 (before the rework), verbatim below this line
# but for `validate_plan` / `recompute_objective`, named `_reference` /
# `_reference_objective` here.


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


@dataclass
class _Ctx:
    """Everything the rule checks share, computed once from the request and the plan: the
    request's lookups, and the plan's placements read once into `rows` (a placement is a
    pydantic object whose every attribute read costs; the checks walk the rows)."""

    request: PlanRequest
    plan: Plan
    catalog: dict[str, GpuModel]
    jobs: dict[str, Job]
    nodes: dict[str, Node]
    #: (node, index) -> the GPU, as a `_GpuInfo`.
    gpu_info: dict[GpuKey, _GpuInfo]
    #: Running jobs (with `current`) in request order.
    running: list[str]
    #: The jobs' priority classes, the highest first.
    classes: list[int]
    #: Placed known jobs -> their placements (the first assignment of each job).
    placed: dict[str, list[Placement]] = field(default_factory=dict)
    #: Placed known jobs -> their placements as rows (in the order of `placed`).
    rows: dict[str, list[_Row]] = field(default_factory=dict)
    #: Placed known jobs -> their shape ("whole", "mig" or "share").
    shapes: dict[str, str] = field(default_factory=dict)
    #: Placed whole-GPU jobs that are not elastic -> their `gpus`.
    need: dict[str, int] = field(default_factory=dict)
    #: The placed jobs the eligibility check reads (in `placed` order): all but the kept
    #: ones whose placements `_plain_kept` clears and whose count is right for the shape.
    odd: list[str] = field(default_factory=list)
    #: The placed whole-GPU jobs the gang check reads: all but the kept ones whose
    #: placements `_plain_gang` clears (in `placed` order).
    gangs: list[str] = field(default_factory=list)
    #: The rows on existing GPUs of MIG instances, of fractions, and of neither (whole
    #: GPUs), each in row order.
    mig_rows: list[_Row] = field(default_factory=list)
    frac_rows: list[_Row] = field(default_factory=list)
    plain_rows: list[_Row] = field(default_factory=list)
    #: The `job` of every assignment, in order, and those of assignments with no placements.
    assigned: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    #: Running jobs placed exactly on their current placements.
    kept: set[str] = field(default_factory=set)
    #: The placed jobs with a `topology` and the elastic ones, each in `placed` order.
    topo: list[str] = field(default_factory=list)
    elastic: list[str] = field(default_factory=list)
    #: The placed jobs with host requests, in `placed` order: (job, `cpu_millicores`,
    #: `host_memory_gib`, `gpus`).
    hosted: list[tuple[str, float | None, float | None, int | None]] = field(
        default_factory=list)
    #: Contract 5.2: placed shared job -> product of its co-location factors (absent: 1).
    factors: dict[str, float] = field(default_factory=dict)
    out: list[Violation] = field(default_factory=list)
    _running: tuple[list[str], list[str]] | None = None
    _models: dict[str, tuple[str, GpuModel]] | None = None
    _whole: tuple[dict[GpuKey, str], dict[GpuKey, list[str]]] | None = None

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


def _check_accounting(c: _Ctx) -> None:
    jobs = c.jobs
    unplaced = [u.job for u in c.plan.unplaced]
    listed = set(c.assigned)
    listed.update(unplaced)
    if len(listed) == len(jobs) == len(c.assigned) + len(unplaced) and listed == jobs.keys():
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
    for name in c.odd:   # (the others: kept, `_plain_kept` and of the right count)
        rows = c.rows[name]
        shape = c.shapes[name]
        if shape != "whole" and len(rows) != 1:
            c.add("eligibility", f"a {shape} job takes exactly one placement, got {len(rows)}",
                  job=name)
        kept = name in kept_set
        job = c.jobs[name]
        for row in rows:
            _check_placement(c, job, shape, row[1], kept, eligible)


def _plain_kept(c: _Ctx, shape: str, rows: list[_Row], same: bool) -> bool:
    """Whether `_check_placement` finds nothing wrong with `rows`, the placements of a
    kept job of `shape` (`same`: equal to its current ones), by the few questions it asks
    of such a placement: an existing GPU of a catalog model; for a whole-GPU or MIG job, in
    the mode of the placement's kind; for a shared job, a finite fraction, its current
    one when `same`. False sends them through `_check_placement` (anything odd)."""
    if shape == "share":
        return same and all(frac is not None and math.isfinite(frac) and info is not None
                            and info[2] is not None for _, _, _, info, _, frac in rows)
    mig_mode = shape == "mig"
    # (an existing GPU is a GPU of an existing node: `gpu_info` is read from the nodes)
    for _, _, _, info, mig, frac in rows:
        if frac is not None or info is None or info[2] is None \
                or not info[3] == mig_mode == (mig is not None):
            return False
    return True


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
    prof = spec.profile(p.mig.profile)
    if prof is None:
        bad(f"model has no MIG profile {p.mig.profile!r}")
    elif job.mig_profile is not None:
        if prof.name != job.mig_profile:
            bad(f"instance {prof.name} is not the demanded profile {job.mig_profile}")
    elif job.mig is not None and (prof.compute_slices < job.mig.compute_slices
                                  or prof.memory_gib < job.mig.memory_gib - CAPACITY_TOL):
        bad(f"instance {prof.name} ({prof.compute_slices} compute slices, {prof.memory_gib} "
            f"GiB) does not cover the demand ({job.mig.compute_slices}, "
            f"{job.mig.memory_gib} GiB)")


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
    GPU again), in row order; derived once per plan (the whole-GPU and shared checks)."""
    if c._whole is None:
        first: dict[GpuKey, str] = {}
        more: dict[GpuKey, list[str]] = {}
        shapes = c.shapes
        for name, _, key, _, _, _ in c.plain_rows:
            if shapes[name] == "whole":
                if key in first:
                    more.setdefault(key, []).append(name)
                else:
                    first[key] = name
        c._whole = (first, more)
    return c._whole


def _plain_gang(rows: list[_Row], need: int | None) -> bool:
    """Whether `_check_gang` finds nothing wrong with a kept gang placed on `rows`, by the
    questions it asks of one: the gang's size is `need` (None for an elastic gang, which
    the check asks about) and its GPUs are distinct."""
    n = len(rows)
    return n == need and (n == 1 or len({row[2] for row in rows}) == n)


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
    order = [key for key in c.gpu_info if key in changed] if len(changed) > 1 else changed
    for key in order:
        final[key] = _final_layout(c, key, c.gpu_info[key][0], destroy[key], create[key])

    # Each instance hosts at most one job and exists in the final layout. Instances are
    # compared as (profile, start) pairs here (what `Instance` equality and order are),
    # without building an `Instance` per placement.
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

    # A kept running job's instance is busy: destroying it would fail.
    for name in sorted(c.kept) if any(destroy.values()) else ():
        for p in c.placed[name]:
            if p.mig is not None and p.mig.key() in destroy[(p.node, p.gpu)]:
                c.add("mig", f"destroys {p.mig.profile}@{p.mig.start}, which hosts the kept "
                      "running job", job=name, node=p.node, gpu=p.gpu)


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
    for name, _, key, info, _, frac in c.frac_rows:
        if info is None or frac is None:
            continue
        if info[3]:
            c.add("shared", "shared placement on a MIG-enabled GPU",
                  job=name, node=key[0], gpu=key[1])
        fractions[key] += frac
        memory[key] += c.jobs[name].gpu_memory_gib or 0.0
        sharers[key].append(name)
    if sharers:   # the whole-GPU jobs beside them
        first, more = _whole_on(c)
        for key in sharers:
            if key in first:
                whole[key] = [first[key], *more.get(key, ())]
    for key in sorted(sharers):
        node, idx = key
        spec = c.gpu_info[key][2]
        cap = spec.memory_gib if spec is not None else None
        over = fractions[key] > 1 + CAPACITY_TOL
        heavy = cap is not None and memory[key] > cap + CAPACITY_TOL
        if not (over or heavy or whole[key]):
            continue
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
    cpu: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    touched: set[str] = set()
    # (a node only jobs without host requests use holds them: capacities are >= 0)
    for name, cpu_request, mem_request, gpus in c.hosted:
        # A gang's host request is split pro rata over its GPUs (docs/semantics.md).
        part = 1.0 / gpus if gpus else 1.0
        job_cpu = (cpu_request or 0.0) * part
        job_mem = (mem_request or 0.0) * part
        for _, _, (node, _), info, _, _ in c.rows[name]:
            if info is not None:
                touched.add(node)
                cpu[node] += job_cpu
                mem[node] += job_mem
    for node in sorted(touched):
        spec = c.nodes[node]
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
        running = c.running
        c._running = ([n for n in running if n in c.placed and n not in c.kept],
                      [n for n in running if n not in c.placed])
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
    if job.mig is not None:
        demanded = job.mig.compute_slices
    else:
        prof = spec.profile(job.mig_profile or "")
        demanded = prof.compute_slices if prof is not None else 0
    return demanded / spec.compute_slices


def _value(job: Job, model: str, spec: GpuModel, n: int | None = None) -> float:
    """value_j(m) = weight_j * size_j(m) * speed_j(m), on n GPUs for an elastic gang."""
    return job.weight * _size(job, spec, n) * _speed(job, model, spec)


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
        for name, rows in c.rows.items():
            info = rows[0][3]
            if info is not None and info[2] is not None:
                c._models[name] = (info[1], info[2])
    return c._models


def _fairness(c: _Ctx, models: Mapping[str, tuple[str, GpuModel]],
              priority: int | None = None) -> float:
    """min over tenants k of (value of k's placed jobs) / D_k (docs/semantics.md); with
    `priority`, over the jobs of that class only (demands included)."""
    # Models present in each mode: MIG jobs need MIG-enabled GPUs, the others non-MIG ones.
    present = {mig: {model for _, model, _, on in c.gpu_info.values() if on == mig}
               for mig in (False, True)}
    demand: dict[str, float] = defaultdict(float)
    got: dict[str, float] = defaultdict(float)
    for name, job in c.jobs.items():
        if priority is not None and job.priority != priority:
            continue
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
        if options:
            demand[job.tenant] += max(_value(job, m, c.catalog[m], n)
                                      for m in options for n in sizes)
        if name in models:
            got[job.tenant] += (_value(job, *models[name], len(c.placed[name]))
                                * c.factors.get(name, 1.0))
    return min((got[k] / d for k, d in demand.items() if d > 0), default=0.0)


def _reference_objective(request: PlanRequest, plan: Plan) -> float:
    """The objective of `plan` under `request.policy.objective`, from its placements only."""
    c = _context(request, plan)
    return _objective(c)


def _objective(c: _Ctx) -> float:
    models = _placed_models(c)
    objective = c.request.policy.objective
    if objective == "fairness":
        return _fairness(c, models)
    moved, stopped = _running_outcome(c)
    policy = c.request.policy
    costs = (policy.migration_cost * len(moved) + policy.preemption_cost * len(stopped)
             + _topology_costs(c))
    term = _ADDITIVE[objective]
    placed, factors = c.placed, c.factors
    if factors:
        total = sum(term(job, *models[n], len(placed[n])) * factors.get(n, 1.0)
                    for n, job in c.jobs.items() if n in models)
    else:   # (every factor 1: x * 1.0 is x, the same sum)
        total = sum(term(job, *models[n], len(placed[n]))
                    for n, job in c.jobs.items() if n in models)
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
    """The tenant (when it has a quota) and its ancestors."""
    quotas = c.request.cluster.quotas
    out: list[str] = []
    t: str | None = tenant
    while t is not None and t in quotas and t not in out:
        out.append(t)
        t = quotas[t].parent
    return out


def _usage(c: _Ctx, names: Iterable[str], models: Mapping[str, tuple[str, GpuModel]]
           ) -> dict[QKey, float]:
    """Usage per (tenant, key) of the jobs `names`, each on the model it is placed on."""
    quotas = c.request.cluster.quotas
    out: dict[QKey, float] = defaultdict(float)
    for name in names:
        if name not in models:
            continue
        job = c.jobs[name]
        model, spec = models[name]
        # a gang uses the GPUs it got, other shapes their size
        size = float(len(c.placed.get(name) or job.current or [])) if job.gpus is not None \
            else _size(job, spec)
        for t in _chain(c, job.tenant):
            q = quotas[t]
            for key in (model, ANY):
                if key in q.guaranteed or key in q.limit:
                    out[(t, key)] += size
    return out


def _served(c: _Ctx, usage: Mapping[QKey, float]) -> float:
    """sum over tenants and keys of min(usage, guaranteed)."""
    return sum(min(usage.get((t, k), 0.0), g)
               for t, q in c.request.cluster.quotas.items() for k, g in q.guaranteed.items())


def _fixed_usage(c: _Ctx, models: Mapping[str, tuple[str, GpuModel]]) -> dict[QKey, float]:
    """Usage of the non-preemptible running jobs kept in place (they may exceed limits)."""
    return _usage(c, [n for n in c.kept if not c.jobs[n].preemptible], models)


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
    models = _placed_models(c)
    usage = _usage(c, c.placed, models)
    keys = [(t, k) for t, q in quotas.items() for k in q.limit]
    for (t, k), used, lim in _over_limit(c, usage, _fixed_usage(c, models), keys):
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
    usage = _usage(c, c.placed, models)
    return _Index(models, on_gpu, on_node, usage, _fixed_usage(c, models),
                  _served(c, usage))


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
    # h's usage on its keys; the keys whose limit it would break
    quotas = c.request.cluster.quotas
    size = _size(h, spec)
    keys = [(t, k) for t in _chain(c, h.tenant) for k in (model, ANY)
            if k in quotas[t].guaranteed or k in quotas[t].limit]
    if not gone:
        return []
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
        out.append(("quota", _served(c, _usage(c, c.placed, models))))
    policy = c.request.policy
    moved, stopped = _running_outcome(c)
    term = _ADDITIVE.get(policy.objective, _job_term_throughput)
    for p in _classes(c):
        if policy.objective == "fairness":
            out.append((f"priority {p}", _fairness(c, models, p)))
            continue
        jobs = [n for n, j in c.jobs.items() if j.priority == p]
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
    usage = _usage(c, c.placed, models)
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
             gpu_info=_gpu_table(cluster, catalog), running=running,
             classes=sorted(classes, reverse=True))
    _read_plan(c)
    c.factors = _colocation_factors(c)
    return c


def _gpu_table(cluster: list[Node], catalog: Mapping[str, GpuModel]
               ) -> dict[GpuKey, _GpuInfo]:
    """(node, index) -> the GPU's `_GpuInfo`; the first of a repeated key wins."""
    info: dict[GpuKey, _GpuInfo] = {}
    for n in cluster:
        name = n.name
        for g in n.gpus:
            key = (name, g.index)
            if key not in info:
                info[key] = (g, g.model, catalog.get(g.model), g.mig_enabled)
    return info


def _read_plan(c: _Ctx) -> None:
    """Fill `c`'s views of the plan in one pass over its assignments (each job and each
    placement is read here once): `assigned`, `empty`, `placed`, `kept`, `shapes`, `need`,
    `topo`, `elastic`, `hosted`, `rows`, `mig_rows`, `frac_rows`, `plain_rows`, the
    models of `_placed_models`, and the jobs the eligibility and gang checks are left
    to read (`odd`, `gangs`: the others are kept jobs their fast paths clear)."""
    jobs, gpus, placed, shapes, all_rows = c.jobs, c.gpu_info, c.placed, c.shapes, c.rows
    mig_rows, frac_rows, plain_rows = c.mig_rows, c.frac_rows, c.plain_rows
    assigned, kept = c.assigned, c.kept
    models: dict[str, tuple[str, GpuModel]] = {}
    c._models = models
    for a in c.plan.assignments:
        name, pls = a.job, a.placements
        assigned.append(name)
        if not pls:
            c.empty.append(name)
            continue
        job = jobs.get(name)
        if job is None or name in placed:
            continue
        placed[name] = pls
        cur = job.current
        same = bool(cur) and pls == cur   # (the very placements it runs on compare by `is`)
        if same or (cur and _same_places(cur, pls)):
            kept.add(name)
        shape = shapes[name] = job.shape
        if job.topology is not None:
            c.topo.append(name)
        if job.elastic is not None:
            c.elastic.append(name)
        elif shape == "whole" and job.gpus is not None:
            c.need[name] = job.gpus
        if job.cpu_millicores or job.host_memory_gib:
            c.hosted.append((name, job.cpu_millicores, job.host_memory_gib, job.gpus))
        rows = all_rows[name] = []
        for p in pls:
            key = (p.node, p.gpu)
            row = (name, p, key, gpus.get(key), p.mig, p.fraction)
            rows.append(row)
            if row[3] is not None:
                if row[4] is not None:
                    mig_rows.append(row)
                if row[5] is not None:
                    frac_rows.append(row)
                elif row[4] is None:
                    plain_rows.append(row)
        info = rows[0][3]
        if info is not None and info[2] is not None:
            models[name] = (info[1], info[2])
        if not (name in kept and _plain_kept(c, shape, rows, same)) \
                or (shape != "whole" and len(rows) != 1):
            c.odd.append(name)
        if shape == "whole" and not (name in kept and _plain_gang(rows, c.need.get(name))):
            c.gangs.append(name)


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


def _reference(request: PlanRequest, plan: Plan) -> list[Violation]:
    """Every violation of contract section 3 by `plan` for `request` (empty = valid)."""
    c = _context(request, plan)
    for check in CHECKS.values():
        check(c)
    return c.out
