"""The validator finds each way a valid plan can be broken, by its rule name.

Valid plans of S and M instances (greedy plans, and an M plan that keeps exactly the running
jobs, whose placements are the very objects of their `current`) are broken one way at a
time, each on several jobs: a job moved onto a GPU another job holds, a MIG job on another
instance, a gang split across nodes against its `single_node` rule, a non-preemptible
running job stopped or moved, an assignment twice, a job missing, a tenant's quota cut
below its usage, a node's host capacity below its jobs' requests, a shared GPU overfilled,
a placement on an unknown node or GPU, an unhealthy GPU or a cordoned node under a new
placement, a shared job on another fraction, a kept MIG instance destroyed, `preempted`
wrong, the objective off. Each mutant must be flagged under its rule, and its verdict must
be the one of the validator with its fast paths off (tests/solver/test_validate_fast_paths.py
`_agree`: the general checks, which the read pass's fast paths answer for).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from benchmarks.generator import generate
from models import Assignment, MigChange, Unplaced
from models.plan import Plan
from models.request import Job, MigInstance, Placement, PlanRequest
from solver import validate
from tests.solver.test_validate_fast_paths import _agree, _base, _with

Rows = list[tuple[str, list[Placement]]]
#: A mutation: (request, plan, rng) -> mutants (request, plan), each broken one way.
Mutation = Callable[[PlanRequest, Plan, random.Random], Iterator[tuple[PlanRequest, Plan]]]


def _rows(plan: Plan) -> Rows:
    return [(a.job, list(a.placements)) for a in plan.assignments]


def _assign(plan: Plan, rows: Rows, **update: Any) -> Plan:
    return _with(plan, assignments=[Assignment.model_construct(job=j, placements=p)
                                    for j, p in rows], **update)


def _jobs(request: PlanRequest) -> dict[str, Job]:
    return {j.name: j for j in request.jobs}


def _some(rng: random.Random, items: list[Any], k: int = 3) -> list[Any]:
    return rng.sample(items, min(k, len(items)))


# ---------------------------------------------------------------- the mutations


def _onto_held_gpu(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A whole-GPU job's GPU replaced by one another whole-GPU job holds."""
    jobs = _jobs(request)
    rows = _rows(plan)
    whole = [i for i, (name, _) in enumerate(rows) if jobs[name].gpus is not None]
    for i in _some(rng, whole):
        k = rng.choice([w for w in whole if w != i] or [i])
        if k == i:
            continue
        mine = _rows(plan)
        target = rng.choice(mine[k][1])
        pls = mine[i][1]
        pls[0] = pls[0].model_copy(update={"node": target.node, "gpu": target.gpu})
        yield request, _assign(plan, mine)


def _other_instance(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A MIG job on an instance (of its profile) that its GPU's final layout lacks."""
    layout = {(n.name, g.index): {(m.profile, m.start) for m in g.mig_instances}
              for n in request.cluster.nodes for g in n.gpus}
    for ch in plan.mig_changes:
        layout[(ch.node, ch.gpu)] = (layout[(ch.node, ch.gpu)]
                                     - {(m.profile, m.start) for m in ch.destroy}) \
            | {(m.profile, m.start) for m in ch.create}
    rows = _rows(plan)
    mig = [i for i, (_, pls) in enumerate(rows) if pls[0].mig is not None]
    for i in _some(rng, mig):
        mine = _rows(plan)
        p = mine[i][1][0]
        assert p.mig is not None
        starts = [s for s in range(8) if (p.mig.profile, s) not in layout[(p.node, p.gpu)]]
        if not starts:
            continue
        mine[i] = (mine[i][0], [p.model_copy(update={
            "mig": MigInstance(profile=p.mig.profile, start=rng.choice(starts))})])
        yield request, _assign(plan, mine)


def _split_gang(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A single-node gang with one GPU moved to a free whole GPU of another node."""
    jobs = _jobs(request)
    used = {(p.node, p.gpu) for a in plan.assignments for p in a.placements}
    free = [(n.name, g.index) for n in request.cluster.nodes for g in n.gpus
            if not g.mig_enabled and (n.name, g.index) not in used]
    rows = _rows(plan)
    gangs = [i for i, (name, pls) in enumerate(rows)
             if len(pls) > 1 and jobs[name].single_node and jobs[name].elastic is None]
    for i in _some(rng, gangs):
        mine = _rows(plan)
        pls = mine[i][1]
        away = [g for g in free if g[0] != pls[0].node]
        if not away:
            continue
        node, gpu = rng.choice(away)
        pls[-1] = pls[-1].model_copy(update={"node": node, "gpu": gpu})
        yield request, _assign(plan, mine)


def _stop_non_preemptible(request: PlanRequest, plan: Plan, rng: random.Random
                          ) -> Iterator[Any]:
    """A placed non-preemptible running job stopped (listed unplaced and preempted)."""
    jobs = _jobs(request)
    rows = _rows(plan)
    hits = [i for i, (name, _) in enumerate(rows)
            if jobs[name].current and not jobs[name].preemptible]
    for i in _some(rng, hits):
        mine = _rows(plan)
        name, _ = mine.pop(i)
        yield request, _assign(plan, mine, unplaced=[
            *plan.unplaced, Unplaced(job=name, reason="time_limit")],
            preempted=[*plan.preempted, name])


def _move_non_preemptible(request: PlanRequest, plan: Plan, rng: random.Random
                          ) -> Iterator[Any]:
    """A kept non-preemptible running whole-GPU job moved to a free whole GPU."""
    jobs = _jobs(request)
    used = {(p.node, p.gpu) for a in plan.assignments for p in a.placements}
    free = [(n.name, g.index) for n in request.cluster.nodes for g in n.gpus
            if not g.mig_enabled and (n.name, g.index) not in used]
    rows = _rows(plan)
    hits = [i for i, (name, pls) in enumerate(rows)
            if jobs[name].current and not jobs[name].preemptible and jobs[name].gpus == 1
            and pls == list(jobs[name].current or [])]
    for i in _some(rng, hits):
        if not free:
            return
        mine = _rows(plan)
        node, gpu = rng.choice(free)
        mine[i] = (mine[i][0], [mine[i][1][0].model_copy(update={"node": node, "gpu": gpu})])
        yield request, _assign(plan, mine, migrated=[*plan.migrated, mine[i][0]])


def _twice(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """An assignment listed twice (the same placements, or elsewhere)."""
    rows = _rows(plan)
    for i in _some(rng, list(range(len(rows)))):
        mine = _rows(plan)
        yield request, _assign(plan, [*mine, (mine[i][0], list(mine[i][1]))])


def _missing(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A placed job or an unplaced one left out of the plan."""
    rows = _rows(plan)
    for i in _some(rng, list(range(len(rows))), 2):
        mine = _rows(plan)
        mine.pop(i)
        yield request, _assign(plan, mine)
    for k in _some(rng, list(range(len(plan.unplaced))), 2):
        unplaced = list(plan.unplaced)
        unplaced.pop(k)
        yield request, _with(plan, unplaced=unplaced)


def _quota_cut(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A tenant's limit on every model cut to 0 while it uses GPUs (its jobs preemptible or
    new: a non-preemptible kept job may exceed a limit)."""
    jobs = _jobs(request)
    tenants = sorted({jobs[a.job].tenant for a in plan.assignments
                      if jobs[a.job].preemptible or not jobs[a.job].current}
                     & set(request.cluster.quotas))
    for tenant in _some(rng, tenants):
        req = request.model_copy(deep=True)
        q = req.cluster.quotas[tenant]
        q.limit = {"*": 0.0}
        q.guaranteed = {}
        yield req, plan


def _host_cut(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A node under jobs with host requests given less CPU (or memory) than they ask."""
    jobs = _jobs(request)
    used = sorted({p.node for a in plan.assignments for p in a.placements
                   if jobs[a.job].cpu_millicores or jobs[a.job].host_memory_gib})
    for name in _some(rng, used):
        req = request.model_copy(deep=True)
        for node in req.cluster.nodes:
            if node.name == name:
                node.cpu_millicores = 0.0
                node.memory_gib = 0.0
        yield req, plan


def _overfill(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A shared job moved beside another one with a fraction that overfills the GPU."""
    rows = _rows(plan)
    shared = [i for i, (_, pls) in enumerate(rows) if pls[0].fraction is not None]
    for i in _some(rng, shared):
        k = rng.choice([s for s in shared if s != i] or [i])
        if k == i:
            continue
        mine = _rows(plan)
        q = mine[k][1][0]
        mine[i] = (mine[i][0], [mine[i][1][0].model_copy(
            update={"node": q.node, "gpu": q.gpu, "fraction": 1.0})])
        yield request, _assign(plan, mine)


def _nowhere(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A placement on a node or a GPU index the cluster does not have."""
    rows = _rows(plan)
    for i in _some(rng, list(range(len(rows)))):
        mine = _rows(plan)
        p = mine[i][1][0]
        q = p.model_copy(update={"node": "no-such-node"} if rng.random() < 0.5
                         else {"gpu": 999})
        mine[i] = (mine[i][0], [q, *mine[i][1][1:]])
        yield request, _assign(plan, mine)


def _closed(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A new placement's GPU marked unhealthy, or its node cordoned."""
    jobs = _jobs(request)
    new = [p for a in plan.assignments if not jobs[a.job].current for p in a.placements]
    for p in _some(rng, new):
        req = request.model_copy(deep=True)
        for node in req.cluster.nodes:
            if node.name == p.node:
                if rng.random() < 0.5:
                    node.schedulable = False
                else:
                    for g in node.gpus:
                        if g.index == p.gpu:
                            g.healthy = False
        yield req, plan


def _fraction(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A new shared job on a fraction other than its `gpu_share`."""
    jobs = _jobs(request)
    rows = _rows(plan)
    hits = [i for i, (name, pls) in enumerate(rows)
            if pls[0].fraction is not None and not jobs[name].current]
    for i in _some(rng, hits):
        mine = _rows(plan)
        p = mine[i][1][0]
        assert p.fraction is not None
        mine[i] = (mine[i][0], [p.model_copy(update={"fraction": p.fraction / 2})])
        yield request, _assign(plan, mine)


def _destroy_kept(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A MIG change that destroys the instance of a kept MIG job."""
    jobs = _jobs(request)
    rows = _rows(plan)
    hits = [i for i, (name, pls) in enumerate(rows)
            if pls[0].mig is not None and pls == list(jobs[name].current or [])]
    for i in _some(rng, hits):
        p = rows[i][1][0]
        assert p.mig is not None
        changes = [ch for ch in plan.mig_changes if (ch.node, ch.gpu) != (p.node, p.gpu)]
        yield request, _with(plan, mig_changes=[
            *changes, MigChange(node=p.node, gpu=p.gpu, destroy=[p.mig])])


def _preempted_list(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """`preempted` naming a placed job, or a job twice."""
    for name in _some(rng, [a.job for a in plan.assignments], 2):
        yield request, _with(plan, preempted=[*plan.preempted, name])
    if plan.preempted:
        yield request, _with(plan, preempted=[*plan.preempted, plan.preempted[0]])


def _objective(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """The objective value off by a little."""
    yield request, _with(plan, objective_value=plan.objective_value + 0.5 + rng.random())


#: Each mutation and the rule that must flag every mutant it makes.
MUTATIONS: dict[str, tuple[Mutation, str]] = {
    "onto_held_gpu": (_onto_held_gpu, "whole_gpu"),
    "other_instance": (_other_instance, "mig"),
    "split_gang": (_split_gang, "whole_gpu"),
    "stop_non_preemptible": (_stop_non_preemptible, "running"),
    "move_non_preemptible": (_move_non_preemptible, "running"),
    "twice": (_twice, "accounting"),
    "missing": (_missing, "accounting"),
    "quota_cut": (_quota_cut, "quota"),
    "host_cut": (_host_cut, "host_resources"),
    "overfill": (_overfill, "shared"),
    "nowhere": (_nowhere, "eligibility"),
    "closed": (_closed, "eligibility"),
    "fraction": (_fraction, "eligibility"),
    "destroy_kept": (_destroy_kept, "mig"),
    "preempted_list": (_preempted_list, "running"),
    "objective": (_objective, "objective"),
}


def _kept_plan(request: PlanRequest) -> Plan:
    """The plan placing exactly the running jobs, on their very `current` objects."""
    plan = _base(request)
    running = [j for j in request.jobs if j.current]
    kept = _assign(plan, [(j.name, j.current or []) for j in running],
                   unplaced=[Unplaced(job=j.name, reason="time_limit")
                             for j in request.jobs if not j.current],
                   preempted=[], migrated=[], mig_changes=[])
    return _with(kept, objective_value=validate.recompute_objective(request, kept),
                 best_bound=None, gap=None)


#: (size, seed, `generate` options, the kept-jobs plan rather than a greedy one).
CASES: list[tuple[str, int, dict[str, Any], bool]] = [
    ("S", 0, {}, False),
    ("S", 1, {"elastic": 0.4}, False),
    ("S", 3, {"tenants_quota": 4, "priority_classes": 3}, False),
    ("S", 5, {}, True),
    ("M", 0, {}, False),
    ("M", 2, {}, True),
]


def flag_each(request: PlanRequest, plan: Plan, mutations: dict[str, Any],
              tag: str) -> dict[str, int]:
    """Each mutant of `mutations` (name -> (mutate, rule)) of `plan`, checked by the fast
    and the general validator alike (`_agree`) and flagged under its rule; how many of
    each were made (`tag` seeds their random choices)."""
    made: dict[str, int] = {}
    for name, (mutate, rule) in mutations.items():
        rng = random.Random(f"{tag}-{name}")
        for req, bad in mutate(request, plan, rng):
            rules = {v[0] for v in _agree(req, bad)}
            assert rule in rules, (name, rules)
            made[name] = made.get(name, 0) + 1
    return made


@pytest.mark.parametrize(("size", "seed", "options", "kept"), CASES,
                         ids=[f"{s}{k}{'-kept' if kept else ''}-{'-'.join(o) or 'v1'}"
                              for s, k, o, kept in CASES])
def test_every_mutant_is_flagged_under_its_rule(size: str, seed: int,
                                                 options: dict[str, Any], kept: bool) -> None:
    request = generate(size, seed, **options)
    plan = _kept_plan(request) if kept else _base(request, seed)
    assert _agree(request, plan) == []
    made = flag_each(request, plan, MUTATIONS, f"{size}{seed}")
    # (most kinds of breakage apply to each instance: a plan of kept jobs alone has no new
    # placement to close or refraction, an instance without quotas no limit to cut)
    assert len(made) >= len(MUTATIONS) - 5, sorted(set(MUTATIONS) - set(made))
    if not kept:
        assert {"closed", "onto_held_gpu", "twice", "missing", "objective"} <= made.keys()
