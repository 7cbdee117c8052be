"""The validator's fast paths (`_fast_reads`, `_plain_gang`, `_plain_instances`,
`_plain_fresh_gang` in solver/validate.py) give the verdicts of its
general checks: the same violations (rules, messages, locations, order) on valid plans and
on plans broken one way at a time, on S and M instances and their v1.1 variants (elastic
gangs, topology levels, quotas and priority classes, co-location).

(When the read pass was reworked, session 13, these tests also held the new validator to
a verbatim copy of the former one, commit 9aaa1c7: the same verdicts everywhere. The copy
was dropped after the merge; the fast-path comparison stays.)
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from benchmarks.generator import generate
from heuristics.greedy import plan_greedy
from models import Assignment, MigChange, Unplaced
from models.plan import Plan
from models.request import Job, MigInstance, Placement, PlanRequest
from solver import validate as current
from solver.build import build_plan
from tests.solver.strategies import random_levels_request, random_request
from tests.solver.test_validate_tallies import _corrupt

Rows = list[tuple[str, list[Placement]]]
Mutation = Callable[[PlanRequest, Plan, random.Random], "tuple[PlanRequest, Plan] | None"]

#: The fast paths of the current validator, each replaced by "no" in `_general`.
FAST_PATHS = ("_fast_reads", "_plain_gang", "_plain_instances", "_plain_fresh_gang")


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
    """The verdict of the validator, asserted equal to its own with the fast paths off."""
    new = _verdict(current.validate_plan, request, plan)
    assert new == _verdict(_general, request, plan)
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


def _two(rng: random.Random, rows: Rows, test: Callable[[Placement], bool]
         ) -> tuple[int, int] | None:
    """Two distinct rows whose first placement passes `test`, if there are two."""
    hits = [i for i, (_, pls) in enumerate(rows) if test(pls[0])]
    if len(hits) < 2:
        return None
    i, k = rng.sample(hits, 2)
    return i, k


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
    pair = _two(rng, rows, lambda p: p.fraction is not None)
    if pair is None:
        return None
    i, k = pair
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


def _kept_gang_resized(request: PlanRequest, plan: Plan, rng: random.Random) -> Any:
    """A running gang kept where it runs after its job asked for one GPU more or fewer
    (the kept-gang fast path must see the size)."""
    rows = _rows(plan)
    i = _pick(rng, rows, request, lambda job, pls: len(pls) > 1 and job.elastic is None
              and job.gpus is not None and pls == list(job.current or []))
    if i is None:
        return None
    name, pls = rows[i]
    size = len(pls) + rng.choice([-1, 1])
    jobs = [j.model_copy(update={"gpus": size}) if j.name == name else j
            for j in request.jobs]
    return request.model_copy(update={"jobs": jobs}), plan


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
    pair = _two(rng, rows, lambda p: p.mig is not None)
    if pair is None:
        return None
    i, k = pair
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
    "kept_gang_resized": _kept_gang_resized,
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
def test_fast_paths_agree_on_generated_instances(size: str, seed: int,
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
def test_fast_paths_agree_on_small_random_requests(seed: int) -> None:
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


def test_fast_paths_agree_on_a_plan_that_keeps_every_running_job() -> None:
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
