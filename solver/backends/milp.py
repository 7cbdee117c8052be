"""The MILP backend: the neutral model through PuLP, solved by CBC (default) or HiGHS.

PuLP reports `Optimal` for a MILP stopped by its time limit with an incumbent, so the status
is read from `sol_status` (integer-feasible vs optimal) and, for HiGHS, from the model
status itself. HiGHS reports its dual bound; for CBC a stopped search is bounded by the LP
relaxation (solved with HiGHS), which is weaker but always valid.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from threading import Event
from typing import Any, Literal

import highspy
import pulp

from solver.linear import Limits, LinearModel, Solution
from solver.quiet import new_highs, quiet_stdout

#: Seconds past its deadline after which a CBC solve is killed.
KILL_GRACE_S = 0.1
#: Seconds a killed solve's thread is waited for (its CBC killed again as often as it
#: starts one) before it is left to finish on its own.
KILL_WAIT_S = 5.0


def _cbc_children() -> list[int]:
    """PIDs of this process's `cbc` child processes (Linux /proc; empty elsewhere)."""
    pids: list[int] = []
    for f in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        try:
            pids += [int(p) for p in f.read_text().split()]
        except OSError:
            continue
    out = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "cbc":
                out.append(pid)
        except OSError:
            continue
    return out


def _run_with_deadline(fn: Callable[[], object], deadline: float, *, kill: bool,
                       cancel: Event | None = None) -> bool:
    """Run `fn` (a solve) in a thread; past `deadline` (+ `KILL_GRACE_S`), or as soon as
    `cancel` is set, kill the CBC child process, whose preprocessing does not always
    watch its own time limit. Returns False when the solve failed or had to be killed."""
    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            with quiet_stdout():
                fn()
        except BaseException as e:  # reported through `box`, re-raised below if unexpected
            box["error"] = e

    th = threading.Thread(target=target, daemon=True)
    th.start()
    stop_at = deadline + KILL_GRACE_S
    while th.is_alive() and time.perf_counter() < stop_at:
        if cancel is not None and kill and cancel.is_set():
            break
        th.join(min(0.05, max(0.0, stop_at - time.perf_counter())))
    if th.is_alive() and kill:
        # PuLP may still be writing the model when the deadline passes and start CBC
        # after the first kill: keep killing what it starts until the thread gives up
        give_up = time.perf_counter() + KILL_WAIT_S
        while th.is_alive() and time.perf_counter() < give_up:
            for pid in _cbc_children():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            th.join(0.02)
        return False
    th.join()
    err = box.get("error")
    if err is None:
        return True
    if isinstance(err, pulp.PulpSolverError):
        return False
    raise err


def _cbc(**kwargs: Any) -> Any:
    """CBC through COIN_CMD (the `cbc` binary of pulp[cbc]), or PuLP's bundled CBC."""
    coin = pulp.COIN_CMD(**kwargs)
    if coin.available():
        return coin
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # PuLP 3.3 deprecates it for 4.0
        return pulp.PULP_CBC_CMD(**kwargs)


def _build(model: LinearModel, relax: bool = False) -> tuple[pulp.LpProblem, list[Any]]:
    prob = pulp.LpProblem("gpuplan", pulp.LpMaximize)
    cat = pulp.LpContinuous if relax else pulp.LpInteger
    if hasattr(prob, "add_variable"):   # PuLP >= 3.3: variables belong to the problem
        xs = [prob.add_variable(f"x{i}", lb, ub, cat=cat)
              for i, (lb, ub) in enumerate(zip(model.lbs, model.ubs, strict=True))]
    else:
        xs = [pulp.LpVariable(f"x{i}", lowBound=lb, upBound=ub, cat=cat)
              for i, (lb, ub) in enumerate(zip(model.lbs, model.ubs, strict=True))]
    for k, con in enumerate(model.constraints):
        expr = pulp.lpSum(c * xs[v] for v, c in con.terms.items())
        if not con.terms:
            expr = pulp.LpAffineExpression()
        if con.lo is not None and con.hi is not None and con.lo == con.hi:
            prob += (expr == con.lo, f"c{k}")
            continue
        if con.lo is not None:
            prob += (expr >= con.lo, f"c{k}l")
        if con.hi is not None:
            prob += (expr <= con.hi, f"c{k}u")
    prob += pulp.lpSum(c * xs[v] for v, c in model.objective.items()) + model.objective_const
    return prob, xs


def _satisfies(model: LinearModel, values: list[int], tol: float = 1e-6) -> bool:
    """Whether integer `values` satisfy every row of `model`."""
    for con in model.constraints:
        act = sum(c * values[v] for v, c in con.terms.items())
        if con.lo is not None and act < con.lo - tol * max(1.0, abs(con.lo)):
            return False
        if con.hi is not None and act > con.hi + tol * max(1.0, abs(con.hi)):
            return False
    return True


def lp_relaxation_bound(model: LinearModel, time_limit_s: float = 5.0) -> float | None:
    """The LP relaxation's optimum (an upper bound on the model), via HiGHS; None if unknown."""
    h = new_highs()
    h.setOptionValue("time_limit", max(0.05, time_limit_s))
    inf = highspy.kHighsInf
    n = model.num_vars
    cost = [0.0] * n
    for v, c in model.objective.items():
        cost[v] = -c  # HiGHS minimises
    for i in range(n):
        h.addVar(float(model.lbs[i]), float(model.ubs[i]))
        if cost[i]:
            h.changeColCost(i, cost[i])
    for con in model.constraints:
        idx = list(con.terms)
        h.addRow(-inf if con.lo is None else con.lo, inf if con.hi is None else con.hi,
                 len(idx), idx, [con.terms[v] for v in idx])
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return -h.getInfo().objective_function_value + model.objective_const


class MilpBackend:
    """PuLP with CBC or HiGHS."""

    def __init__(self, engine: Literal["cbc", "highs"]):
        self.engine = engine
        self.name = f"milp/{engine}"

    def solve(self, model: LinearModel, limits: Limits, *, cancel: Event | None = None,
              on_incumbent: object = None) -> Solution:
        """Solve with CBC or HiGHS within `limits` (incumbent streaming is CP-SAT only;
        a cancel stops CBC at once, HiGHS at its time limit)."""
        t0 = time.perf_counter()
        if cancel is not None and cancel.is_set():
            return Solution("unknown", info={"engine": self.engine})
        prob, xs = _build(model)
        for v, val in model.hints.items():
            xs[v].setInitialValue(min(model.ubs[v], max(model.lbs[v], val)))
        built = time.perf_counter() - t0
        # Writing the model for the solver and reading its answer back cost about as much
        # as building it: keep that much of the budget for them.
        remaining = max(0.05, limits.time_limit_s - 2 * built - 0.05)
        threads = limits.threads or max(1, os.cpu_count() or 1)
        solver: Any
        if self.engine == "cbc":
            opts = [f"randomSeed {limits.seed}", f"randomCbcSeed {limits.seed}"] \
                if limits.seed is not None else []
            # CBC's clock starts after it has read the model: keep a margin for that.
            solver = _cbc(msg=False, timeLimit=max(0.1, remaining * 0.9 - 0.1),
                          gapRel=limits.mip_gap, threads=threads,
                          warmStart=bool(model.hints), options=opts)
        else:
            params: dict[str, Any] = {}
            if limits.seed is not None:
                params["random_seed"] = limits.seed
            solver = pulp.HiGHS(msg=False, timeLimit=remaining, gapRel=limits.mip_gap,
                                threads=threads, **params)
        deadline = t0 + limits.time_limit_s
        if not _run_with_deadline(lambda: prob.solve(solver), deadline,
                                  kill=self.engine == "cbc", cancel=cancel):
            return Solution("unknown", wall_s=time.perf_counter() - t0,
                            info={"engine": self.engine, "killed": 1})
        wall = time.perf_counter() - t0
        status = pulp.LpStatus[prob.status]
        info: dict[str, float | int | str] = {"engine": self.engine, "vars": len(xs),
                                              "constraints": len(model.constraints)}
        if status == "Infeasible":
            return Solution("infeasible", wall_s=wall, info=info)
        if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            return Solution("unknown", wall_s=wall, info=info)
        values = []
        for x, lb, ub in zip(xs, model.lbs, model.ubs, strict=True):
            v = x.varValue
            values.append(lb if v is None else min(ub, max(lb, round(v))))
        if not _satisfies(model, values):
            # CBC stopped by its time limit may hand back a point that is not an integer
            # solution (e.g. the root LP): treat it as no solution.
            return Solution("unknown", wall_s=wall, info=info)
        obj = sum(c * values[v] for v, c in model.objective.items()) + model.objective_const
        optimal = prob.sol_status == pulp.LpSolutionOptimal
        bound: float | None = None
        if self.engine == "highs":
            hm = getattr(solver, "solverModel", None) or getattr(prob, "solverModel", None)
            if hm is not None:
                hs = hm.getModelStatus()
                optimal = hs == highspy.HighsModelStatus.kOptimal
                dual = hm.getInfo().mip_dual_bound
                if math.isfinite(dual):
                    bound = dual
        if optimal:
            bound = obj if bound is None else max(bound, obj)
        elif bound is None:
            bound = lp_relaxation_bound(
                model, time_limit_s=min(1.0, max(0.05, deadline - time.perf_counter())))
        return Solution("optimal" if optimal else "feasible", values, obj,
                        None if bound is None else max(bound, obj), wall, info)
