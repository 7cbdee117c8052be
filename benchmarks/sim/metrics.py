"""The figures of a simulation run.

- JCT: completion - submission, per job; queueing delay: first start - submission.
- makespan: last completion - first submission.
- utilization: time-average of allocated GPUs / all GPUs over [first arrival, last
  completion] (MIG GPUs count their busy compute slices, shared GPUs their fractions;
  a GPU held during a restart or reconfiguration counts as allocated); `util_busy` is the
  same average restricted to the times when at least one job waits (how well a policy
  uses the cluster when there is work for it: a faster placement finishes sooner and
  so lowers the first figure); `gpu_hours` is the allocated GPU-time itself
  (utilization x GPUs x makespan): the same trace needs fewer GPU-hours on faster GPUs.
- `work_per_gpu_hour`: the work done (sum of work_j x size_j, in reference-GPU-hours:
  one hour of a job's own demand at relative speed 1.0) per allocated GPU-hour. Allocated
  GPU-time over capacity alone rewards running jobs on slow GPUs; this figure says how
  much of the allocation turned into progress (higher = faster GPUs, fewer stalls).
- ideal JCT: every job alone on its fastest eligible GPUs from its arrival, never
  queued, never restarted: `work_j / max speed over the cluster's eligible GPUs` (an
  elastic gang also at its fastest allowed size that the cluster holds, `gang_factor`). No
  policy can beat it on any job, so `avg_jct_s / ideal_avg_jct_s` (`jct_over_ideal`,
  >= 1) says how far a policy is from the physical limit of the cluster and trace.
- finish-time fairness (Themis, NSDI'20): rho_j = JCT_j / T_iso_j, where T_iso_j is the
  job's run time alone on an exclusive, average slice of the hardware it may use:
  `work_j / mean speed over the cluster's eligible GPUs`. rho < 1 means the job did better
  than that fair share; we report the mean and the max (Themis minimises the max).
- planner time per round: wall seconds of `policy.schedule`, p50 and p99.

Per tenant (`tenant_figures`, for a cluster with `Cluster.quotas`; guarantee G_k on the
`"*"` key), from the state after each round (`TenantRound`: usage u_k, pending demand p_k,
smallest waiting job s_k), valid until the next round:

- guaranteed share served: the mean, over the rounds where the tenant has demand
  (u_k + p_k > 0) and G_k > 0, of `min(u_k, G_k) / min(G_k, u_k + p_k)`: 1.0 when it holds
  all of its guarantee that its demand can use (a tenant asking for less than G_k is not
  counted as short of it);
- waiting below the guarantee while others borrow: a round where u_k < G_k, a waiting job
  of k would fit the rest of the guarantee (s_k <= G_k - u_k) and some other tenant j
  holds more than its own guarantee (u_j > G_j). `quota_wait_rounds` counts such rounds,
  `quota_wait_s` their seconds (until the next round), `quota_wait_streak` the longest
  run of consecutive ones and `quota_wait_longest_s` its seconds; reclaim works when the
  streak never exceeds 1 (a tenant gets its GPUs back at the next round at the latest).
  Rounds come every `round_s` and also at arrivals and completions that find a GPU idle
  and work waiting, so a streak of several rounds may last less than one `round_s`: the
  longest stretch in seconds says how long the wait really was, and
  `quota_wait_longest_rounds` says it in rounds of the policy's period (that stretch /
  `round_s`): the target "no tenant waits below its guarantee for more than one round
  while another borrows" holds when it is at most 1 for every tenant;
- JCT: the mean over the tenant's jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.sim.engine import JobRun, SimResult, TenantRound, gang_factor, job_units
from benchmarks.sim.tenants import guarantee
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Job, Quota, speed
from models.rules import HOST_TOL, allowed_sizes, model_eligible


def eligible_speeds(job: Job, cluster: Cluster) -> list[float]:
    """The job's speed on every eligible GPU of the cluster (MIG jobs: MIG GPUs only)."""
    catalog = cluster.catalog()
    mig = job.shape == "mig"
    speeds = [speed(job, g.model, catalog) for n in cluster.nodes for g in n.gpus
              if g.mig_enabled == mig and model_eligible(job, g.model, catalog[g.model])]
    return [s for s in speeds if s > 0]


def isolated_time(r: JobRun, cluster: Cluster) -> float:
    """T_iso: work / mean speed over the eligible GPUs of the cluster (see module doc)."""
    speeds = eligible_speeds(r.job, cluster)
    mean = sum(speeds) / len(speeds) if speeds else 1.0
    return r.trace.work / mean


def ideal_time(tj: TraceJob, cluster: Cluster) -> float:
    """The job's JCT alone on its fastest eligible GPUs: work / max eligible speed (and
    / the best `gang_factor` of an elastic gang over the sizes that fit the cluster)."""
    speeds = eligible_speeds(tj.job, cluster)
    total = sum(len(n.gpus) for n in cluster.nodes)
    factor = max((gang_factor(tj.job, n) for n in allowed_sizes(tj.job) if n <= total),
                 default=1.0) if tj.job.elastic is not None else 1.0
    return tj.work / (max(speeds) if speeds else 1.0) / factor


def ideal_avg_jct(trace: Sequence[TraceJob], cluster: Cluster) -> float:
    """The mean ideal JCT over `trace` (a lower bound on any policy's average JCT)."""
    return float(np.mean([ideal_time(tj, cluster) for tj in trace])) if trace else 0.0


def work_gpu_seconds(trace: Sequence[TraceJob], cluster: Cluster) -> float:
    """The trace's work in reference GPU-seconds: sum of work_j x size_j."""
    catalog = cluster.catalog()
    return float(sum(tj.work * job_units(tj.job, catalog) for tj in trace))


def _integral(times: np.ndarray, values: np.ndarray, end: float,
              mask: np.ndarray | None = None) -> tuple[float, float]:
    """(integral of a step function, measure of its support) on [times[0], end]."""
    if len(times) == 0:
        return 0.0, 0.0
    dt = np.diff(np.append(times, end)).clip(min=0)
    if mask is not None:
        dt = dt * mask
    return float((values * dt).sum()), float(dt.sum())


def _waits_below(k: str, rnd: TenantRound, quotas: Mapping[str, Quota]) -> bool:
    """Tenant k waits below its guarantee while another tenant borrows (module doc)."""
    g = guarantee(quotas, k)
    u = rnd.usage.get(k, 0.0)
    small = rnd.smallest.get(k)
    if small is None or u >= g - HOST_TOL or small > g - u + HOST_TOL:
        return False
    return any(v > guarantee(quotas, j) + HOST_TOL for j, v in rnd.usage.items() if j != k)


def tenant_figures(res: SimResult, quotas: Mapping[str, Quota],
                   end: float | None = None) -> dict[str, dict[str, float]]:
    """Per tenant: jobs, mean JCT, guarantee, guaranteed share served and the time it
    waited below its guarantee while others borrowed (module doc). `end` closes the last
    round (default: the last completion)."""
    rounds = res.tenant_rounds
    stop = end if end is not None else max((r.finish or 0.0 for r in res.jobs), default=0.0)
    names = sorted({r.job.tenant for r in res.jobs} | set(quotas))
    out: dict[str, dict[str, float]] = {}
    for k in names:
        g = guarantee(quotas, k)
        jct = [(r.finish or 0.0) - r.submit for r in res.jobs if r.job.tenant == k]
        shares: list[float] = []
        waits = streak = longest = 0
        wait_s = stretch = longest_s = 0.0
        for i, rnd in enumerate(rounds):
            u = rnd.usage.get(k, 0.0)
            want = u + rnd.pending.get(k, 0.0)
            if g > 0 and want > 0:
                shares.append(min(u, g) / min(g, want))
            if _waits_below(k, rnd, quotas):
                nxt = rounds[i + 1].t if i + 1 < len(rounds) else max(stop, rnd.t)
                waits += 1
                wait_s += nxt - rnd.t
                streak += 1
                stretch += nxt - rnd.t
                longest = max(longest, streak)
                longest_s = max(longest_s, stretch)
            else:
                streak = 0
                stretch = 0.0
        out[k] = {"jobs": float(len(jct)), "avg_jct_s": float(np.mean(jct)) if jct else 0.0,
                  "guaranteed": g,
                  "guar_served": float(np.mean(shares)) if shares else 1.0,
                  "quota_wait_rounds": float(waits), "quota_wait_s": wait_s,
                  "quota_wait_streak": float(longest), "quota_wait_longest_s": longest_s,
                  "quota_wait_longest_rounds": longest_s / res.round_s}
    return out


def tenant_summary(per_tenant: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The run-wide quota figures: waits summed, the longest streak (rounds and seconds),
    the served share's mean and minimum over tenants with a guarantee."""
    guarded = [f["guar_served"] for f in per_tenant.values() if f["guaranteed"] > 0]
    return {
        "quota_wait_rounds": sum(f["quota_wait_rounds"] for f in per_tenant.values()),
        "quota_wait_s": sum(f["quota_wait_s"] for f in per_tenant.values()),
        "quota_wait_streak": max((f["quota_wait_streak"] for f in per_tenant.values()),
                                 default=0.0),
        "quota_wait_longest_s": max((f["quota_wait_longest_s"] for f in per_tenant.values()),
                                    default=0.0),
        "quota_wait_longest_rounds": max(
            (f["quota_wait_longest_rounds"] for f in per_tenant.values()), default=0.0),
        "guar_served_avg": float(np.mean(guarded)) if guarded else 1.0,
        "guar_served_min": min(guarded, default=1.0),
    }


def summarize(res: SimResult, cluster: Cluster) -> dict[str, Any]:
    """All figures of one run as a flat dict (seconds, fractions, counts)."""
    jobs = res.jobs
    if not jobs:
        return {"policy": res.policy, "jobs": 0}
    jct = np.array([(r.finish or 0.0) - r.submit for r in jobs])
    queue = np.array([(r.first_start or 0.0) - r.submit for r in jobs])
    t0 = min(r.submit for r in jobs)
    end = max(r.finish or 0.0 for r in jobs)
    times = np.array([s.t for s in res.samples])
    alloc = np.array([s.allocated for s in res.samples])
    queued = np.array([s.queued for s in res.samples])
    used, span = _integral(times, alloc, end)
    used_busy, span_busy = _integral(times, alloc, end, mask=(queued > 0).astype(float))
    rho = jct / np.array([isolated_time(r, cluster) for r in jobs])
    ideal = ideal_avg_jct([r.trace for r in jobs], cluster)
    work = work_gpu_seconds([r.trace for r in jobs], cluster)
    rt = np.array(res.round_times) if res.round_times else np.zeros(1)
    return {
        "policy": res.policy,
        "jobs": len(jobs),
        "avg_jct_s": float(jct.mean()),
        "median_jct_s": float(np.median(jct)),
        "p95_jct_s": float(np.percentile(jct, 95)),
        "avg_queueing_s": float(queue.mean()),
        "makespan_s": float(end - t0),
        "utilization": used / (res.gpus_total * span) if span > 0 else 0.0,
        "gpu_hours": used / 3600.0,
        "util_busy": used_busy / (res.gpus_total * span_busy) if span_busy > 0 else 0.0,
        "work_per_gpu_hour": work / used if used > 0 else 0.0,
        "ideal_avg_jct_s": ideal,
        "jct_over_ideal": float(jct.mean()) / ideal if ideal > 0 else float("nan"),
        "ftf_rho_mean": float(rho.mean()),
        "ftf_rho_max": float(rho.max()),
        "preemptions": sum(r.preemptions for r in jobs),
        "migrations": sum(r.migrations for r in jobs),
        "resizes": sum(r.resizes for r in jobs),
        "mig_reconfigurations": res.reconfigurations,
        "rounds": res.rounds,
        "planner_p50_s": float(np.percentile(rt, 50)),
        "planner_p99_s": float(np.percentile(rt, 99)),
        "planner_max_s": float(rt.max()),
        "wall_s": res.wall_s,
        **_quota_figures(res, cluster, end),
    }


def _quota_figures(res: SimResult, cluster: Cluster, end: float) -> dict[str, Any]:
    """The tenant figures of a run on a cluster with quotas (none without)."""
    if not cluster.quotas:
        return {}
    per = tenant_figures(res, cluster.quotas, end)
    return {**tenant_summary(per), "tenants": per}


def series(res: SimResult) -> dict[str, list[float]]:
    """The time series behind the plots: t, allocated GPUs, queue length, running jobs."""
    return {"t": [s.t for s in res.samples],
            "allocated": [s.allocated for s in res.samples],
            "queued": [float(s.queued) for s in res.samples],
            "running": [float(s.running) for s in res.samples]}


def jcts(res: SimResult) -> list[float]:
    """Every job's JCT (s), in trace order."""
    return [(r.finish or 0.0) - r.submit for r in res.jobs]


def relative(summaries: Mapping[str, Mapping[str, Any]], base: str,
             key: str = "avg_jct_s") -> dict[str, float]:
    """`key` of every policy relative to `base` (e.g. 0.7 = 30% lower)."""
    b = summaries[base][key]
    return {p: (s[key] / b if b else float("nan")) for p, s in summaries.items()}
