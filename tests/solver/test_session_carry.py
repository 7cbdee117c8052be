"""What a planning session carries from plan to plan beyond the compiled jobs and placer
(solver/warm.py): the fragmentation figure's job classes, brought forward by the deltas
(heuristics/fragmentation.py `carry_job_classes`), equal to those made from scratch; and
the objects a plan leaves, promoted to the collector's oldest generation
(solver/gcpause.py `promote_survivors`) without changing the plans."""

from __future__ import annotations

import gc
import importlib
import random
from typing import Any

import pytest

from benchmarks.generator import generate_custom
from benchmarks.latency import random_events
from models import PlanRequest
from solver import warm
from solver.gcpause import promote_survivors
from solver.session import PlanningSession
from tests.solver.test_session import events

# `heuristics.fragmentation` the module (the package exports a function of that name)
fragmentation = importlib.import_module("heuristics.fragmentation")


def _session(seed: int) -> PlanningSession:
    req = generate_custom(64, 120, seed=seed)
    policy = req.policy.model_copy(update={"seed": seed, "solver": "heuristic"})
    return PlanningSession(req.model_copy(update={"policy": policy}))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_carried_job_classes_are_those_made_from_scratch(seed: int,
                                                         monkeypatch: Any) -> None:
    """Every warm plan after the first seeds its job classes from the last plan's, and
    they are `_classes` of its compiled jobs: the same first members (objects), counts
    and shared jobs' GPU memory."""
    real = fragmentation.carry_job_classes
    made: list[bool] = []

    def checked(request: PlanRequest, last: object, infos: Any, left: Any,
                joined: Any) -> bool:
        ok = real(request, last, infos, left, joined)
        made.append(ok)
        if ok:
            got = fragmentation._request_jobs(request)
            memory: dict[str, float] = {}
            want = fragmentation._classes(infos, memory)
            assert [(id(a), n) for a, n in got.classes] == [(id(a), n) for a, n in want]
            assert got.memory == memory
        return ok

    monkeypatch.setattr(warm, "carry_job_classes", checked)
    session = _session(seed)
    session.plan(1.0)
    rng = random.Random(seed)
    for r in range(5):
        session.apply(random_events(session.request, rng, 12, f"r{r}"))
        session.plan(0.5)
    assert sum(made) >= 3


def test_classes_that_do_not_add_up_are_made_whole() -> None:
    """Classes carried from another request (counts that go negative) are not used."""
    session = _session(0)
    session.plan(1.0)
    req = session.planning_request(0.5)
    from models.instance import compile_jobs

    infos = compile_jobs(req)
    last = fragmentation._request_jobs(req)
    assert not fragmentation.carry_job_classes(req, last, infos, infos + infos, [])
    assert not fragmentation.carry_job_classes(req, object(), infos, [], [])


def test_promotion_empties_the_young_generations_and_keeps_what_is_frozen() -> None:
    """After `promote_survivors` nothing waits in the young generations and nothing is
    frozen; where something is frozen (a solver worker's imports) it does nothing."""
    kept = [[i] for i in range(1000)]  # young objects that live on
    promote_survivors()
    assert gc.get_freeze_count() == 0
    assert gc.get_count()[0] < 50 and len(kept) == 1000
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        more = [[i] for i in range(1000)]
        promote_survivors()
        # (frozen objects that die leave the count: it may fall, never grow)
        assert gc.get_freeze_count() <= frozen and len(more) == 1000
    finally:
        gc.unfreeze()


def test_session_plans_leave_no_cyclic_garbage() -> None:
    """A session's warm plans and their commits leave little cyclic garbage (what the
    promotion relies on: such cycles wait for the next full collection): here 70-92
    objects per plan (closures), none at 16,384 GPUs / 20,000 jobs."""
    session = _session(3)
    rng = random.Random(3)
    session.plan(1.0)  # the first plan is the driver's
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        for r in range(3):
            session.apply(random_events(session.request, rng, 12, f"r{r}"))
            session.plan(0.5)
        assert gc.collect() < 3 * 200
    finally:
        if was:
            gc.enable()


def test_a_plan_whose_nodes_did_not_change_starts_with_the_last_plans_cluster_reads(
) -> None:
    """After events that touch jobs alone, a warm plan's request holds the carried
    cluster reads (`warm.CLUSTER_SLOTS`: the very objects), equal to reading them
    again; after a node event it reads them again."""
    from models.cache import cached
    from models.gpu_table import _read
    from models.objective import gpu_models_of

    session = _session(4)
    session.plan(1.0)
    rng = random.Random(4)
    carried = 0
    for r in range(8):
        batch = [e for e in random_events(session.request, rng, 15, f"r{r}")
                 if e.kind.startswith("job")]
        session.apply(batch)
        memo = session.memo
        carry = memo.carry if memo is not None else None
        request = session.planning_request(0.5)
        session.plan_request(request)
        if carry is None or not carry.cluster or any(
                x is not y for x, y in zip(request.cluster.nodes,
                                           carry.request.cluster.nodes, strict=True)):
            continue  # no carried plan, or the commit changed a node's MIG layout
        carried += 1
        for slot, value in carry.cluster.items():
            assert cached(request, slot) is value
        assert cached(request, "gpu_table") == _read(request)
        assert cached(request, "gpu_models") == gpu_models_of(request)
    assert carried >= 1
    memo = session.memo
    assert memo is not None and memo.carry is not None
    last = memo.carry.cluster
    node = session.request.cluster.nodes[0]
    session.apply(events({"kind": "node_cordoned", "node": node.name, "cordoned": True}))
    request = session.planning_request(0.5)
    session.plan_request(request)
    assert all(cached(request, slot) is not value for slot, value in last.items())
