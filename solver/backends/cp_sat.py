"""The CP-SAT backend (OR-Tools): translate a LinearModel, solve, read back.

CP-SAT needs integer constraint coefficients: each row is scaled by the smallest power of
ten (up to 1e6) that makes it integral; rows that stay fractional (e.g. 2/7 for MIG sizes)
are scaled by 1e6 and rounded conservatively (coefficients up, bounds inwards), so every
solution CP-SAT returns satisfies the original row. The objective keeps float coefficients.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from threading import Event

from ortools.sat.python import cp_model, cp_model_helper

from solver.linear import (
    BuildTimeout,
    Limits,
    LinearModel,
    Solution,
    build_deadline,
    check_deadline,
)

_SCALES = (1, 10, 100, 1000, 10_000, 100_000, 1_000_000)

#: Above this many variables, presolve is kept short (see `CpSatBackend.solve`).
LARGE_MODEL_VARS = 5_000
#: CPU seconds per model term (constraint nonzero, objective term or variable) to build
#: the CP-SAT model in Python and presolve it, before the search can find anything: M's
#: pruned model (24,680 variables, 93,000 nonzeros) took 0.39 s to build and 0.50-0.53 s
#: to presolve (one or two workers; presolve runs on one), both in CPU seconds beside
#: other processes: 4.1 + 5.5 microseconds a nonzero. Presolve checks its clock only
#: between steps (one step took 0.4-0.7 s of wall time at load 10), so a search given less
#: than this returns nothing, late.
STARTUP_CPU_PER_TERM = 1e-5
#: How often (seconds) the watcher looks at the cancel flag and the deadline.
WATCH_POLL_S = 0.01
#: How often (rows) the model's build looks at its deadline (`build_deadline`).
BUILD_CHECK_ROWS = 256


def _integral(x: float, tol: float = 1e-9) -> bool:
    return abs(x - round(x)) <= tol * max(1.0, abs(x))


def scale_row(coefs: list[float], lo: float | None, hi: float | None
              ) -> tuple[list[int], int | None, int | None]:
    """Integer coefficients and bounds for lo <= sum c x <= hi, exact or conservative.

    Conservative rounding is only sound for variables >= 0, which all gpuplan variables are.
    """
    for s in _SCALES:
        vals = [c * s for c in coefs]
        bnds = [b * s for b in (lo, hi) if b is not None]
        if all(_integral(v) for v in vals) and all(_integral(b) for b in bnds):
            return ([round(v) for v in vals],
                    None if lo is None else round(lo * s),
                    None if hi is None else round(hi * s))
    s = _SCALES[-1]
    if lo is not None and hi is not None:
        # Two-sided fractional rows do not occur in gpuplan's formulation; round nearest.
        return [round(c * s) for c in coefs], math.ceil(lo * s - 1e-6), math.floor(hi * s + 1e-6)
    if hi is not None:
        # sum c x <= hi: rounding c up and hi down only shrinks the feasible set.
        return [math.ceil(c * s - 1e-6) for c in coefs], None, math.floor(hi * s + 1e-6)
    assert lo is not None
    # sum c x >= lo: rounding c down and lo up only shrinks the feasible set.
    return [math.floor(c * s + 1e-6) for c in coefs], math.ceil(lo * s - 1e-6), None


class _Incumbents(cp_model.CpSolverSolutionCallback):
    """Reports each improving solution (all variable values and the objective)."""

    def __init__(self, xs: list[cp_model.IntVar], report: Callable[[list[int], float], None]):
        super().__init__()
        self._xs = xs
        self._report = report

    def on_solution_callback(self) -> None:
        self._report([int(self.value(x)) for x in self._xs], float(self.objective_value))


def _configure(p: cp_model_helper.SatParameters, limits: Limits, n_vars: int,
               wall_s: float) -> None:
    """CP-SAT's parameters for `limits`: wall time (and the deterministic-time limit when
    one is given), workers, seed, gaps; short presolve on large models."""
    p.max_time_in_seconds = wall_s
    if limits.deterministic_time is not None:
        p.max_deterministic_time = max(0.001, limits.deterministic_time)
    p.num_workers = limits.threads or max(1, os.cpu_count() or 1)
    if limits.seed is not None:
        p.random_seed = limits.seed
    p.relative_gap_limit = limits.mip_gap
    if n_vars > LARGE_MODEL_VARS:
        # Large models: presolve once and skip probing, so that the warm start (the
        # heuristic plan as a complete hint) is the first incumbent within a second.
        p.max_presolve_iterations = 1
        p.cp_model_probing_level = 0
    p.absolute_gap_limit = 1e-6


def startup_prior(model: LinearModel) -> float:
    """CPU seconds to build `model` for CP-SAT and presolve it (`STARTUP_CPU_PER_TERM`)."""
    terms = sum(len(con.terms) for con in model.constraints)
    return STARTUP_CPU_PER_TERM * (terms + len(model.objective) + model.num_vars)


@contextmanager
def _watch(solver: cp_model.CpSolver, deadline: float, cancel: Event | None
           ) -> Iterator[None]:
    """While the block runs, stop `solver` as soon as `cancel` is set or the
    `time.monotonic()` `deadline` has passed. CP-SAT's own time limit is checked between
    presolve steps, which can run far past it (M: +0.5 s at 3 s beside busy processes);
    `stop_search` is seen within the step (0.03-0.07 s of CPU on M). It does nothing
    before the search has started, so it is repeated until the block ends: a stop while
    CP-SAT is still loading the model is not lost. The watcher waits on the block's end,
    so leaving the block does not wait for it."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            now = time.monotonic()
            if now >= deadline or (cancel is not None and cancel.is_set()):
                solver.stop_search()
                done.wait(WATCH_POLL_S)
            else:
                done.wait(min(WATCH_POLL_S, deadline - now))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


class CpSatBackend:
    """OR-Tools CP-SAT on the neutral model."""

    name = "cp_sat"

    def build(self, model: LinearModel) -> tuple[cp_model.CpModel, list[cp_model.IntVar]]:
        """The CP-SAT model and its variables, index-aligned with `model`; inside a
        `build_deadline` block, `BuildTimeout` past it (M's model takes 0.4 s of CPU to
        build, which a busy machine can stretch past the whole limit)."""
        m = cp_model.CpModel()
        xs = [m.new_int_var(lb, ub, name)
              for name, lb, ub in zip(model.names, model.lbs, model.ubs, strict=True)]
        for row, con in enumerate(model.constraints):
            if row % BUILD_CHECK_ROWS == 0:
                check_deadline()
            if not con.terms:
                m.add_bool_or([])  # an unsatisfiable empty row
                continue
            vars_ = list(con.terms)
            coefs, lo, hi = scale_row([con.terms[v] for v in vars_], con.lo, con.hi)
            expr = cp_model.LinearExpr.weighted_sum([xs[v] for v in vars_], coefs)
            if lo is not None and hi is not None:
                if lo == hi:
                    m.add(expr == lo)
                else:
                    m.add_linear_constraint(expr, lo, hi)
            elif lo is not None:
                m.add(expr >= lo)
            elif hi is not None:
                m.add(expr <= hi)
        if model.objective:
            vars_ = list(model.objective)
            m.maximize(cp_model.LinearExpr.weighted_sum(
                [xs[v] for v in vars_], [model.objective[v] for v in vars_]))
        for v, val in model.hints.items():
            m.add_hint(xs[v], val)
        return m, xs

    def solve(self, model: LinearModel, limits: Limits, *, cancel: Event | None = None,
              on_incumbent: Callable[[list[int], float], None] | None = None) -> Solution:
        """Solve with CP-SAT within `limits` (the model's build included); a `cancel` set
        at any moment stops it, and so does the wall limit, even inside presolve."""
        t0 = time.perf_counter()
        deadline = time.monotonic() + limits.time_limit_s
        size: dict[str, float | int | str] = {
            "vars": model.num_vars, "constraints": len(model.constraints)}
        try:
            with build_deadline(deadline):
                m, xs = self.build(model)
        except BuildTimeout:
            return Solution("unknown", wall_s=time.perf_counter() - t0, info=size)
        solver = cp_model.CpSolver()
        _configure(solver.parameters, limits, len(xs),
                   max(0.01, deadline - time.monotonic()))
        cb = None
        if on_incumbent is not None:
            def report(values: list[int], obj: float) -> None:
                on_incumbent(values, obj + model.objective_const)
            cb = _Incumbents(xs, report)
        if (cancel is not None and cancel.is_set()) or time.monotonic() >= deadline:
            return Solution("unknown", wall_s=time.perf_counter() - t0, info=size)
        with _watch(solver, deadline, cancel):
            status = solver.solve(m, cb)
        wall = time.perf_counter() - t0
        info: dict[str, float | int | str] = {
            "branches": int(solver.num_branches), "conflicts": int(solver.num_conflicts),
        } | size
        if limits.deterministic_time is not None:
            info["deterministic_time"] = round(float(solver.deterministic_time), 6)
        if status == cp_model.INFEASIBLE:
            return Solution("infeasible", wall_s=wall, info=info)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Solution("unknown", wall_s=wall, info=info)
        values = [int(solver.value(x)) for x in xs]
        const = model.objective_const
        obj = (solver.objective_value if model.objective else 0.0) + const
        bound = (solver.best_objective_bound if model.objective else 0.0) + const
        optimal = status == cp_model.OPTIMAL
        return Solution("optimal" if optimal else "feasible", values, obj,
                        max(bound, obj), wall, info)
