"""The validator's level rules (contract 5.3 / 5.4) find each way a valid plan with quotas
and priority classes can be broken: a level's value off, a level missing, a row of
`stats.quota` off (its usage or its guarantee), and a running job of a higher class
stopped while a lower-class job that took its GPUs could have made way (`priority`). Each
mutant must be flagged under its rule, with the verdict of the validator's general checks
(tests/solver/test_validate_fast_paths.py `_agree`).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from benchmarks.generator import generate
from models import Assignment, Unplaced
from models.plan import Plan
from models.request import PlanRequest
from models.rules import model_eligible
from solver import validate
from tests.solver.test_validate_differential import flag_each
from tests.solver.test_validate_fast_paths import _agree, _base, _with

Mutation = Callable[[PlanRequest, Plan, random.Random], Iterator[tuple[PlanRequest, Plan]]]


def _stats(plan: Plan, **fields: Any) -> Plan:
    """`plan` with its stats' extra `fields` replaced."""
    stats = plan.stats.model_copy(deep=True)
    for k, v in fields.items():
        setattr(stats, k, v)
    return _with(plan, stats=stats)


def _levels(plan: Plan) -> list[dict[str, Any]]:
    return copy.deepcopy(getattr(plan.stats, "levels", None) or [])


def _level_off(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """One level's value off by a little."""
    for i in range(len(_levels(plan))):
        levels = _levels(plan)
        levels[i]["value"] = float(levels[i]["value"]) + 0.5 + rng.random()
        yield request, _stats(plan, levels=levels)


def _level_dropped(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A level left out of `stats.levels`, or two swapped."""
    levels = _levels(plan)
    i = rng.randrange(len(levels))
    yield request, _stats(plan, levels=levels[:i] + levels[i + 1:])
    if len(levels) > 1:
        levels[0], levels[1] = levels[1], levels[0]
        yield request, _stats(plan, levels=levels)


def _quota_row_off(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A row of `stats.quota` with its usage or its guarantee off."""
    table = getattr(plan.stats, "quota", None) or {}
    rows = sorted((t, k) for t, by_key in table.items() for k in by_key)
    for t, k in rng.sample(rows, min(3, len(rows))):
        for field, delta in (("usage", 1.0 + rng.random()), ("guaranteed", 1.0)):
            bad = copy.deepcopy(table)
            bad[t][k][field] = bad[t][k][field] + delta
            yield request, _stats(plan, quota=bad)


def _class_swap(request: PlanRequest, plan: Plan, rng: random.Random) -> Iterator[Any]:
    """A preemptible running whole-GPU job of a higher class stopped, a new lower-class job
    of its size that its model suits placed on its very GPUs instead."""
    jobs = {j.name: j for j in request.jobs}
    placed = {a.job: list(a.placements) for a in plan.assignments}
    catalog = request.cluster.catalog()
    models = {(n.name, g.index): g.model for n in request.cluster.nodes for g in n.gpus}
    kept = [n for n, pls in placed.items() if jobs[n].current and jobs[n].preemptible
            and jobs[n].gpus is not None and jobs[n].elastic is None
            and pls == jobs[n].current]
    waiting = [u.job for u in plan.unplaced if not jobs[u.job].current]
    made = 0
    for name in rng.sample(kept, len(kept)):
        h = jobs[name]
        model = models[(placed[name][0].node, placed[name][0].gpu)]
        fits = [w for w in waiting if jobs[w].priority < h.priority
                and jobs[w].gpus == h.gpus and jobs[w].elastic is None
                and jobs[w].topology is None and jobs[w].tenant == h.tenant
                and not jobs[w].cpu_millicores and not jobs[w].host_memory_gib
                and model_eligible(jobs[w], model, catalog[model])]
        if not fits:
            continue
        low = rng.choice(fits)
        rows = [(a.job, list(a.placements)) if a.job != name
                else (low, [p.model_copy() for p in placed[name]]) for a in plan.assignments]
        unplaced = [u for u in plan.unplaced if u.job != low]
        unplaced.append(Unplaced(job=name, reason="preempted", detail="mutant"))
        bad = _with(plan, assignments=[Assignment.model_construct(job=j, placements=p)
                                       for j, p in rows],
                    unplaced=unplaced, preempted=[*plan.preempted, name])
        yield request, _with(bad, objective_value=validate.recompute_objective(request, bad))
        made += 1
        if made == 3:
            return


#: Each mutation and the rule that must flag every mutant it makes.
MUTATIONS: dict[str, tuple[Mutation, str]] = {
    "level_off": (_level_off, "levels"),
    "level_dropped": (_level_dropped, "levels"),
    "quota_row_off": (_quota_row_off, "levels"),
    "class_swap": (_class_swap, "priority"),
}

#: (size, seed, `generate` options).
CASES: list[tuple[str, int, dict[str, Any]]] = [
    ("S", 3, {"tenants_quota": 4, "priority_classes": 3}),
    ("S", 4, {"priority_classes": 3}),
    ("M", 1, {"tenants_quota": 8, "priority_classes": 3}),
    ("M", 2, {"priority_classes": 3, "elastic": 0.2}),
]


@pytest.mark.parametrize(("size", "seed", "options"), CASES,
                         ids=[f"{s}{k}-{'-'.join(o)}" for s, k, o in CASES])
def test_every_level_mutant_is_flagged_under_its_rule(size: str, seed: int,
                                                       options: dict[str, Any]) -> None:
    request = generate(size, seed, **options)
    plan = _base(request, seed)
    assert _agree(request, plan) == []
    made = flag_each(request, plan, MUTATIONS, f"{size}{seed}")
    assert {"level_off", "level_dropped"} <= made.keys()
    if request.cluster.quotas:
        assert "quota_row_off" in made
    if size == "M":
        assert "class_swap" in made
