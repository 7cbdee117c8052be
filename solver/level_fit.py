"""Serving the guarantees to the last fraction of a GPU (contract 5.3's first level): a
small integer program over the fractional jobs of the tenants that share a limit with a
tenant below its guarantee.

Why the greedy steps miss it: when a parent's limit equals the sum of its children's
guarantees (M's `org-a`), every child must be served exactly its guarantee for all of them
to be served, and the children's usage is made of MIG slices (k/7 of a GPU) and shares
(0.05 to 0.6). The greedy and `heuristics.levels.reclaim_nodes` place whole jobs in one
order and end a few hundredths of a GPU off on several children (M: 1,629.857 of 1,630,
one child 0.05 above its guarantee, another 0.086 below); reaching the guarantees exactly
is a subset-sum over the children's small jobs, which no single exchange makes.

`fit_guarantees(request, result, deadline)`:

1. The scope: the tenants whose quota chains share a tenant with the chain of a tenant
   below one of its guarantees. The candidates: their placed jobs of one GPU or less
   (shares, MIG slices) that may move (`heuristics.levels.may_move`), each kept or taken
   out, and their unplaced ones of those shapes, each given a spot found for them one
   after the other beside the plan and each other, quota limits aside
   (`heuristics.levels.find_beside_limits`; a subset of a packing is a packing, so any
   choice of them fits the GPUs).
2. A HiGHS MIP with one 0/1 column per candidate, the usages counted exactly in units of
   1/Q of a GPU (Q the least common denominator of the sizes, the usages and the
   guarantees, at most MAX_SCALE; none: no fit): the served part s(t, k) of each
   guaranteed key, s <= guaranteed, s <= the usage of the jobs outside the candidates
   plus the chosen ones; each limit kept (at least the usage now). It maximises sum s
   (M: 0.03-0.06 s), then, holding that, each class's terms of the candidates from the
   highest class down (what each job adds to its class kept or placed, `Greedy.term`),
   each from a start that swaps left-out candidates back in for chosen ones of the same
   tenant, model and size of a lower class or worth less (`_polish`: every row keeps
   its value; HiGHS may only improve on that start), each class's columns then fixed as
   its solve chose them (on M the class-100 solve, cut at 0.9 s, reached 136.0 of the
   candidates' terms instead of 126.0, and its optimum 139.5 in 0.8 s instead of not at
   all in 1.2 s; with every solve run to optimality the fixing costs class 100 2.5 of
   1,175.5).
3. The choice is applied (jobs taken out first) and kept only when the guaranteed usage
   served rises and the plan ranks higher by `models.objective.level_key`, after
   `heuristics.levels.restore_displaced` (every answer passes it).

The MIP has a few hundred columns at M; the guarantee's solve and the lowest class's are
cut at FIT_TIME_S (what is left goes to the exchanges after the fit), each other class's
solve only at the deadline brought forward by the work after the solves (a higher class
takes what it needs before a lower one: on M the class-100 solve needs 0.8-1.2 s to
reach 139.5 of the candidates' terms, and cut at 0.5 s it had 126, the plan's class 100
then 1,164-1,166 against 1,178 before the fit), and each keeps the best choice found.
Lexicographic within these candidates only: whole-GPU jobs and moves to other spots are
not in it.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction
from typing import NamedTuple

import highspy
import numpy as np

from heuristics.greedy import Greedy
from heuristics.levels import find_beside_limits, may_move, placer_of, restore_displaced
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.instance import JobInfo
from models.objective import level_key
from models.rules import HOST_TOL, QuotaKey, guaranteed_served, quota_chain, quota_usage
from solver.highs import INF, SOLUTION_FEASIBLE, HighsLp, set_integral

#: the most time (s) the guarantee's solve gets, and candidate jobs at most
FIT_TIME_S = 0.5
FIT_MAX_JOBS = 600
#: the smallest unit (1/MAX_SCALE of a GPU) the sizes are counted in
MAX_SCALE = 10**5


def _scope(g: Greedy) -> set[str]:
    """The tenants sharing a quota chain tenant with a tenant below a guarantee."""
    st = g.state
    short = {t for t, q in st.quotas.items() for k, gv in q.guaranteed.items()
             if gv > 0 and st.quota_used.get((t, k), 0.0) < gv - HOST_TOL}
    if not short:
        return set()
    ancestors = {a for t in short for a in quota_chain(st.quotas, t)}
    return {t for t in st.quotas if ancestors & set(quota_chain(st.quotas, t))}


def _candidates(g: Greedy, scope: set[str]
                ) -> list[tuple[JobInfo, list[Placement], bool]]:
    """(job, its placements or spot, placed now) of step 1 (module doc)."""
    st = g.state
    out: list[tuple[JobInfo, list[Placement], bool]] = []
    full: set[tuple[object, ...]] = set()
    for info in g.infos:
        if info.job.tenant not in scope or info.shape == "whole" or len(out) >= FIT_MAX_JOBS:
            continue
        pl = st.placed.get(info.name)
        if pl:
            if may_move(g, info):
                out.append((info, pl, True))
        elif not info.pinned and info.values:
            shape = (info.shape, info.job.gpu_share, info.job.mig_profile, repr(info.job.mig),
                     info.gpu_mem, tuple(g.ranked_models(info)))
            spot = None if shape in full else find_beside_limits(g, info)
            if spot is None:
                full.add(shape)  # the GPUs only fill up: the same shape finds none either
            else:
                st.place(info, spot)  # beside the next ones' spots
                out.append((info, spot, False))
    for info, _, placed in out:
        if not placed:
            st.remove(info)
    return out


def _scale(values: list[float]) -> int | None:
    """The least Q (at most MAX_SCALE) making every value an integer multiple of 1/Q
    (within 1e-9 relative); None when there is none."""
    q = 1
    for v in values:
        f = Fraction(v).limit_denominator(MAX_SCALE)
        if abs(float(f) - v) > 1e-9 * (1.0 + abs(v)):
            return None
        q = math.lcm(q, f.denominator)
        if q > MAX_SCALE:
            return None
    return q


class _Row(NamedTuple):
    """One quota key in units of 1/Q of a GPU: the usage of the jobs outside the
    candidates, the most the key may use (None: no limit), the guarantee (0: none) and
    the candidates' usage on it (column, units)."""

    base: int
    most: int | None
    guaranteed: int
    cols: list[tuple[int, int]]


def _rows(g: Greedy, cands: list[tuple[JobInfo, list[Placement], bool]]) -> list[_Row] | None:
    """Step 2's rows (module doc); None when the sizes have no common unit of at least
    1/MAX_SCALE of a GPU."""
    st = g.state
    used = dict(st.quota_used)
    counts: list[list[tuple[QuotaKey, float]]] = []
    for info, pl, placed in cands:
        model = st.model_of(pl)
        size = quota_usage(info.job, st.catalog[model], len(pl))
        mine = [(key, size) for key in st.quota_keys(info.job.tenant, model)]
        counts.append(mine)
        if placed:
            for key, sz in mine:
                used[key] = used.get(key, 0.0) - sz
    keys = sorted((t, k) for t, q in st.quotas.items() for k in {*q.guaranteed, *q.limit})
    q = _scale([*(sz for ks in counts for _, sz in ks), *(used.get(k, 0.0) for k in keys),
                *(st.quotas[t].guaranteed.get(k, 0.0) for t, k in keys)])
    if q is None:
        return None
    cols: dict[QuotaKey, list[tuple[int, int]]] = {}
    for i, ks in enumerate(counts):
        for key, sz in ks:
            cols.setdefault(key, []).append((i, round(sz * q)))
    out = []
    for t, k in keys:
        quota, now = st.quotas[t], st.quota_used.get((t, k), 0.0)
        lim = quota.limit.get(k)
        most = None if lim is None else math.floor(
            max(lim, st.quota_fixed.get((t, k), 0.0), now) * q + 1e-6)
        out.append(_Row(round(used.get((t, k), 0.0) * q), most,
                        math.floor(quota.guaranteed.get(k, 0.0) * q + 1e-6), cols.get((t, k), [])))
    return out


def _highs(n: int, rows: list[_Row]) -> tuple[highspy.Highs, list[int]]:
    """The MIP of the rows: the candidates' 0/1 columns (0..n-1) and the served ones."""
    lp = HighsLp()
    for _ in range(n):
        lp.add_col(0.0, hi=1.0)
    served = []
    for r, row in enumerate(rows):
        if row.most is not None and row.cols:
            lp.add_row("limit", r, hi=row.most - row.base)
            for c, u in row.cols:
                lp.entry("limit", r, c, u)
        if row.guaranteed > 0:
            lp.add_row("usage", r, hi=row.base)
            served.append(lp.add_col(0.0, hi=row.guaranteed))
            lp.entry("usage", r, served[-1], 1.0)
            for c, u in row.cols:
                lp.entry("usage", r, c, -u)
    h = lp.to_highs()
    set_integral(h, list(range(lp.num_cols)))
    h.setOptionValue("mip_rel_gap", 0.0)
    return h, served


def _maximise(h: highspy.Highs, cols: list[int], coefs: list[float], start: list[float],
              stop: float, cap: float = FIT_TIME_S) -> list[float]:
    """max coefs . x[cols] from the solution `start` (which meets every row held so far)
    within the time left (at most `cap` s); the better of its solution and `start`, whose
    value is then held (less 1e-9 relative) for the next objective."""
    n = h.getNumCol()
    cost = np.zeros(n)
    cost[cols] = -np.array(coefs)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
    sol = highspy.HighsSolution()
    sol.col_value = list(start)
    sol.value_valid = True
    h.setSolution(sol)
    h.setOptionValue("time_limit", max(0.01, min(cap, stop - time.monotonic())))
    h.run()
    x = list(start)
    if h.getInfo().primal_solution_status == SOLUTION_FEASIBLE:
        got = list(h.getSolution().col_value)
        if np.dot(np.array(got)[cols], coefs) > np.dot(np.array(x)[cols], coefs):
            x = got
    value = float(np.dot(np.array(x)[cols], coefs))
    h.addRow(value - 1e-9 * (1.0 + abs(value)), INF, len(cols),
             np.array(cols, dtype=np.int32), np.array(coefs, dtype=np.float64))
    return x


def _polish(x: list[float], cands: list[tuple[JobInfo, list[Placement], bool]],
            same: list[tuple[object, ...]], terms: list[float], top: int) -> list[float]:
    """`x` with each left-out candidate swapped in for a chosen one of the same usage on
    the same keys (`same`: every row keeps its value) that is of a lower class, or of its
    class and worth less (`terms`), the highest class and worth first: a start for the
    class solves near the plan where the served guarantee allows. Candidates of classes
    above `top` (their columns fixed) stay as they are."""
    x = list(x)

    def rank(i: int) -> tuple[int, float]:
        return cands[i][0].job.priority, terms[i]

    order = sorted((i for i in range(len(cands)) if cands[i][0].job.priority <= top),
                   key=rank, reverse=True)
    chosen: dict[tuple[object, ...], list[int]] = {}
    for i in reversed(order):  # each pool lowest first
        if x[i] > 0.5:
            chosen.setdefault(same[i], []).append(i)
    for i in order:
        pool = chosen.get(same[i], [])
        if x[i] > 0.5 or not pool or rank(pool[0]) >= rank(i):
            continue
        k = pool.pop(0)
        x[i], x[k] = 1.0, 0.0
        pool.append(i)
        pool.sort(key=rank)
    return x


def fit_guarantees(request: PlanRequest, result: HeuristicResult,
                   deadline: float | None = None) -> HeuristicResult:
    """`result` with the guarantees served more exactly (module doc), until `deadline`
    (`time.monotonic()`); `result` itself when nothing better is found."""
    if not request.cluster.quotas:
        return result
    t0 = time.monotonic()
    stop = t0 + 10 * FIT_TIME_S if deadline is None else deadline
    g = placer_of(request, result)
    # what comes after the solves (a placer, the restore, two level keys): about twice
    # what building this placer took, counted three times (M under load had ended at the
    # limit with twice)
    stop -= 3 * (time.monotonic() - t0)
    st = g.state
    scope = _scope(g)
    if not scope:
        return result
    before = guaranteed_served(st.quotas, st.quota_used)
    cands = _candidates(g, scope)
    rows = None if not cands or time.monotonic() > stop else _rows(g, cands)
    if rows is None:
        return result
    h, served = _highs(len(cands), rows)
    x = _maximise(h, served, [1.0] * len(served), [0.0] * h.getNumCol(), stop)
    now = sum(min(r.base + sum(u for c, u in r.cols if cands[c][2]), r.guaranteed)
              for r in rows if r.guaranteed > 0)
    if sum(x[c] for c in served) <= now + 0.5:  # units: no more served
        return result
    terms = [g.term(info, pl) - g.term(info, None) for info, pl, _ in cands]
    same: list[tuple[object, ...]] = [
        (info.job.tenant, st.model_of(pl),
         quota_usage(info.job, st.catalog[st.model_of(pl)], len(pl))) for info, pl, _ in cands]
    classes = sorted({info.job.priority for info, _, _ in cands}, reverse=True)
    for p in classes:
        x[:len(cands)] = _polish(x[:len(cands)], cands, same, terms, p)
        cols = [i for i, (info, _, _) in enumerate(cands) if info.job.priority == p]
        if time.monotonic() < stop:
            x = _maximise(h, cols, [terms[i] for i in cols], x, stop,
                          cap=FIT_TIME_S if p == classes[-1] else math.inf)
        for i in cols:  # held as chosen: the lower classes' solves are smaller
            h.changeColBounds(i, round(x[i]), round(x[i]))
    return _apply(request, result, g, cands, [v > 0.5 for v in x[:len(cands)]], before)


def _apply(request: PlanRequest, result: HeuristicResult, g: Greedy,
           cands: list[tuple[JobInfo, list[Placement], bool]], keep: list[bool],
           before: float) -> HeuristicResult:
    """Step 3 (module doc)."""
    st = g.state
    for (info, _, placed), k in zip(cands, keep, strict=True):
        if placed and not k:
            st.remove(info)
            if not info.current:
                g.reasons[info.name] = ("lower_priority", "its quota went to the "
                                        "guaranteed quota of another tenant")
    for (info, pl, placed), k in zip(cands, keep, strict=True):
        if not placed and k and st.conflicts(info, pl) is None:
            st.place(info, pl)
            g.reasons.pop(info.name, None)
    if guaranteed_served(st.quotas, st.quota_used) <= before + HOST_TOL:
        return result
    out = restore_displaced(request, g.result())
    if level_key(request, out.placements) <= level_key(request, result.placements):
        return result
    return out
