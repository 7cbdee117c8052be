"""Limits are hard: time (on a busy machine too), cancellation at any moment, incumbents
from the first phase, seeds, and the deterministic mode; unbounded objectives get bounds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import CodeType, FrameType

import pytest

from benchmarks.generator import generate_custom
from models import Plan, PlanRequest
from solver import auto as auto_policy
from solver import plan
from solver.backends import BACKENDS
from solver.backends.milp import _run_with_deadline
from solver.formulation import compile_request
from solver.linear import Limits
from solver.validate import validate_plan


def _big(solver: str, limit: float) -> PlanRequest:
    req = generate_custom(512, 700, seed=3)
    req.policy.solver = solver  # type: ignore[assignment]
    req.policy.time_limit_s = limit
    req.policy.threads = 2
    return req


def _check_bound(result: Plan) -> None:
    if result.status != "optimal" and result.best_bound is not None:
        assert result.gap is not None
        assert result.best_bound >= result.objective_value - 1e-6
        expect = (result.best_bound - result.objective_value) / max(1.0,
                                                                   abs(result.best_bound))
        assert result.gap == pytest.approx(expect, abs=1e-9)


def _check_label(result: Plan) -> None:
    """The label names what produced the plan: a heuristic plan is labelled as one."""
    if result.status == "heuristic":
        assert result.solver.endswith("heuristic"), result.solver


@pytest.mark.usefixtures("busy")
@pytest.mark.parametrize(("solver", "limit"), [("cp_sat", 2.0), ("auto", 1.0),
                                               ("auto", 2.0), ("heuristic", 1.0),
                                               ("milp", 2.0)])
def test_time_limit_is_hard_on_a_busy_machine(solver: str, limit: float) -> None:
    """Every run answers within a generous bound, and the solve's own clock (the whole
    call, validation included) stays within half a second of the limit in the median of
    three runs. The 0.1 s allowance itself is a timing, measured by `gpuplan bench curve`
    (benchmarks/RESULTS.md): on a host loaded beyond the test's own busy helper, the
    MILP backends' exit after their limit can pass it, and a test must not fail on
    that. The median of three is within the bound exactly when two of the runs are, so
    the third run is left out once two are (a third of the test's time, which is the
    limits' own)."""
    times: list[float] = []
    while len(times) < 3 and sum(t <= limit + 0.5 for t in times) < 2:
        req = _big(solver, limit)
        t0 = time.monotonic()
        result = plan(req)
        wall = time.monotonic() - t0
        assert wall < limit + 3.0
        assert result.solve_time_s <= wall + 1e-3
        assert validate_plan(req, result) == []
        assert result.status in ("feasible", "heuristic", "optimal")
        assert result.assignments, "a plan from the first phase places jobs"
        _check_bound(result)
        _check_label(result)
        times.append(result.solve_time_s)
    assert sorted(times)[1] <= limit + 0.5, times


def test_cancel_set_before_the_solve_returns_the_starting_plan() -> None:
    req = _big("cp_sat", 30.0)
    cancel = threading.Event()
    cancel.set()
    t0 = time.monotonic()
    result = plan(req, cancel=cancel)
    assert time.monotonic() - t0 < 15
    assert validate_plan(req, result) == []
    assert result.assignments
    assert (result.status, result.solver) == ("heuristic", "heuristic")
    assert any("cancelled" in note for note in result.explanation)


def test_a_cancel_set_before_cp_sat_starts_is_not_lost() -> None:
    """`stop_search` before the search starts does nothing: the backend must still stop,
    whether the flag was set before the call or while the model loads."""
    req = _big("cp_sat", 30.0)
    model = compile_request(req, prune=4).model
    limits = Limits(time_limit_s=30.0, threads=2)
    cancel = threading.Event()
    cancel.set()
    t0 = time.monotonic()
    assert BACKENDS["cp_sat"].solve(model, limits, cancel=cancel).status == "unknown"
    assert time.monotonic() - t0 < 10
    for delay in (0.0, 0.01, 0.1):
        cancel = threading.Event()
        timer = threading.Timer(delay, cancel.set)
        t0 = time.monotonic()
        timer.start()
        try:
            BACKENDS["cp_sat"].solve(model, limits, cancel=cancel)
        finally:
            timer.cancel()
        assert time.monotonic() - t0 < 15, delay


class CancelAtPlace(threading.Event):
    """A cancel flag that sets itself once the solve has looked at it (`is_set`, in the
    thread that made the flag) from `place` distinct places, a place being the code of the
    look and of its two callers: right after that look has answered "not set", the moment
    when a phase has checked and goes ahead, or `after_s` seconds later from a timer
    thread. Each phase looks before it starts, so places 1, 2, 3... walk through the
    phases in order on a quiet machine and a loaded one alike, which a cancel at a random
    wall-clock moment does not (at load 8 the moments of 0.05-3 s all fell in the first
    two phases; on a quiet machine, most in CP-SAT's search)."""

    def __init__(self, place: int, after_s: float | None = None) -> None:
        super().__init__()
        self.place, self.after_s = place, after_s
        self.thread = threading.get_ident()
        self.seen: set[tuple[CodeType, ...]] = set()
        self.timer: threading.Timer | None = None
        self.set_at = float("inf")

    def set(self) -> None:
        """Set the flag, and note when."""
        self.set_at = min(self.set_at, time.monotonic())
        super().set()

    def is_set(self) -> bool:
        """The flag, after the look has been counted."""
        answer = super().is_set()
        if answer or threading.get_ident() != self.thread or len(self.seen) >= self.place:
            return answer
        frame: FrameType | None = sys._getframe(1)
        where = []
        while frame is not None and len(where) < 3:
            where.append(frame.f_code)
            frame = frame.f_back
        self.seen.add(tuple(where))
        if len(self.seen) == self.place:
            if self.after_s is None:
                self.set()
            else:
                self.timer = threading.Timer(self.after_s, self.set)
                self.timer.start()
        return answer

    def reached(self) -> bool:
        """Whether the solve looked from `place` places (the cancel was then set)."""
        return len(self.seen) >= self.place


#: The places (see `CancelAtPlace`) a cancel is set after, for a solve of `_big`: the
#: start of the solve (1), the share re-pack of the starting plan (3: the report of that
#: plan, 2, is where `test_the_starting_plan_is_reported_first` cancels), and the last
#: look before the longest phase (6, about 0.9 and 0.5 CPU s in, quiet): with `cp_sat`,
#: CP-SAT's own check before its search starts, the moment of issue 17's lost cancel
#: (`stop_search` before the search starts does nothing); with `auto`, the first look of
#: the local search's move loop. Places 4 and 5 come just before 6 (`cp_sat`: the exact
#: phase's checks before its model is built; `auto`: the local search's own start and its
#: repair loop); a place past 6 comes only after the longest phase.
CANCEL_PLACES = (1, 3, 6)


@pytest.mark.parametrize("solver", ["cp_sat", "auto"])
def test_cancel_at_any_moment_returns_the_best_plan_so_far(solver: str) -> None:
    """A cancel right after each of `CANCEL_PLACES`, and one from another thread during
    the longest phase (0.3 s after the last of them), is never lost: the call returns
    promptly with a valid plan at least as good as every incumbent it reported, each
    labelled as what made it."""
    moments = [CancelAtPlace(place) for place in CANCEL_PLACES]
    moments.append(CancelAtPlace(CANCEL_PLACES[-1], after_s=0.3))
    for cancel in moments:
        req = _big(solver, 30.0)
        seen: list[Plan] = []
        try:
            result = plan(req, cancel=cancel, on_incumbent=seen.append)
        finally:
            if cancel.timer is not None:
                cancel.timer.cancel()
        where = (cancel.place, cancel.after_s)
        assert cancel.reached(), (f"{where}: the solve looked from {len(cancel.seen)} "
                                  f"places only (CANCEL_PLACES is too high)")
        assert time.monotonic() - cancel.set_at < 15, where
        assert validate_plan(req, result) == []
        assert result.assignments
        _check_label(result)
        assert any("cancelled" in note for note in result.explanation), where
        assert all(p.status in ("heuristic", "feasible") for p in seen)
        for p in seen:
            _check_label(p)
            assert validate_plan(req, p) == []
        if seen:  # none when the cancel came before the first plan was ready
            assert seen[0].status == "heuristic"
            assert result.objective_value >= max(p.objective_value for p in seen) - 1e-6


@pytest.mark.parametrize("solver", ["cp_sat", "auto", "milp"])
def test_the_starting_plan_is_reported_first(solver: str) -> None:
    """An async solve has a plan to store from the first phase on: the caller cancels
    as soon as it sees one, and gets back at least that plan."""
    req = _big(solver, 30.0)
    cancel = threading.Event()
    seen: list[Plan] = []

    def hook(p: Plan) -> None:
        seen.append(p)
        cancel.set()

    t0 = time.monotonic()
    result = plan(req, cancel=cancel, on_incumbent=hook)
    assert time.monotonic() - t0 < 20
    assert seen and seen[0].status == "heuristic"
    assert seen[0].solver.endswith("heuristic")
    assert validate_plan(req, result) == []
    assert result.objective_value >= seen[0].objective_value - 1e-6


def test_same_seed_same_proven_value() -> None:
    """With a seed and one thread but the wall clock deciding, two runs prove the same
    optimum (0.25 s of a 10 s limit, quiet); their placements may differ (docs/
    semantics.md: which starting plan CP-SAT is warm-started from depends on timing, and
    one of several optimal plans comes back; at load 8 one run in a few did). Identical
    plans are what deterministic mode promises, tested below."""
    req = generate_custom(64, 60, seed=5)
    req.policy.solver = "cp_sat"
    req.policy.threads = 1
    req.policy.seed = 7
    a = plan(req)
    b = plan(req)
    assert a.status == b.status == "optimal"
    assert a.objective_value == pytest.approx(b.objective_value, rel=1e-9)
    assert validate_plan(req, a) == [] and validate_plan(req, b) == []


def _without_time(p: Plan) -> bytes:
    """The plan's JSON bytes without `solve_time_s`, its only wall-clock field."""
    data = p.model_dump(mode="json")
    del data["solve_time_s"]
    return json.dumps(data, sort_keys=True).encode()


#: The deterministic-mode test's work rates are divided by this (CP-SAT's deterministic
#: time and the local search's moves per second of budget) and its limits multiplied by
#: it over three: a third of the work of the default rates at 10 s (about 0.75 CPU s a
#: run), with the wall clock's safety net 30 s away. At the default rates and 10 s, a
#: machine at load 10-16 reached the safety net and the test failed (the plans said so).
DET_SLACK = 9.0


@pytest.mark.parametrize(("solver", "limit"), [("auto", 10.0), ("cp_sat", 8.0)])
def test_deterministic_mode_gives_byte_identical_plans(solver: str, limit: float,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Work limits, not the wall clock, decide (`auto` here runs the local search, then
    CP-SAT on the pruned model, widened while it settles: `EXACT_VARS` is lowered so that
    128 GPUs / 150 jobs take that path, which otherwise needs about 256 / 300 and three
    times the CPU); the limit is generous enough that the wall clock's safety net does
    not cut a phase on a loaded machine (the plan would say so; `DET_SLACK`)."""
    import solver.budget as budget_mod
    import solver.exact as exact_mod

    if solver == "auto":
        monkeypatch.setattr(auto_policy, "EXACT_VARS", 1000)
    units = budget_mod.DET_UNITS_PER_S / DET_SLACK
    for module in (budget_mod, exact_mod):
        monkeypatch.setattr(module, "DET_UNITS_PER_S", units)
    monkeypatch.setattr(auto_policy, "MOVES_PER_S", budget_mod.MOVES_PER_S / DET_SLACK)
    limit *= DET_SLACK / 3
    req = generate_custom(128, 150, seed=11)
    req.policy.solver = solver  # type: ignore[assignment]
    req.policy.threads = 1
    req.policy.seed = 7
    req.policy.deterministic = True
    req.policy.time_limit_s = limit
    runs = [plan(req) for _ in range(3)]
    for p in runs:
        assert validate_plan(req, p) == []
        assert not any("may differ" in note for note in p.explanation), p.explanation
        if solver == "auto":   # the pruned path ran
            assert any("its 4 best targets" in note for note in p.explanation), p.explanation
    assert _without_time(runs[0]) == _without_time(runs[1]) == _without_time(runs[2])


def test_an_overrun_limit_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan returned past its limit (plus the allowance) says by how much and what
    finishing it cost; one within it says nothing of the kind. The allowance is moved
    below zero to make any solve an overrun, whatever the machine's speed."""
    import solver.driver as driver

    req = generate_custom(32, 40, seed=1)
    req.policy.time_limit_s = 5.0
    on_time = plan(req)
    assert not any("was overrun" in line for line in on_time.explanation)
    monkeypatch.setattr(driver, "OVERRUN_NOTE_S", -10.0)
    late = plan(req)
    assert not validate_plan(req, late)
    notes = [line for line in late.explanation if "was overrun" in line]
    assert len(notes) == 1
    assert "time limit of 5 s" in notes[0] and "40 jobs and 32 GPUs" in notes[0]


def test_a_cbc_started_after_the_deadline_is_killed_too(tmp_path: Path) -> None:
    """PuLP can still be writing the model when the deadline passes and start CBC after
    the first kill: that CBC is killed as soon as it starts, and the call returns."""
    cbc = tmp_path / "cbc"   # a process whose name is `cbc`, as PuLP's solver's is
    cbc.symlink_to(shutil.which("sleep") or "/bin/sleep")
    codes: list[int] = []

    def late_solve() -> None:
        time.sleep(0.5)   # past the deadline and the first kill
        codes.append(subprocess.run([str(cbc), "60"], check=False).returncode)

    t0 = time.monotonic()
    assert _run_with_deadline(late_solve, time.perf_counter() + 0.1, kill=True) is False
    assert time.monotonic() - t0 < 4.0   # not the CBC's 60 s, nor the 5 s wait
    assert codes == [-9]
