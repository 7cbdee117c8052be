"""Anytime planning: a phase cut at its deadline still leaves a valid plan, the quick bound
is a proven bound, a tiny time limit still gives a valid plan with a bound, and the budget
paces its phases by what it measures (no tight wall-clock asserts: generous bounds only)."""

from __future__ import annotations

import gc
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.generator import generate, generate_custom
from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from heuristics.lp_round import VARIANTS, plan_lp_round
from heuristics.result import HeuristicResult
from models import PlanRequest
from models.objective import evaluate
from solver import plan
from solver.bound import relax
from solver.budget import Budget, finish_prior
from solver.build import build_plan
from solver.context import Context
from solver.gcpause import gc_paused
from solver.quick_bound import quick_bound
from solver.validate import validate_plan
from tests.solver.brute import brute_force
from tests.solver.strategies import random_request


def _valid_and_accounted(req: PlanRequest, result: HeuristicResult) -> None:
    """`result` builds into a plan that passes the validator, every job placed or given
    a reason."""
    for name in {j.name for j in req.jobs}:
        assert name in result.placements or name in result.reasons, name
    built = build_plan(req, result, status="heuristic", solver="heuristic")
    assert validate_plan(req, built) == []


# ------------------------------------------------------------------ phases cut at a deadline
@pytest.mark.parametrize("seed", [0, 1])
def test_a_phase_cut_at_its_deadline_leaves_a_valid_plan(seed: int) -> None:
    """Every starting phase, given a deadline already past (or a few milliseconds away),
    stops early and still hands back a valid plan that accounts for every job."""
    req = generate_custom(256, 400, seed=seed)
    targets = relax(req, time_limit_s=5.0)
    assert targets is not None
    for delay in (-1.0, 0.005):
        greedy = plan_greedy(req, seed=0, deadline=time.monotonic() + delay,
                             keep_running=False)
        _valid_and_accounted(req, greedy)
        keeping = plan_greedy(req, seed=0, deadline=time.monotonic() + delay,
                              keep_running=True)
        _valid_and_accounted(req, keeping)
        for variant in VARIANTS:
            rounded = plan_lp_round(req, targets.targets, variant=variant,
                                    deadline=time.monotonic() + delay)
            _valid_and_accounted(req, rounded)
        improved = improve(req, greedy, deadline=time.monotonic() + delay, seed=0)
        _valid_and_accounted(req, improved)
    cut = plan_greedy(req, seed=0, deadline=time.monotonic() - 1.0, keep_running=False)
    assert any(why[0] == "time_limit" for why in cut.reasons.values())


# ------------------------------------------------------------------ the quick bound
@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_quick_bound_is_at_least_the_brute_force_optimum(seed: int) -> None:
    req = random_request(random.Random(seed), solver="auto")
    ref = brute_force(req)
    if ref is None:
        return
    full = quick_bound(req)
    assert full >= ref[0] - 1e-9, (seed, ref[0])
    # cut at a deadline long past: fewer price passes, a looser bound that still holds
    cut = quick_bound(req, deadline=time.monotonic() - 60.0)
    assert cut >= full - 1e-9 and cut >= ref[0] - 1e-9, (seed, ref[0], full, cut)


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["elastic", "topology",
                                                                   "interference"]))
def test_quick_bound_holds_with_the_v11_fields(seed: int, feature: str) -> None:
    # elastic sizes (superlinear curves included), topology costs and interference
    # speedups up to 2 must not break the bound
    flags = {"elastic": {"elastic": 0.7}, "topology": {"topology": True},
             "interference": {"interference": True}}[feature]
    req = random_request(random.Random(seed), solver="auto", **flags)  # type: ignore[arg-type]
    ref = brute_force(req)
    if ref is None:
        return
    assert quick_bound(req) >= ref[0] - 1e-9, (seed, feature, ref[0])


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_quick_bound_holds_with_pinned_jobs_and_gangs_kept_to_nodes_or_domains(
        seed: int) -> None:
    # more nodes and GPUs: pinned (non-preemptible running) jobs counted as kept, gangs
    # left out of the models where no node or domain holds them
    req = random_request(random.Random(seed), solver="auto", max_gpus=6, max_nodes=3,
                         topology=True)
    ref = brute_force(req)
    if ref is None:
        return
    assert quick_bound(req) >= ref[0] - 1e-9, (seed, ref[0])


@pytest.mark.parametrize("objective", ["throughput", "jct", "makespan", "fairness"])
def test_quick_bound_dominates_the_plans_on_m(objective: str) -> None:
    """On M (1,024 GPUs / 1,500 jobs) the quick bound is above the greedy plan and the
    rounded LP plans, and is close to the LP bound: within 3% of it (the pinned jobs
    kept, gangs kept to the nodes and domains that can hold them; 0.1-0.7% on seeds
    0 and 1, 9% before)."""
    req = generate("M", 0)
    req.policy.objective = objective  # type: ignore[assignment]
    bound = quick_bound(req)
    rel = relax(req, time_limit_s=20.0)
    assert rel is not None
    plans = [plan_greedy(req, seed=0)]
    plans += [plan_lp_round(req, rel.targets, variant=v) for v in VARIANTS]
    for p in plans:
        assert evaluate(req, p.placements).objective_value <= bound + 1e-9
    if objective != "fairness":
        assert rel.bound <= bound * 1.03 and bound <= rel.bound * 1.03


# ------------------------------------------------------------------ tiny limits
def test_a_tiny_limit_on_a_medium_request_gives_a_valid_plan_with_a_bound() -> None:
    req = generate("M", 0)
    req.policy.time_limit_s = 0.5
    t0 = time.monotonic()
    result = plan(req)
    wall = time.monotonic() - t0
    assert wall < 0.5 + 10.0   # generous: a loaded machine must pass
    assert validate_plan(req, result) == []
    assert result.best_bound is not None
    assert result.best_bound >= result.objective_value - 1e-6
    assert len(result.assignments) + len(result.unplaced) == len(req.jobs)


# ------------------------------------------------------------------ the budget's pace
def test_the_budget_paces_phases_by_what_it_measured() -> None:
    """A phase that took five times its prior makes the next estimates (and the
    finishing reserve) at least that much slower; lower bounds only, since a loaded
    machine can only make a sleep longer."""
    budget = Budget(limit_s=100.0, jobs=1000, gpus=1000)
    quiet = budget.finish_reserve()
    with budget.paced(0.01):
        time.sleep(0.05)
    assert budget.pace() >= 4.9
    assert budget.estimate(1.0) >= 4.9
    assert budget.finish_reserve() > quiet
    assert not budget.fits(100.0)
    assert budget.fits(0.001)
    before = budget.pace()
    with budget.paced(100.0) as pacing:   # a phase cut early: its measure is void
        time.sleep(0.03)
        pacing.void = True
    assert budget.pace() == before



def test_the_finishing_margin_does_not_eat_a_short_budget_under_load() -> None:
    """At load 5 (four busy processes and the solve on two cores, and more) the reserve
    of M (1,024 GPUs / 1,500 jobs) with a 1 s limit covers its finishing prior at that
    pace, with room for a phase: not most of the budget, as a margin of 0.1 s scaled by
    the load kept (0.8 s for a finishing that took 0.125 s)."""
    budget = Budget(limit_s=1.0, jobs=1500, gpus=1024)
    budget._py_wall, budget._py_cpu = 0.5, 0.1
    budget._pace = budget._pace_last = 5.0
    assert budget.load() == pytest.approx(5.0)
    assert 5.0 * finish_prior(1500, 1024) < budget.finish_reserve() < 0.6


@pytest.mark.parametrize(("limit", "lp_first"),
                         [(60.0, True), (9.0, True), (5.0, True), (3.0, False)])
def test_medium_requests_start_from_the_lp_when_it_would_run(
        limit: float, lp_first: bool) -> None:
    """On a request under `BOTH_VARIANTS_UP_TO` jobs the LP goes first whenever it would
    run (its share `RELAX_TRY_SHARE` fits: a pace of 100 wall seconds per prior CPU
    second makes the prior of that share of the LP here, 0.036 CPU s, 3.6 s); a slower
    pace leaves the plan to the greedy pass, which exists early whatever the load."""
    req = generate_custom(256, 400, seed=0)
    ctx = Context.start(req.model_copy(update={"policy": req.policy.model_copy(
        update={"time_limit_s": limit})}), None, None)
    budget = ctx.budget
    budget.pace = budget.load = lambda: 100.0   # type: ignore[method-assign]
    budget.finish_reserve = lambda: 0.0   # type: ignore[method-assign]
    assert ctx.portfolio._lp_first() is lp_first

@pytest.mark.parametrize("deterministic", [False, True])
def test_medium_requests_round_the_lps_nearest_counts_first(deterministic: bool) -> None:
    """Up to `BOTH_VARIANTS_UP_TO` jobs the LP's counts rounded to the nearest integer
    are rounded into a plan first (not in deterministic mode), then the integer parts by
    each variant; every rounding is a valid plan."""
    req = generate_custom(256, 400, seed=0)
    req.policy.time_limit_s = 30.0
    req.policy.deterministic = deterministic
    ctx = Context.start(req, None, None)
    ctx.portfolio.bound()
    rel = ctx.portfolio._relax
    assert rel is not None and rel.targets
    schedule = ctx.portfolio._schedule()
    floors = [(v, t) for v, t, _ in schedule if t is rel.targets]
    assert [v for v, _ in floors] == list(VARIANTS)
    if deterministic:
        assert not rel.nearest and len(schedule) == len(VARIANTS)
        return
    assert rel.nearest != rel.targets   # jobs the LP gives half of or more
    # the integer re-solve's own nearest counts come third when it ran (and differ)
    resolved = [t for _, t, _ in schedule if t is rel.resolved_nearest]
    assert all(t is rel.resolved_nearest for _, t, _ in schedule[2:3] if resolved)
    assert schedule[0][1] is rel.nearest
    assert len(schedule) == len(VARIANTS) + 1 + len(resolved)
    near = plan_lp_round(req, rel.nearest, variant=schedule[0][0],
                         sizes=rel.nearest_amounts)
    _valid_and_accounted(req, near)


def test_gc_paused_nests_and_restores_the_collector() -> None:
    was = gc.isenabled()
    gc.enable()
    try:
        with gc_paused():
            assert not gc.isenabled()
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert gc.isenabled()
        gc.disable()
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
