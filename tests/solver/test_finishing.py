"""The cheap end of a solve: a pass cut at its deadline keeps the running jobs it never
reached, the fragmentation figure read from the placements equals the one of the
occupancy, and the finishing reserve covers what building and validating a plan costs
(CPU time, generous bounds: no wall-clock assert)."""

from __future__ import annotations

import time

import pytest

import solver.auto as auto_mod
from benchmarks.generator import generate_custom
from heuristics.fragmentation import fragmentation, fragmentation_of_state
from heuristics.greedy import Greedy, plan_greedy
from heuristics.lp_round import VARIANTS, plan_lp_round
from heuristics.result import HeuristicResult
from models import PlanRequest
from models.instance import ClusterState, compile_jobs
from models.objective import evaluate
from solver.bound import relax
from solver.budget import Budget
from solver.build import build_plan
from solver.context import Context
from solver.gcpause import gc_paused
from solver.validate import validate_plan


def _kept_at_start(req: PlanRequest) -> set[str]:
    """The running jobs a fresh pass can keep where they run before placing anything."""
    g = Greedy(req)
    g.keep_running(preemptible=True)
    return {n for n in g.state.placed if g.by_name[n].current}


def _left_out_but_free(req: PlanRequest, result: HeuristicResult) -> list[str]:
    """Running jobs left out with reason `time_limit` whose current placement is still
    free in the plan (a cut pass should have kept them)."""
    infos = {i.name: i for i in compile_jobs(req)}
    state = ClusterState(req)
    for name, pls in result.placements.items():
        if pls:
            state.place(infos[name], list(pls))
    return [n for n, why in result.reasons.items()
            if why[0] == "time_limit" and infos[n].current
            and state.conflicts(infos[n], infos[n].current or []) is None]


@pytest.mark.parametrize("seed", [0, 3])
def test_a_cut_pass_keeps_the_running_jobs_it_did_not_reach(seed: int) -> None:
    """Cut before its first job, the default greedy pass still keeps every running job
    that can stay (it used to stop every one it had not reached); both roundings, cut,
    leave out no running job whose place is still free; every plan is valid."""
    req = generate_custom(256, 400, seed=seed)
    keepable = _kept_at_start(req)
    assert keepable, "the instance should have running jobs"
    greedy = plan_greedy(req, seed=0, deadline=time.monotonic() - 1.0, keep_running=False)
    assert keepable <= set(greedy.placements), keepable - set(greedy.placements)
    rel = relax(req, time_limit_s=5.0)
    assert rel is not None
    cuts = [greedy] + [plan_lp_round(req, rel.targets, variant=v,
                                     deadline=time.monotonic() - 1.0) for v in VARIANTS]
    for cut in cuts:
        assert any(why[0] == "time_limit" for why in cut.reasons.values())
        assert _left_out_but_free(req, cut) == []
        built = build_plan(req, cut, status="heuristic", solver="heuristic")
        assert validate_plan(req, built) == []


@pytest.mark.parametrize("seed", range(6))
def test_fragmentation_from_placements_equals_the_occupancy_figure(seed: int) -> None:
    """`fragmentation` (read from the placements) and `fragmentation_of_state` (read from
    a ClusterState holding them) agree on greedy plans."""
    req = generate_custom(24 + 8 * seed, 60, seed=seed)
    placements = {n: p for n, p in plan_greedy(req).placements.items() if p}
    infos = compile_jobs(req)
    state = ClusterState(req)
    by_name = {i.name: i for i in infos}
    for name, pls in placements.items():
        state.place(by_name[name], list(pls))
    assert fragmentation(req, placements) == pytest.approx(
        fragmentation_of_state(state, infos), abs=1e-9)


def test_the_finishing_reserve_covers_building_and_validating() -> None:
    """On a medium request (2,048 GPUs / 3,000 jobs) the reserve kept back at a quiet pace
    is at least the CPU seconds building and validating its plan take, and not ten times
    more (a reserve far too large stops every phase early)."""
    req = generate_custom(2048, 3000, 0)
    result = plan_greedy(req, seed=0, keep_running=True)
    with gc_paused():
        build_plan(req, result, status="heuristic", solver="heuristic")   # warm caches
        t0 = time.process_time()
        built = build_plan(req, result, status="heuristic", solver="heuristic")
        assert validate_plan(req, built) == []
        spent = time.process_time() - t0
    reserve = Budget.of(req).finish_reserve()
    assert spent <= reserve <= 10 * spent + 0.2, (spent, reserve)


def test_local_search_starts_only_when_its_setup_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local search's setup is not time-boxed: when the budget left before the
    finishing reserve cannot hold it, the starting plan comes back untouched; when it
    can, the search runs and returns a valid plan at least as good."""
    req = generate_custom(128, 190, 0)
    req.policy.time_limit_s = 30.0
    req.policy.objective = "fairness"   # the starting plan is the greedy one (no LP)
    ctx = Context.start(req, None, None)
    start = ctx.portfolio.start()
    searched = auto_mod.local_search(ctx, cap_s=0.2)
    assert validate_plan(req, build_plan(req, searched, status="heuristic",
                                         solver="heuristic")) == []
    assert (evaluate(req, searched.placements).objective_value
            >= evaluate(req, start.placements).objective_value - 1e-9)
    # a setup that needs more than the 30 s budget: skipped
    monkeypatch.setattr(auto_mod, "SEARCH_SETUP_CPU_PER_JOB", 1.0)
    assert auto_mod.local_search(ctx, cap_s=0.2) is ctx.portfolio.start()
