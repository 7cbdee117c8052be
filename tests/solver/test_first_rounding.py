"""The first rounding of a large request (solver/portfolio.py: `_first_variant`): the
gang-first variant when its whole pass fits, else the cheaper keep_first one, run once;
and the priors the schedule of an XL request (65,536 GPUs / 80,000 jobs) is decided on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.generator import generate_custom
from heuristics.lp_round import VARIANTS
from models import PlanRequest
from solver import portfolio as portfolio_mod
from solver.build import build_plan
from solver.context import Context
from solver.portfolio import KEEP_FIRST_SHARE, Portfolio
from solver.validate import validate_plan


def _context(deterministic: bool = False) -> tuple[PlanRequest, Context]:
    """A small request with a long limit, its LP bound computed."""
    req = generate_custom(256, 400, seed=0)
    req.policy.time_limit_s = 30.0
    req.policy.deterministic = deterministic
    ctx = Context.start(req, None, None)
    ctx.portfolio.bound()
    return req, ctx


def _room(ctx: Context, most: float) -> None:
    """Make the budget fit any phase of at most `most` prior CPU seconds, and no more."""
    ctx.budget.fits = lambda prior: prior <= most   # type: ignore[method-assign]


@pytest.mark.parametrize("over", [True, False])
def test_the_first_rounding_is_keep_first_when_the_gang_first_pass_does_not_fit(
        monkeypatch: pytest.MonkeyPatch, over: bool) -> None:
    """Over `KEEP_FIRST_OVER` jobs (patched down to this request's size), with room for
    the keep_first pass but not the whole gang-first one, the first rounding is the
    keep_first one at `KEEP_FIRST_SHARE` of the prior; at or under it, the gang-first
    one as scheduled. Its plan is valid, and the keep_first entry of the schedule is not
    rounded a second time."""
    req, ctx = _context()
    monkeypatch.setattr(portfolio_mod, "KEEP_FIRST_OVER", 10 if over else len(req.jobs))
    pf = ctx.portfolio
    prior = pf._rounding_cpu()
    _room(ctx, 0.9 * (prior + pf._cut_tail()))
    variant, got = pf._first_variant(VARIANTS[0], prior)
    if not over:
        assert (variant, got) == (VARIANTS[0], prior)
        return
    assert (variant, got) == (VARIANTS[1], pytest.approx(KEEP_FIRST_SHARE * prior))
    schedule = [(v, t, s) for v, t, s in pf._schedule() if t is pf._relax.targets]  # type: ignore[union-attr]
    first = pf._roundings(schedule, 1)
    assert len(first) == 1
    built = build_plan(req, first[0], status="heuristic", solver="heuristic")
    assert validate_plan(req, built) == []
    _room(ctx, 1e9)
    assert pf._roundings(schedule, len(schedule), 1) == []   # keep_first: made already


def test_the_gang_first_rounding_stays_first_when_its_whole_pass_fits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for the whole gang-first pass (and its cut tail), it stays the first
    rounding on a large request too; in deterministic mode it always does."""
    monkeypatch.setattr(portfolio_mod, "KEEP_FIRST_OVER", 10)
    _, ctx = _context()
    pf = ctx.portfolio
    prior = pf._rounding_cpu()
    _room(ctx, prior + pf._cut_tail())
    assert pf._first_variant(VARIANTS[0], prior) == (VARIANTS[0], prior)
    _, det = _context(deterministic=True)
    _room(det, 0.0)
    assert det.portfolio._first_variant(VARIANTS[0], prior) == (VARIANTS[0], prior)


def test_the_xl_priors_are_near_what_xl_measures() -> None:
    """XL (65,536 GPUs / 80,000 jobs): the gang-first rounding's prior is near the
    3.3-3.6 CPU s it takes (the square term alone gave 9.4); L's (16,384 / 20,000) is
    as it was (0.83 with the first pass's warm-up)."""
    def rounding(jobs: int) -> float:
        bare = object.__new__(Portfolio)   # only the job count is read
        bare.request = SimpleNamespace(jobs=range(jobs))   # type: ignore[assignment]
        bare._warm = False
        return bare._rounding_cpu()

    assert 3.0 < rounding(80_000) < 4.0
    assert rounding(20_000) == pytest.approx(0.83)
