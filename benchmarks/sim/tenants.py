"""Tenant quotas for a multi-tenant trace: guarantees proportional to demand.

`demand_quotas(trace, cluster, borrow_factor)` gives each tenant of the trace a quota on
the `"*"` key (all models; contract 5.3) of the cluster's whole-GPU capacity:

- demand of tenant k: `D_k = sum over its jobs of work_j * size_j` (GPU-seconds at speed
  1.0 over the replayed window);
- guarantee: `G_k = N * D_k / sum D`, N the non-MIG GPUs of the cluster, rounded to whole
  GPUs by the largest remainder (so the guarantees add up to exactly N, and a tenant whose
  share is below half a GPU or so may get 0: it only ever borrows);
- limit: none (`borrow_factor=None`: a tenant may borrow every idle GPU of the cohort,
  Kueue's ClusterQueue without a borrowingLimit), or
  `L_k = max(ceil(G_k * borrow_factor), largest job of k)` (the largest job is the floor
  so that every job of the trace can run at some time).

`limit_time(result, quotas)` tells, per tenant, how long it had work waiting and how
much of that time its quota limit held it (its smallest waiting job did not fit beside its
usage within the limit), or it was below its limit while GPUs stood idle: where a policy
within the limits has room to do better than another.

Every tenant shares one implicit cohort (no `parent`): what one does not use, the others
borrow. `with_quotas(cluster, quotas)` returns the cluster carrying them; the simulator's
requests to gpuplan then carry `Cluster.quotas` and each job's `tenant`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from benchmarks.sim.engine import SimResult, job_units
from benchmarks.sim.workloads.trace import TraceJob
from models import Cluster, Quota
from models.request import ANY_MODEL


def tenants(trace: Sequence[TraceJob]) -> list[str]:
    """The distinct tenants of a trace, sorted."""
    return sorted({tj.job.tenant for tj in trace})


def whole_gpus(cluster: Cluster) -> int:
    """The cluster's non-MIG GPUs (the capacity whole-GPU jobs share)."""
    return sum(1 for n in cluster.nodes for g in n.gpus if not g.mig_enabled)


def demands(trace: Sequence[TraceJob], cluster: Cluster) -> dict[str, float]:
    """GPU-seconds of work (at speed 1.0) per tenant: sum of work_j * size_j."""
    catalog = cluster.catalog()
    out: dict[str, float] = {}
    for tj in trace:
        t = tj.job.tenant
        out[t] = out.get(t, 0.0) + tj.work * job_units(tj.job, catalog)
    return out


def largest_remainder(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Integers proportional to `weights` that add up to `total` (Hamilton's method; ties
    of the remainder by name)."""
    s = sum(weights.values())
    if s <= 0 or total <= 0:
        return dict.fromkeys(weights, 0)
    exact = {k: total * w / s for k, w in weights.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def demand_quotas(trace: Sequence[TraceJob], cluster: Cluster,
                  borrow_factor: float | None = None) -> dict[str, Quota]:
    """Each tenant's quota: guarantee proportional to its demand, limit as the module doc."""
    guar = largest_remainder(whole_gpus(cluster), demands(trace, cluster))
    biggest: dict[str, int] = {}
    for tj in trace:
        biggest[tj.job.tenant] = max(biggest.get(tj.job.tenant, 0), tj.job.gpus or 1)
    out: dict[str, Quota] = {}
    for t, g in sorted(guar.items()):
        limit = ({} if borrow_factor is None
                 else {ANY_MODEL: float(max(math.ceil(g * borrow_factor), biggest[t], g))})
        out[t] = Quota(guaranteed={ANY_MODEL: float(g)}, limit=limit)
    return out


def with_quotas(cluster: Cluster, quotas: Mapping[str, Quota]) -> Cluster:
    """The cluster with `quotas` as its `Cluster.quotas`."""
    return cluster.model_copy(update={"quotas": dict(quotas)})


def guarantee(quotas: Mapping[str, Quota], tenant: str) -> float:
    """A tenant's guarantee on the `"*"` key (0 without a quota)."""
    q = quotas.get(tenant)
    return q.guaranteed.get(ANY_MODEL, 0.0) if q is not None else 0.0


def limit(quotas: Mapping[str, Quota], tenant: str) -> float:
    """A tenant's limit on the `"*"` key (inf when unlimited)."""
    q = quotas.get(tenant)
    return q.limit.get(ANY_MODEL, math.inf) if q is not None else math.inf


def limit_time(result: SimResult, quotas: Mapping[str, Quota], end: float | None = None
               ) -> dict[str, dict[str, float]]:
    """Per tenant with waiting work at some round, seconds from each round to the next
    (the last to `end`, by default the last completion): `waiting_s` with a job waiting,
    `at_limit_s` of those with its smallest waiting job beyond its limit beside its usage
    (`limit` on the `"*"` key), `below_idle_s` with it within the limit while at least as
    many GPU equivalents as it asks for stood idle (`result.gpus_total` less every
    tenant's usage)."""
    rounds = result.tenant_rounds
    stop = end if end is not None else max((r.finish or 0.0 for r in result.jobs),
                                           default=0.0)
    out: dict[str, dict[str, float]] = {}
    for k, rd in enumerate(rounds):
        span = (rounds[k + 1].t if k + 1 < len(rounds) else stop) - rd.t
        if span <= 0:
            continue
        idle = result.gpus_total - sum(rd.usage.values())
        for t, small in rd.smallest.items():
            fig = out.setdefault(t, {"waiting_s": 0.0, "at_limit_s": 0.0,
                                     "below_idle_s": 0.0})
            fig["waiting_s"] += span
            if rd.usage.get(t, 0.0) + small > limit(quotas, t) + 1e-9:
                fig["at_limit_s"] += span
            elif idle + 1e-9 >= small:
                fig["below_idle_s"] += span
    return out
