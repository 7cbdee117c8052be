"""Warm session plans (solver/warm.py): valid against the session's state, every job
accounted for, the running jobs kept where they run, the new work placed, never worse than
keeping the running jobs alone, and the cold path where the warm start does not apply."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping

import pytest

from benchmarks.generator import generate, generate_custom
from benchmarks.latency import random_events
from heuristics.result import HeuristicResult
from models import Job, MigInstance, Plan, PlanRequest, Quota
from models.events import (
    Event,
    GpuHealthy,
    JobSubmitted,
    JobUpdated,
    MigLayoutChanged,
    NodeRemoved,
)
from models.instance import ClusterState, compile_jobs
from models.objective import evaluate
from solver import plan as cold_plan
from solver import warm
from solver.reasons import hard_conflicts
from solver.session import PlanningSession
from solver.validate import validate_plan
from solver.warm import TARGETS_MAX_AGE, WarmMemo, applies, warm_plan
from tests.solver.test_session import events, snapshot


def _accounted(req: PlanRequest, result: Plan) -> None:
    assert validate_plan(req, result) == []
    names = [j.name for j in req.jobs]
    got = [a.job for a in result.assignments] + [u.job for u in result.unplaced]
    assert sorted(got) == sorted(names)


def _session(req: PlanRequest, **policy: object) -> PlanningSession:
    pol = req.policy.model_copy(update={"solver": "heuristic", "seed": 3, **policy})
    return PlanningSession(req.model_copy(update={"policy": pol}))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_warm_plans_after_random_events_are_valid_and_keep_the_running_jobs(seed: int) -> None:
    """Rounds of random events (finishes, arrivals, cancellations, resizes, a failing GPU,
    a cordon, a new node), each followed by a warm plan: valid, every job accounted for,
    and at least as good as keeping the running jobs and placing nothing else."""
    session = _session(generate_custom(96, 120, seed=seed))
    session.plan(1.0)  # the first plan is cold
    rng = random.Random(seed)
    geometry = None
    for r in range(4):
        session.apply(random_events(session.request, rng, 12, f"r{r}"))
        state = session.request
        assert session.warm(0.5)
        result = session.plan(0.5)
        _accounted(state, result)
        assert session.memo is not None and session.memo.plans == r + 1
        assert {"compile", "greedy", "build", "validate"} <= set(session.memo.last_steps)
        # the MIG geometry (its layout queries cached inside) is carried from plan to plan
        if r:
            assert session.memo.geometry is geometry
        geometry = session.memo.geometry
        # every running job still consistent stays where it runs (no migration needed:
        # nothing forces one), and the new jobs that fit somewhere are placed
        kept = {j.name: j.current for j in state.jobs if j.current}
        only_running = evaluate(state, kept).objective_value
        assert result.objective_value >= only_running - 1e-6
        placed = {a.job for a in result.assignments}
        assert placed - set(kept), "no new job was placed"


def test_warm_plan_of_a_state_with_free_room_places_the_new_job() -> None:
    """A cluster with room: a job submitted after the first plan is placed by the warm
    plan, the running ones stay where they run (no migration, no preemption)."""
    req = snapshot(solver="heuristic", time_limit_s=1)
    session = PlanningSession(req)
    first = session.plan()
    session.apply(events({"kind": "job_submitted", "job": {"name": "new", "gpus": 1}}))
    state = session.request
    result = warm_plan(state, WarmMemo())
    _accounted(state, result)
    assert "new" in {a.job for a in result.assignments}
    assert result.migrated == [] and result.preempted == []
    before = {a.job: a.placements for a in first.assignments}
    after = {a.job: a.placements for a in result.assignments}
    assert all(after[name] == pls for name, pls in before.items())


def test_warm_and_cold_paths_are_chosen_by_policy_and_size() -> None:
    """Warm: `heuristic`, and `auto` beyond its exact tier; cold: the exact policies,
    deterministic mode, small `auto` requests and the first plan of a session."""
    small = snapshot(solver="auto")
    assert not applies(small)
    assert applies(snapshot(solver="heuristic"))
    assert not applies(snapshot(solver="cp_sat"))
    assert not applies(snapshot(solver="heuristic", deterministic=True))
    assert applies(generate("M", 0))
    assert not PlanningSession(snapshot(solver="heuristic")).warm()


def test_conflicting_non_preemptible_jobs_answer_as_the_cold_plan_does() -> None:
    """Two non-preemptible running jobs on one GPU: the warm path hands the request to
    the driver, whose answer is infeasible, as a cold plan of the same state is."""
    req = snapshot(solver="heuristic", time_limit_s=1)
    data = req.model_dump(mode="json", exclude_none=True)
    data["jobs"].append({"name": "clash", "gpus": 1, "preemptible": False,
                         "current": [{"node": "n1", "gpu": 0}]})
    data["jobs"][0]["preemptible"] = False
    state = PlanRequest.model_validate(data)
    memo = WarmMemo()
    result = warm_plan(state, memo)
    assert memo.cold == 1
    assert result.status == cold_plan(state).status == "infeasible"
    _accounted(state, result)


def _alone(j: Job) -> bool:
    """A whole single-GPU job: neither shared, MIG nor elastic."""
    return (j.gpus == 1 and not j.gpu_share and not j.mig and not j.mig_profile
            and not j.elastic)


@pytest.mark.parametrize("touch_old", [False, True])
def test_a_conflict_brought_by_the_deltas_after_a_carried_plan_goes_cold(
        touch_old: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a carried plan on, the conflicts among non-preemptible running jobs are
    looked for only when the deltas bring such a job: not after no event, but after a
    new one onto the GPU of one that runs there unchanged (or updated to
    non-preemptible as well, `touch_old`), which makes the plan go to the driver,
    infeasible, as a cold plan of the same state is."""
    asked: list[PlanRequest] = []

    def spy(request: PlanRequest) -> list[str]:
        asked.append(request)
        return hard_conflicts(request)
    monkeypatch.setattr(warm, "hard_conflicts", spy)
    req = generate_custom(96, 120, seed=6)
    victim = next(j for j in req.jobs if j.current and _alone(j))
    req = req.model_copy(update={"jobs": [
        j.model_copy(update={"preemptible": touch_old}) if j is victim else j
        for j in req.jobs]})
    session = _session(PlanRequest.model_validate(req.model_dump()))
    session.plan(0.3, planner=lambda r: cold_plan(r.model_copy(update={
        "policy": r.policy.model_copy(update={"solver": "heuristic"})})))
    session.plan(0.1)
    session.plan(0.1)
    memo = session.memo
    assert memo is not None and memo.carried == 1 and memo.cold == 0
    assert len(asked) == 1  # the first warm plan, not the carried one
    held = next(j for j in session.request.jobs if j.name == victim.name)
    if touch_old and not held.current:
        # a preemptible job may have been moved or stopped (a loaded machine, or other
        # instance data, cuts the passes differently): any such job still running will do
        held = next(j for j in session.request.jobs
                    if j.current and j.preemptible and _alone(j))
    # a non-preemptible job stays where it ran: the clash goes where the job is now
    assert held.current == victim.current if not touch_old else held.current
    clash = held.model_copy(update={"name": "clash", "preemptible": False})
    batch: list[Event] = [JobSubmitted(job=clash)]
    if touch_old:
        batch.append(JobUpdated(job=held.model_copy(update={"preemptible": False})))
    session.apply(batch)
    state = session.request
    result = session.plan(0.1)
    assert memo.cold == 1 and len(asked) == 2
    assert result.status == cold_plan(state).status == "infeasible"
    _accounted(state, result)


def test_a_committed_warm_plan_equals_a_checked_commit() -> None:
    """The session commits its validated plans without re-running the request's
    cross-checks: the state it builds is the one a checked commit builds, and it passes
    those checks when they run."""
    from solver.session import commit_plan

    session = _session(generate_custom(64, 80, seed=5))
    session.plan(1.0)
    session.apply(random_events(session.request, random.Random(5), 10, "x"))
    state = session.request
    result = session.plan(1.0)
    checked = commit_plan(state, result)
    assert session.request == checked
    assert PlanRequest.model_validate(session.request.model_dump()) == checked


def _occupancy(st: ClusterState) -> dict[str, object]:
    """What a placer's occupancy says, comparable between two states built apart (empty
    index entries and float noise left out)."""
    def r(x: float) -> float:
        return round(x, 9)

    def sets(by_model: Mapping[str, Iterable[set[int]]]) -> dict[str, dict[int, set[int]]]:
        out = {m: {c: s for c, s in enumerate(b) if s} for m, b in by_model.items()}
        return {m: b for m, b in out.items() if b}
    return {
        "placed": {n: sorted(p.model_dump_json() for p in pl) for n, pl in st.placed.items()},
        "nodes": [(n.name, n.schedulable, r(n.cpu_used), r(n.mem_used)) for n in st.nodes],
        "gpus": [(g.node, g.index, g.usable, g.whole_job, r(g.share_used), r(g.share_mem),
                  sorted(g.share_jobs), sorted(g.mig_used.items()), sorted(g.mig_current))
                 for g in st.gpus],
        "free": [{m: s for m, s in f.items() if s} for f in st.free_gpus],
        "buckets": sets(st.buckets),
        "model_free": {k: v for k, v in st.model_free.items() if v},
        "domain_free": {k: v for k, v in st.domain_free.items() if v},
        "shared": sets(st.share_index),
        "mig": {m: {k: v for k, v in g.items() if v} for m, g in st.mig_index.items()
                if any(g.values())},
        "quota": ({k: r(v) for k, v in st.quota_used.items() if r(v)},
                  {k: r(v) for k, v in st.quota_fixed.items() if r(v)}),
    }


def _fresh(req: PlanRequest, result: Plan) -> ClusterState:
    """The occupancy of `result` on `req` built from nothing."""
    st = ClusterState(req)
    infos = {i.name: i for i in compile_jobs(req)}
    for a in result.assignments:
        st.place(infos[a.job], list(a.placements))
    return st


def _more_events(req: PlanRequest, rng: random.Random, tag: str) -> list[Event]:
    """The deltas `random_events` does not send: a running job reported elsewhere (on
    its own GPUs, reordered) or with another weight, a GPU healthy again, a MIG layout
    changed where no job runs."""
    out: list[Event] = []
    running = [j for j in req.jobs if j.current]
    if running:
        j = rng.choice(running)
        out.append(JobUpdated(job=j.model_copy(update={"weight": j.weight * 2})))
    sick = [(n.name, g.index) for n in req.cluster.nodes for g in n.gpus if not g.healthy]
    if sick:
        node, index = rng.choice(sick)
        out.append(GpuHealthy(node=node, gpu=index))
    used = {(p.node, p.gpu) for j in running for p in j.current or []}
    idle_mig = [(n.name, g) for n in req.cluster.nodes for g in n.gpus
                if g.mig_enabled and (n.name, g.index) not in used]
    if idle_mig:
        node, gpu = rng.choice(idle_mig)
        small = min(req.cluster.catalog()[gpu.model].mig_profiles,
                    key=lambda p: p.compute_slices)
        out.append(MigLayoutChanged(node=node, gpu=gpu.index, mig_enabled=True, mig_instances=[
            MigInstance(profile=small.name, start=s) for s in small.starts[:2]]))
    return out


@pytest.mark.parametrize("quotas", [False, True])
def test_the_carried_placer_follows_every_kind_of_delta(quotas: bool) -> None:
    """From the second warm plan on, the compiled jobs and the placer's occupancy come
    from the last plan, brought forward by the deltas: each plan is valid and accounts
    for every job, and the carried occupancy equals one built from nothing for the plan
    (every index, host and quota count), across finishes, arrivals, cancellations,
    resizes, updates, GPU health, cordons, MIG layouts and new nodes. With quotas, a
    tenant's limit binds and its non-preemptible jobs count apart; the levels' pass
    (quotas) then moves jobs after the greedy, which the carried occupancy follows."""
    req = generate_custom(96, 120, seed=4)
    if quotas:
        jobs = [j.model_copy(update={"preemptible": False}) if k % 5 == 0 else j
                for k, j in enumerate(req.jobs)]
        cluster = req.cluster.model_copy(update={"quotas": {
            "team-0": Quota(limit={"*": 10}), "team-1": Quota(guaranteed={"*": 4},
                                                              limit={"*": 6})}})
        req = PlanRequest.model_validate(req.model_copy(
            update={"cluster": cluster, "jobs": jobs}).model_dump())
    session = _session(req)
    session.plan(0.3)
    rng = random.Random(4)
    for r in range(4):
        batch = random_events(session.request, rng, 12, f"r{r}")
        session.apply(batch)
        session.apply(_more_events(session.request, rng, f"m{r}"))
        state = session.request
        result = session.plan(0.1)
        _accounted(state, result)
        memo = session.memo
        assert memo is not None and memo.carried == r  # the first warm plan starts afresh
        carry = memo.carry
        assert carry is not None and carry.plan is result and carry.greedy is not None
        assert _occupancy(carry.greedy.state) == _occupancy(_fresh(carry.request, result))


def test_the_state_a_cold_plan_left_is_carried_when_prepared_between_plans() -> None:
    """After a plan that leaves nothing carried (the session's first, cold), `prepare`
    compiles the committed state and keeps its running jobs in a placer: the next warm
    plan starts from it (valid, every job accounted for, the carried occupancy equal to
    one built from nothing for the plan); after a warm plan there is nothing to make."""
    session = _session(generate_custom(96, 120, seed=5))
    session.plan(0.3)
    assert session.memo is None
    session.prepare()
    memo = session.memo
    assert memo is not None and memo.carry is not None
    assert memo.carry.plan is session.last_plan and memo.plans == 0
    # the pending jobs priced already: the next pass prices from their rows
    assert memo.carry.greedy is not None and memo.carry.greedy.price_rows.jobs
    rng = random.Random(5)
    for r in range(2):
        session.apply(random_events(session.request, rng, 12, f"r{r}"))
        state = session.request
        result = session.plan(0.1)
        _accounted(state, result)
        assert memo.carried == r + 1 and memo.cold == 0
        carry = memo.carry
        assert carry is not None and carry.plan is result and carry.greedy is not None
        assert _occupancy(carry.greedy.state) == _occupancy(_fresh(carry.request, result))
        session.prepare()
        assert memo.carry is carry


def test_what_the_carried_state_cannot_follow_is_planned_afresh() -> None:
    """A node removed, or a plan the session did not make warm: the next plan compiles
    and places from scratch (valid, every job accounted for), and the one after it
    starts from the carried state again."""
    session = _session(generate_custom(96, 120, seed=6))
    session.plan(0.3)
    session.plan(0.1)
    session.plan(0.1)
    memo = session.memo
    assert memo is not None and memo.carried == 1
    node = session.request.cluster.nodes[0].name
    session.apply([NodeRemoved(node=node)])
    _accounted(session.request, session.plan(0.1))
    assert memo.carried == 1
    _accounted(session.request, session.plan(0.1))
    assert memo.carried == 2
    session.plan(0.3, planner=cold_plan)
    _accounted(session.request, session.plan(0.1))
    assert memo.carried == 2
    _accounted(session.request, session.plan(0.1))
    assert memo.carried == 3


def test_a_search_that_finds_nothing_rests_for_longer_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The local search of a warm plan that found nothing better rests for the next
    plan, after a second fruitless search for three plans; one that improves the plan
    runs again at the next plan. Every plan is valid either way."""
    import solver.warm as warm

    calls: list[int] = []
    finds = {"better": False}

    def counted(request: PlanRequest, result: HeuristicResult, **kw: object
                ) -> HeuristicResult:
        """A search that returns its start (found nothing) or an equal new plan."""
        calls.append(len(calls))
        if not finds["better"]:
            return result
        return HeuristicResult(dict(result.placements), dict(result.reasons))

    monkeypatch.setattr(warm, "improve", counted)
    # a plan that re-packs toward the LP runs no search: keep to the search here
    monkeypatch.setattr(warm, "_repack", lambda request, result, *_: (result, None))
    session = _session(generate_custom(48, 60, seed=2))
    session.plan(0.2)
    ran = []
    for r in range(7):
        if r == 6:
            finds["better"] = True
        before = len(calls)
        state = session.request
        _accounted(state, session.plan(2.0))
        ran.append(len(calls) > before)
    # searched, rested 1, searched, rested 3, searched (and found: no rest)
    assert ran == [True, False, True, False, False, False, True]
    assert session.memo is not None and session.memo.rested == 4
    assert session.memo.search_idle == 0 and session.memo.search_wait == 0


def test_committing_a_plan_parsed_from_its_json_builds_the_same_state() -> None:
    """The service commits the worker's plan parsed back from JSON (no placement object
    in common with the state): the state is the one committing the plan itself builds,
    and the jobs whose placement did not change keep their objects."""
    from solver.session import commit_plan

    session = _session(generate_custom(64, 80, seed=7))
    session.plan(0.3)
    session.apply(random_events(session.request, random.Random(7), 10, "p"))
    state = session.planning_request(0.2)
    result = warm_plan(state, WarmMemo())
    parsed = Plan.model_validate_json(result.model_dump_json())
    direct, via_json = commit_plan(state, result), commit_plan(state, parsed)
    assert via_json == direct
    pairs = list(zip(state.jobs, via_json.jobs, strict=True))
    assert [a is b for a, b in pairs] == [a.current == b.current for a, b in pairs]
    assert any(a.current and a is b for a, b in pairs)  # running jobs kept as they were


def _two_nodes() -> PlanRequest:
    """Two nodes of four H100s, a one-GPU job running on each."""
    return PlanRequest.model_validate({
        "cluster": {"nodes": [
            {"name": f"n{k}", "gpus": [{"index": i, "model": "H100-SXM5-80GB"}
                                       for i in range(4)]} for k in (1, 2)]},
        "jobs": [{"name": f"s{k}", "gpus": 1, "current": [{"node": f"n{k}", "gpu": 0}]}
                 for k in (1, 2)],
        "policy": {"solver": "heuristic", "time_limit_s": 1, "seed": 1},
    })


def test_a_warm_plan_migrates_a_running_job_when_the_lp_says_it_pays() -> None:
    """A four-GPU gang arrives where each node has three GPUs free: keeping both running
    jobs leaves it out, moving one of them (for the migration cost) places it. The warm
    plan's LP re-pack finds that plan, which is the proven optimum of the state; the
    placer carried to the next plan follows the move."""
    session = PlanningSession(_two_nodes())
    session.plan()
    session.apply(events({"kind": "job_submitted", "job": {"name": "gang", "gpus": 4,
                                                           "weight": 3}}))
    state = session.request
    result = session.plan(0.2)
    _accounted(state, result)
    optimum = cold_plan(state.model_copy(update={"policy": state.policy.model_copy(
        update={"solver": "cp_sat", "time_limit_s": 10})}))
    assert optimum.status == "optimal"
    assert result.objective_value == pytest.approx(optimum.objective_value, abs=1e-6)
    assert "gang" in {a.job for a in result.assignments} and len(result.migrated) == 1
    memo = session.memo
    assert memo is not None and memo.repacked == 1 and "relax" in memo.last_steps
    carry = memo.carry
    assert carry is not None and carry.greedy is not None
    assert _occupancy(carry.greedy.state) == _occupancy(_fresh(carry.request, result))
    # the next plan starts from the carried placer, at the re-packed placements
    session.apply(events({"kind": "job_submitted", "job": {"name": "late", "gpus": 2}}))
    state = session.request
    nxt = session.plan(0.2)
    _accounted(state, nxt)
    assert memo.carried == 1 and "late" in {a.job for a in nxt.assignments}
    assert not nxt.migrated and not nxt.preempted


def test_the_lp_counts_a_warm_repack_rounds_go_to_the_nearest_integer() -> None:
    """`relax(nearest=True)`'s targets: each option's LP count rounded to the nearest
    integer (a gang the LP gave at least half is placed), options of higher value first,
    never more jobs than the group has; the default keeps the integer parts."""
    from solver.bound import (
        FLOOR_LIFT,
        NEAREST_LIFT,
        GroupCount,
        GroupKey,
        Option,
        _targets_by_lift,
    )

    def _targets(groups: dict[GroupKey, GroupCount], members: dict[GroupKey, list[str]],
                 cols: list[float], nearest: bool = False) -> dict[str, str]:
        lift = NEAREST_LIFT if nearest else FLOOR_LIFT
        return _targets_by_lift(groups, members, cols, (lift,))[0][0]

    def opt(model: str, coef: float) -> Option:
        return Option(("whole", model), 4.0, coef, 0.0, 0.0, True)

    gangs = GroupKey((opt("H100", 9.0), opt("A100", 5.0)), "", False, 4)
    single = GroupKey((opt("H100", 3.0), opt("A100", 2.0)), "", False, 4)
    groups = {gangs: GroupCount(3), single: GroupCount(1)}
    members = {gangs: ["g1", "g2", "g3"], single: ["s"]}
    cols = [1.6, 0.4, 0.7, 0.6]  # per group, per option, in order
    assert _targets(groups, members, cols) == {"g1": "H100"}
    assert _targets(groups, members, cols, nearest=True) == {
        "g1": "H100", "g2": "H100", "s": "H100"}


def test_targets_solved_between_plans_are_rounded_when_the_lp_does_not_fit() -> None:
    """A gang arrives that fits only if a running job moves, while the LP does not fit in
    the plan (its measured cost is made large): the plan leaves the gang out. The LP solved
    between plans (`prepare`, on the state that plan left) gives the targets, and the next
    plan, whose LP still does not fit, rounds them: the gang is placed, one job migrates,
    and that plan is the proven optimum of its state. A job that joined since the LP is
    placed beside them."""
    from solver.bound import relax

    session = PlanningSession(_two_nodes())
    session.plan()
    session.apply(events({"kind": "job_submitted", "job": {"name": "gang", "gpus": 4,
                                                           "weight": 3}}))
    session.memo = WarmMemo(relax_cpu=100.0, search_wait=100)  # no search either
    first = session.plan(0.2)
    memo = session.memo
    assert "gang" not in {a.job for a in first.assignments} and "relax" not in memo.last_steps
    memo.prepare_cpu = 100.0
    assert not session.prepare()  # an LP of 100 s of CPU is not solved between plans
    memo.prepare_cpu = None
    stop = threading.Event()
    stop.set()  # the caller needs the thread back: nothing of the LP is kept
    assert not session.prepare(stop=stop)
    assert memo.prepare_cpu is None and memo.prepares == 0 and memo.targets is None
    assert session.prepare() and memo.prepared and memo.prepares == 1
    rel = relax(session.request, nearest=True)
    assert rel is not None and memo.targets == (rel.targets, rel.amounts)
    session.apply(events({"kind": "job_submitted", "job": {"name": "late", "gpus": 1}}))
    state = session.request
    assert memo.relax_cpu == 100.0  # the LP between plans is measured apart
    result = session.plan(0.2)
    _accounted(state, result)
    assert "round" in memo.last_steps and "relax" not in memo.last_steps
    assert memo.repacked == 1 and len(result.migrated) == 1 and not memo.prepared
    # targets that wait for a rounding are kept, not solved again, up to TARGETS_MAX_AGE
    memo.targets, memo.prepared, memo.targets_age = ({}, {}), True, 1
    assert not session.prepare() and memo.prepares == 1
    memo.targets_age = TARGETS_MAX_AGE
    assert session.prepare() and memo.prepares == 2 and memo.targets_age == 0
    assert {"gang", "late"} <= {a.job for a in result.assignments}
    optimum = cold_plan(state.model_copy(update={"policy": state.policy.model_copy(
        update={"solver": "cp_sat", "time_limit_s": 10})}))
    assert optimum.status == "optimal"
    assert result.objective_value == pytest.approx(optimum.objective_value, abs=1e-6)


def test_a_plan_solves_its_own_lp_over_targets_from_between_plans_when_both_fit() -> None:
    """Targets from between plans stand in only when the plan's own LP and a rounding do
    not both fit: with a cheap LP the plan solves the LP of its state (and carries its
    bound); a fresh session, without a warm plan, solves nothing between plans."""
    session = PlanningSession(_two_nodes())
    assert not session.prepare()
    session.plan()
    session.apply(events({"kind": "job_submitted", "job": {"name": "a", "gpus": 1}}))
    session.memo = WarmMemo(relax_cpu=100.0)  # this plan's own LP does not fit
    session.plan(0.5)
    memo = session.memo
    assert "relax" not in memo.last_steps and session.prepare() and memo.prepared
    session.apply(events({"kind": "job_submitted", "job": {"name": "b", "gpus": 2}}))
    state = session.request
    memo.relax_cpu = memo.round_cpu = 1e-4
    result = session.plan(0.5)
    _accounted(state, result)
    assert "relax" in memo.last_steps and result.best_bound is not None
    assert memo.targets is None or not memo.prepared
    assert not session.prepare()  # after a plan whose own LP fitted, none between plans
