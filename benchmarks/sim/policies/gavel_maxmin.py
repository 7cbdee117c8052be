"""`gavel_maxmin`: heterogeneity-aware max-min fairness (Gavel, OSDI'20), rounded per round.

Pools p are (GPU model, MIG or not); capacity c_p = its GPUs. A job j needs s_j GPU
equivalents (gpus, share, or compute slices / 7) and may use pool p when the model is
eligible and the pool matches its shape. X[j, p] is the fraction of time j runs on p;
T[j, p] its throughput there (speed x s_j). Normalised throughput is
`sum_p T[j, p] X[j, p] / E_j` with E_j the throughput of an equal share of the cluster,
`E_j = sum_p T[j, p] c_p / C` (C = sum_p c_p), as Gavel's max_min_fairness normalises:

    LP1: maximise t   s.t.   sum_p T[j,p] X[j,p] / E_j >= t          for all j
                             sum_p X[j,p] <= 1                      for all j
                             sum_j s_j X[j,p] <= c_p                for all p,  X >= 0
    LP2: maximise sum_j sum_p T[j,p] X[j,p] / E_j  s.t. the same and every job >= t*

(LP2 spends the capacity LP1 leaves idle, as Gavel's water-filling variant does).
Rounding, Gavel's priority scheme: priority[j, p] = X[j, p] / (fraction of its life j has
run on p) (infinite when it never ran there); (job, pool) pairs are served by decreasing
priority, each job to at most one pool while the pool has capacity; a job staying on its
pool keeps its GPUs, the others are placed first fit there. Jobs dropped from the
allocation are preempted, which Gavel does every round (here each costs the restart
overhead). Solved with HiGHS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import highspy
import numpy as np

from benchmarks.sim.engine import Decision, JobRun, RoundView
from benchmarks.sim.occupancy import CapacityError
from benchmarks.sim.policies.base import fresh_occupancy
from models import GpuModel, speed
from models.rules import fits, model_eligible
from solver.quiet import new_highs

Pool = tuple[str, bool]


def _pools(view: RoundView) -> dict[Pool, float]:
    out: dict[Pool, float] = {}
    for g in view.occupancy.gpus.values():
        out[(g.model, g.mig)] = out.get((g.model, g.mig), 0.0) + 1.0
    return out


def _solve(c: np.ndarray, a_cols: list[list[tuple[int, float]]], row_lo: np.ndarray,
           row_hi: np.ndarray, col_lo: np.ndarray, col_hi: np.ndarray) -> np.ndarray | None:
    """Minimise c.x subject to row_lo <= A x <= row_hi, col_lo <= x <= col_hi (HiGHS)."""
    h = new_highs()
    h.setOptionValue("output_flag", False)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(c), len(row_lo)
    lp.col_cost_ = c
    lp.col_lower_ = col_lo
    lp.col_upper_ = col_hi
    lp.row_lower_, lp.row_upper_ = row_lo, row_hi
    starts, idx, val = [0], [], []
    for col in a_cols:
        for r, v in col:
            idx.append(r)
            val.append(v)
        starts.append(len(idx))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(idx, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(val, dtype=float)
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return np.array(h.getSolution().col_value)


def max_min_allocation(jobs: list[JobRun], pools: dict[Pool, float],
                       catalog: Mapping[str, GpuModel]) -> dict[tuple[str, Pool], float]:
    """X[j, p] of LP1 then LP2 (see the module doc); empty when there is no job."""
    plist = list(pools)
    total = sum(pools.values())
    pairs: list[tuple[int, int, float]] = []  # (job, pool, T / E)
    for ji, r in enumerate(jobs):
        mig = r.job.shape == "mig"
        tp = {pi: speed(r.job, m, catalog) * r.size for pi, (m, pm) in enumerate(plist)
              if pm == mig and model_eligible(r.job, m, catalog[m])}
        tp = {pi: v for pi, v in tp.items() if v > 0}
        e = sum(v * pools[plist[pi]] / total for pi, v in tp.items())
        pairs.extend((ji, pi, v / e) for pi, v in tp.items() if e > 0)
    if not pairs:
        return {}
    n, npools = len(jobs), len(plist)
    # Rows: [0, n) per-job time <= 1; [n, n+P) pool capacity; [n+P, 2n+P) t <= norm tput.
    cols: list[list[tuple[int, float]]] = []
    for ji, pi, v in pairs:
        cols.append([(ji, 1.0), (n + pi, jobs[ji].size), (n + npools + ji, v)])
    t_col = [(n + npools + ji, -1.0) for ji in range(n)]
    inf = highspy.kHighsInf
    row_lo = np.concatenate([np.full(n + npools, -inf), np.zeros(n)])
    row_hi = np.concatenate([np.ones(n), np.array([pools[p] for p in plist]),
                             np.full(n, inf)])
    nv = len(pairs)
    c1 = np.zeros(nv + 1)
    c1[-1] = -1.0
    col_hi = np.append(np.ones(nv), inf)
    x = _solve(c1, [*cols, t_col], row_lo, row_hi, np.zeros(nv + 1), col_hi)
    if x is None:
        return {}
    # LP2: the same rows with t >= t* (slightly relaxed), maximising total normalised
    # throughput.
    c2 = np.append(-np.array([v for _, _, v in pairs]), 0.0)
    col_lo = np.zeros(nv + 1)
    col_lo[-1] = x[-1] * (1 - 1e-6)
    x2 = _solve(c2, [*cols, t_col], row_lo, row_hi, col_lo, col_hi)
    if x2 is not None:
        x = x2
    return {(jobs[ji].name, plist[pi]): float(x[k]) for k, (ji, pi, _) in enumerate(pairs)
            if x[k] > 1e-7}


@dataclass
class GavelMaxMin:
    """Gavel's heterogeneity-aware max-min fairness with its round-based priorities."""

    name: str = "gavel_maxmin"

    def schedule(self, view: RoundView) -> Decision:
        """Solve the LP, rank (job, pool) pairs by priority, keep or place."""
        jobs = view.active
        pools = _pools(view)
        catalog = view.occupancy.catalog
        x = max_min_allocation(jobs, pools, catalog)
        by_name = {r.name: r for r in jobs}
        prio: list[tuple[float, str, Pool]] = []
        for (name, pool), v in x.items():
            r = by_name[name]
            life = max(view.now - r.submit, 1.0)
            got = r.service.get(pool[0], 0.0) / life
            prio.append((v / got if got > 0 else math.inf * v, name, pool))
        prio.sort(key=lambda e: (-e[0], by_name[e[1]].submit, e[1]))
        free = dict(pools)
        chosen: dict[str, Pool] = {}
        for _, name, pool in prio:
            r = by_name[name]
            if name in chosen or not fits(r.size, free[pool]):
                continue
            chosen[name] = pool
            free[pool] -= r.size
        occ = fresh_occupancy(view)
        decision: Decision = {}
        order = sorted(chosen, key=lambda n: (by_name[n].placements is None,
                                              by_name[n].submit, n))
        for name in order:
            r, pool = by_name[name], chosen[name]
            if r.placements is not None and _on_pool(r, view, pool):
                try:
                    occ.add(r.job, r.placements)
                    decision[name] = list(r.placements)
                    continue
                except CapacityError:
                    pass
            pl = occ.find(r.job, [pool[0]])
            if pl is not None and view.occupancy.gpus[(pl[0].node, pl[0].gpu)].mig == pool[1]:
                occ.add(r.job, pl)
                decision[name] = pl
        return decision


def _on_pool(r: JobRun, view: RoundView, pool: Pool) -> bool:
    if r.placements is None:
        return False
    g = view.occupancy.gpus[(r.placements[0].node, r.placements[0].gpu)]
    return (g.model, g.mig) == pool
