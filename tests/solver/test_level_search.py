"""`solver.levels.level_search` on a generated request with quotas, classes and topology
levels: it never returns a plan below the starting plan by the levels, its plan is
valid, and deterministic mode gives the same plan twice, here above the starting plan."""

from __future__ import annotations

from benchmarks.generator import generate_custom, with_levels
from models import PlanRequest
from models.objective import level_key
from solver.build import build_plan
from solver.context import Context
from solver.levels import level_search
from solver.validate import validate_plan


def _request(deterministic: bool) -> PlanRequest:
    req = with_levels(generate_custom(128, 240, seed=3, topology=("zone", "block", "rack")),
                      tenants_quota=8, priority_classes=3, seed=3)
    return req.model_copy(update={"policy": req.policy.model_copy(
        update={"time_limit_s": 20.0, "deterministic": deterministic, "seed": 0})})


def test_level_search_never_ranks_below_the_start_and_stays_valid() -> None:
    req = _request(False)
    ctx = Context.start(req, None, None)
    start = ctx.portfolio.start()
    out = level_search(ctx)
    assert level_key(req, out.placements) >= level_key(req, start.placements)
    plan = build_plan(req, out, status="heuristic", solver="heuristic")
    assert validate_plan(req, plan) == []


def test_level_search_is_deterministic_in_deterministic_mode() -> None:
    plans = []
    for _ in range(2):
        req = _request(True)
        ctx = Context.start(req, None, None)
        start = ctx.portfolio.start()
        plans.append(level_search(ctx).placements)
        # a restart with another seed serves more guarantee here (196 against 191.8 GPUs)
        assert level_key(req, plans[-1]) > level_key(req, start.placements)
    assert plans[0] == plans[1]
