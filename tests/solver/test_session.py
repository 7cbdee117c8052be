"""Planning sessions (solver/session.py): each event kind, batches that do not apply, and
plans after events that are valid and as good as a cold solve of the same state."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from models import Gpu, Job, Plan, PlanRequest
from models.events import Event, EventBatch, JobUpdated
from solver import plan
from solver.session import EventError, PlanningSession, _Draft, apply_events, diff_events
from solver.validate import validate_plan

EVENTS: TypeAdapter[list[Event]] = TypeAdapter(list[Event])


def snapshot(**policy: Any) -> PlanRequest:
    """Two A100 nodes (one GPU of n2 in MIG mode, 3g.40gb@0 created), one running job."""
    pol = {"solver": "cp_sat", "time_limit_s": 20, "threads": 1, "seed": 1,
           "mip_gap": 0.0, **policy}
    return PlanRequest.model_validate({
        "cluster": {"nodes": [
            {"name": "n1", "gpus": [{"index": i, "model": "A100-SXM4-80GB"}
                                    for i in range(4)]},
            {"name": "n2", "gpus": [
                {"index": 0, "model": "A100-SXM4-80GB"},
                {"index": 1, "model": "A100-SXM4-80GB", "mig_enabled": True,
                 "mig_instances": [{"profile": "3g.40gb", "start": 0}]}]},
        ]},
        "jobs": [
            {"name": "run", "gpus": 2, "current": [{"node": "n1", "gpu": 0},
                                                   {"node": "n1", "gpu": 1}]},
            {"name": "small", "mig_profile": "3g.40gb",
             "current": [{"node": "n2", "gpu": 1,
                          "mig": {"profile": "3g.40gb", "start": 0}}]},
            {"name": "wait", "gpus": 1},
        ],
        "policy": pol,
    })


def events(*items: dict[str, Any]) -> list[Event]:
    return EVENTS.validate_python(list(items))


def job(req: PlanRequest, name: str) -> Job:
    return next(j for j in req.jobs if j.name == name)


def gpu(req: PlanRequest, node: str, index: int) -> Gpu:
    n = next(n for n in req.cluster.nodes if n.name == node)
    return next(g for g in n.gpus if g.index == index)


# ------------------------------------------------------------------ each event kind


def test_job_submitted_finished_cancelled() -> None:
    req = apply_events(snapshot(), events(
        {"kind": "job_submitted", "job": {"name": "new", "gpus": 1}},
        {"kind": "job_finished", "job": "run"},
        {"kind": "job_cancelled", "job": "wait"},
    ))
    assert [j.name for j in req.jobs] == ["small", "new"]


def test_job_resized_drops_the_old_placement() -> None:
    req = apply_events(snapshot(), events(
        {"kind": "job_resized", "job": "run", "gpus": 3},
        {"kind": "job_resized", "job": "small", "gpu_share": 0.5},
    ))
    assert job(req, "run").gpus == 3 and job(req, "run").current is None
    small = job(req, "small")
    assert small.gpu_share == 0.5 and small.mig_profile is None and small.current is None
    same = apply_events(snapshot(), events({"kind": "job_resized", "job": "run", "gpus": 2}))
    assert job(same, "run").current is not None  # the same size changes nothing


def test_node_added_removed_cordoned() -> None:
    req = apply_events(snapshot(), events(
        {"kind": "node_added", "node": {"name": "n3", "gpus": [
            {"index": 0, "model": "H100-SXM5-80GB"}]}},
        {"kind": "node_cordoned", "node": "n2"},
        {"kind": "node_removed", "node": "n1"},
    ))
    assert [n.name for n in req.cluster.nodes] == ["n2", "n3"]
    assert not next(n for n in req.cluster.nodes if n.name == "n2").schedulable
    assert job(req, "run").current is None  # its node is gone: pending again
    assert job(req, "small").current is not None
    back = apply_events(req, events({"kind": "node_cordoned", "node": "n2",
                                     "cordoned": False}))
    assert next(n for n in back.cluster.nodes if n.name == "n2").schedulable


def test_gpu_unhealthy_and_healthy() -> None:
    req = apply_events(snapshot(), events({"kind": "gpu_unhealthy", "node": "n1", "gpu": 3}))
    assert not gpu(req, "n1", 3).healthy
    req = apply_events(req, events({"kind": "gpu_healthy", "node": "n1", "gpu": 3}))
    assert gpu(req, "n1", 3).healthy


def test_mig_layout_changed_releases_lost_instances() -> None:
    kept = apply_events(snapshot(), events(
        {"kind": "mig_layout_changed", "node": "n2", "gpu": 1, "mig_instances": [
            {"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}))
    assert len(gpu(kept, "n2", 1).mig_instances) == 2
    assert job(kept, "small").current is not None
    lost = apply_events(snapshot(), events(
        {"kind": "mig_layout_changed", "node": "n2", "gpu": 1, "mig_instances": [
            {"profile": "7g.80gb", "start": 0}]}))
    assert job(lost, "small").current is None
    whole = apply_events(snapshot(), events(
        {"kind": "mig_layout_changed", "node": "n2", "gpu": 0, "mig_instances": []}))
    assert gpu(whole, "n2", 0).mig_enabled


# ------------------------------------------------------------------ deltas that do not apply


@pytest.mark.parametrize(("batch", "index", "kind", "says"), [
    ([{"kind": "job_finished", "job": "ghost"}], 0, "job_finished", "no job 'ghost'"),
    ([{"kind": "job_finished", "job": "run"}, {"kind": "job_finished", "job": "run"}],
     1, "job_finished", "no job 'run'"),
    ([{"kind": "job_finished", "job": "wait"}], 0, "job_finished", "not running"),
    ([{"kind": "job_cancelled", "job": "ghost"}], 0, "job_cancelled", "no job"),
    ([{"kind": "job_submitted", "job": {"name": "wait", "gpus": 1}}], 0, "job_submitted",
     "already"),
    ([{"kind": "job_resized", "job": "ghost", "gpus": 1}], 0, "job_resized", "no job"),
    ([{"kind": "node_removed", "node": "n9"}], 0, "node_removed", "no node 'n9'"),
    ([{"kind": "node_cordoned", "node": "n9"}], 0, "node_cordoned", "no node"),
    ([{"kind": "node_added", "node": {"name": "n1"}}], 0, "node_added", "already"),
    ([{"kind": "gpu_unhealthy", "node": "n1", "gpu": 7}], 0, "gpu_unhealthy", "no GPU 7"),
    ([{"kind": "mig_layout_changed", "node": "n2", "gpu": 1, "mig_instances": [
        {"profile": "3g.40gb", "start": 0}, {"profile": "4g.40gb", "start": 0}]}],
     0, "mig_layout_changed", "invalid MIG layout"),
    # a cross-check: the submitted job's current placement names a GPU that is not there
    ([{"kind": "job_cancelled", "job": "wait"},
      {"kind": "job_submitted", "job": {"name": "x", "gpus": 1,
                                         "current": [{"node": "n1", "gpu": 9}]}}],
     1, "job_submitted", "missing GPU"),
    ([{"kind": "node_added", "node": {"name": "n3", "gpus": [
        {"index": 0, "model": "Voodoo-5"}]}}], 0, "node_added", "Voodoo-5"),
])
def test_a_batch_that_does_not_apply_names_the_event_and_changes_nothing(
        batch: list[dict[str, Any]], index: int, kind: str, says: str) -> None:
    session = PlanningSession(snapshot())
    before = session.request.model_dump()
    with pytest.raises(EventError) as err:
        session.apply(events(*batch))
    assert err.value.index == index and err.value.kind == kind and says in str(err.value)
    assert session.request.model_dump() == before and session.version == 0


def test_the_event_model_is_strict() -> None:
    with pytest.raises(ValidationError):
        EventBatch.model_validate({"events": [{"kind": "job_exploded", "job": "a"}]})
    with pytest.raises(ValidationError):
        EventBatch.model_validate({"events": [{"kind": "job_finished", "job": "a", "x": 1}]})
    with pytest.raises(ValidationError):
        EventBatch.model_validate({"events": [{"kind": "job_resized", "job": "a"}]})
    with pytest.raises(ValidationError):
        EventBatch.model_validate({"events": []})


# ------------------------------------------------------------------ planning


def _assert_valid(req: PlanRequest, result: Plan) -> None:
    assert validate_plan(req, result) == []
    names = {j.name for j in req.jobs}
    accounted = {a.job for a in result.assignments} | {u.job for u in result.unplaced}
    assert accounted == names


def test_plan_commits_and_matches_a_cold_solve() -> None:
    """After a plan and a batch of events, the session plan is valid, starts from the last
    plan (placed jobs are running), and equals a cold optimal solve of the same state."""
    session = PlanningSession(snapshot())
    first = session.plan()
    _assert_valid(snapshot(), first)
    placed = {a.job: a.placements for a in first.assignments}
    for j in session.request.jobs:
        assert j.current == placed.get(j.name)
    session.apply(events(
        {"kind": "job_submitted", "job": {"name": "big", "gpus": 3, "weight": 2.0}},
        {"kind": "job_finished", "job": "small"},
        {"kind": "gpu_unhealthy", "node": "n1", "gpu": 3},
        {"kind": "node_added", "node": {"name": "n3", "gpus": [
            {"index": 0, "model": "A100-SXM4-80GB"}, {"index": 1, "model": "A100-SXM4-80GB"}]}},
        {"kind": "job_submitted", "job": {"name": "half", "gpu_share": 0.5}},
    ))
    state = session.request
    again = session.plan()
    _assert_valid(state, again)
    cold = plan(state)
    assert again.status == cold.status == "optimal"
    assert again.objective_value == pytest.approx(cold.objective_value, abs=1e-6)
    assert session.last_plan is again and session.version == 3


def test_plan_applies_the_plans_mig_changes() -> None:
    """A plan that creates a MIG instance leaves the session with the new layout and the
    job the plan put there running on it."""
    session = PlanningSession(snapshot())
    session.apply(events({"kind": "job_submitted",
                          "job": {"name": "m", "mig_profile": "3g.40gb", "weight": 5.0}}))
    state = session.request
    result = session.plan()
    _assert_valid(state, result)
    assert result.mig_changes
    m = job(session.request, "m")
    assert m.current is not None and m.current[0].mig is not None
    p = m.current[0]
    assert p.mig in gpu(session.request, p.node, p.gpu).mig_instances
    committed = session.request  # a consistent request to plan again
    again = session.plan()
    _assert_valid(committed, again)
    # nothing changed since the last plan: it is kept as it is
    assert again.migrated == [] and again.preempted == [] and again.mig_changes == []


# ------------------------------------------------------------------ snapshots to events


def _same_state(a: PlanRequest, b: PlanRequest) -> bool:
    """Equal up to the order of jobs and nodes."""
    return sorted(a.jobs, key=lambda j: j.name) == sorted(b.jobs, key=lambda j: j.name) \
        and sorted(a.cluster.nodes, key=lambda n: n.name) == \
        sorted(b.cluster.nodes, key=lambda n: n.name)


def test_diff_events_turn_one_snapshot_into_the_next() -> None:
    """The events `diff_events` derives from two snapshots, applied to the first, give the
    second (new, changed, finished and cancelled jobs; added, removed, cordoned, unhealthy
    and re-laid-out nodes; a node replaced whole with a job kept on it)."""
    old = snapshot()
    data = old.model_dump(mode="json", exclude_none=True)
    data["jobs"] = [
        {**data["jobs"][1], "weight": 3.0},  # small: updated
        {"name": "new", "gpus": 1, "current": [{"node": "n3", "gpu": 0}]},
        {"name": "other", "gpu_share": 0.25},
    ]  # run finished, wait cancelled
    data["cluster"]["nodes"][0]["gpus"][3]["healthy"] = False
    data["cluster"]["nodes"][0]["schedulable"] = False
    data["cluster"]["nodes"][1]["labels"] = {"zone": "b"}  # n2 replaced whole
    data["cluster"]["nodes"].append({"name": "n3", "gpus": [
        {"index": 0, "model": "H100-SXM5-80GB"}]})
    new = PlanRequest.model_validate(data)
    evs = diff_events(old, new)
    kinds = {e.kind for e in evs}
    assert {"job_finished", "job_cancelled", "job_updated", "job_submitted", "node_added",
            "node_removed", "node_cordoned", "gpu_unhealthy"} <= kinds
    assert _same_state(apply_events(old, evs), new)
    assert diff_events(new, new) == []
    back = diff_events(new, old)
    assert _same_state(apply_events(new, back), old)


def test_events_keep_the_requests_interference_pairs() -> None:
    """A batch rebuilds the request from its jobs and nodes: the co-location interference
    pairs (contract 5.2) stay, checked or replayed as checked."""
    data = snapshot().model_dump(mode="json", exclude_none=True)
    data["interference"] = [{"a": "x", "b": "y", "speed": 0.8}]
    req = PlanRequest.model_validate(data)
    batch = events({"kind": "job_cancelled", "job": "wait"})
    for checked in (False, True):
        after = apply_events(req, batch, checked=checked)
        assert after.interference == req.interference
        assert [j.name for j in after.jobs] == ["run", "small"]


# ------------------------------------------------------------------ checks on what changed


def _breaking(req: PlanRequest, rng: random.Random, tag: str,
              batch: list[Event]) -> list[Event]:
    """Deltas the handlers accept but the request's cross-checks refuse (one of them),
    whatever `batch` does around them (no job it names is broken: a later cancel would
    take the broken job away)."""
    node = rng.choice(req.cluster.nodes)
    mig = [(n.name, g.index) for n in req.cluster.nodes for g in n.gpus if g.mig_enabled]
    whole = [(n.name, g.index) for n in req.cluster.nodes for g in n.gpus if not g.mig_enabled]
    pick = rng.randrange(5)
    if pick == 0:  # a current placement on a GPU the node does not have
        return events({"kind": "job_submitted", "job": {
            "name": f"bad-{tag}", "gpus": 1, "current": [{"node": node.name, "gpu": 99}]}})
    if pick == 1:  # a model no catalog has
        return events({"kind": "node_added", "node": {
            "name": f"bad-{tag}", "gpus": [{"index": 0, "model": "Voodoo-5"}]}})
    if pick == 2 and mig:  # a whole-GPU placement on a MIG GPU
        n, g = rng.choice(mig)
        return events({"kind": "job_submitted", "job": {
            "name": f"bad-{tag}", "gpus": 1, "current": [{"node": n, "gpu": g}]}})
    if pick == 3 and whole:  # a MIG placement on a non-MIG GPU
        n, g = rng.choice(whole)
        return events({"kind": "job_submitted", "job": {
            "name": f"bad-{tag}", "mig_profile": "1g.10gb",
            "current": [{"node": n, "gpu": g, "mig": {"profile": "1g.10gb", "start": 0}}]}})
    # an unknown model in the throughput map of a job the batch leaves alone
    named = {e.job for e in batch if isinstance(getattr(e, "job", None), str)}
    job = rng.choice([j for j in req.jobs if j.name not in named])
    return [JobUpdated(job=job.model_copy(update={"throughput": {"Voodoo-5": 1.0}}))]


def _outcome(req: PlanRequest, batch: list[Event]) -> object:
    try:
        return apply_events(req, batch).model_dump()
    except EventError as e:
        return (e.index, e.kind, e.reason)


@pytest.mark.parametrize("seed", range(4))
def test_checking_what_changed_accepts_and_refuses_what_the_whole_check_does(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's cross-checks run on the jobs and nodes it changed (`_Draft`): on random
    batches, some with an event the checks refuse inserted at a random place, the state
    or the error (index, kind, reason) is the one the whole request's checks give."""
    from benchmarks.generator import generate_custom
    from benchmarks.latency import random_events

    req = generate_custom(64, 80, seed=seed)
    rng = random.Random(seed)
    passed: list[bool] = []
    real = _Draft._changes_pass

    def spy(self: _Draft, *args: Any) -> bool:
        passed.append(real(self, *args))
        return passed[-1]

    for r in range(6):
        batch = random_events(req, rng, 10, f"r{r}")
        if r % 2:
            at = rng.randrange(len(batch) + 1)
            batch[at:at] = _breaking(req, rng, f"{r}", batch)
        else:  # a job reported running on a GPU nothing holds
            held = {(p.node, p.gpu) for j in req.jobs for p in j.current or []}
            n, g = rng.choice([(n.name, g.index) for n in req.cluster.nodes for g in n.gpus
                               if not g.mig_enabled and (n.name, g.index) not in held])
            batch += events({"kind": "job_submitted", "job": {
                "name": f"run-{r}", "gpus": 1, "current": [{"node": n, "gpu": g}]}})
        with monkeypatch.context() as m:
            m.setattr(_Draft, "_changes_pass", spy)
            fast = _outcome(req, batch)
        with monkeypatch.context() as m:
            m.setattr(_Draft, "_changes_pass", lambda *a: False)
            assert _outcome(req, batch) == fast
        assert isinstance(fast, tuple) == bool(r % 2)
        # a valid batch is settled by the checks on what it changed alone
        assert passed[0] is not bool(r % 2)
        passed.clear()
        if not r % 2:
            req = apply_events(req, batch)
