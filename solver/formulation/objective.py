"""The formulation's objective, written once.

    maximise   sum_x value(job(x), model(x)) * x                       (placements)
             + preemption_cost * (sum_r keep[r] + sum_r moved[r] - |R|)  (stops cost)
             - migration_cost * sum_r moved[r]                           (moves cost)

over every variable x that places a job on a model (keep[r] on r's current model, the
count and move variables on their target's, a gang's u[j, m] on m), where moved[r] sums
running job r's new placements: a running job stopped costs `preemption_cost`, one
moved costs `migration_cost`. value is the policy's per-job objective value (jct and
makespan), or the throughput value for throughput, fairness and priority_fifo (the
driver runs those two on top of this model with their own rows).

The same sum with throughput values is kept as `Compiled.throughput_terms`, and per
tenant as `Compiled.tenant_terms` (the fairness objective's shares).

Levels (contract 5.3 / 5.4) are not written into the objective: for a request with quotas
or several priority classes, `add_level_terms` splits the same coefficients by the class
of the job each variable belongs to (`class_terms[p]`, `class_const[p]`: the objective
over class p's jobs, its own costs included; `class_throughput`, `class_tenant_terms` with
throughput values) and sums the usage of every quota key,

    U[k, m] = sum_{x places a job j of k or of a descendant on a model counted by m}
              size(j, model(x)) * x,

as `quota_terms` (scaled by `quota_scale`); solver/levels.py solves the levels on them.
"""

from __future__ import annotations

import math

from models.rules import quota_keys, quota_usage
from solver.formulation.builder import Builder
from solver.linear import Terms

#: Resolution of the fairness objective's minimum share.
FAIRNESS_STEPS = 10_000


def add_objective(b: Builder) -> None:
    """Set the model's objective (module doc) from what each variable earns, and the
    throughput and per-tenant value terms."""
    pol = b.req.policy
    obj = b.m.objective
    thr = b.c.throughput_terms
    tenants = b.c.tenant_terms
    jobs = b.req.jobs
    for var, (j, model) in b.earnings.items():
        o = t = 0.0
        if j >= 0:
            job = jobs[j]
            value, throughput = b.values(job, model)
            o, t = o + value, t + throughput
            tt = tenants.setdefault(job.tenant, {})
            tt[var] = 0.0 + throughput
        if var in b.keeps:
            o, t = o + pol.preemption_cost, t + pol.preemption_cost
        if var in b.moved:
            o = o - pol.migration_cost + pol.preemption_cost
            t = t - pol.migration_cost + pol.preemption_cost
        obj[var] = o
        thr[var] = t
    for _ in b.running:
        b.m.objective_const -= pol.preemption_cost
        b.c.throughput_const -= pol.preemption_cost


def add_level_terms(b: Builder) -> None:
    """The per-class objective terms and the quota usage terms (module doc)."""
    jobs = b.req.jobs
    c = b.c
    owner: dict[int, int] = {v: r for r, vs in b.moves.items() for v in vs}
    for var, (j, _model) in b.earnings.items():
        if j >= 0:
            owner[var] = j
    thr = c.throughput_terms
    for var, coef in b.m.objective.items():
        p = jobs[owner[var]].priority
        c.class_terms.setdefault(p, {})[var] = coef
        c.class_throughput.setdefault(p, {})[var] = thr.get(var, 0.0)
    for tenant, terms in c.tenant_terms.items():
        for var, coef in terms.items():
            p = jobs[owner[var]].priority
            c.class_tenant_terms.setdefault(p, {}).setdefault(tenant, {})[var] = coef
    for p in {j.priority for j in jobs}:
        c.class_terms.setdefault(p, {})
        c.class_throughput.setdefault(p, {})
        c.class_const.setdefault(p, 0.0)
    for r in b.running:
        c.class_const[jobs[r].priority] -= b.req.policy.preemption_cost
    quotas = b.req.cluster.quotas
    if not quotas:
        return
    c.quota_scale = math.lcm(*{b.catalog[mg.model].compute_slices for mg in b.mig_gpus}) \
        if b.mig_gpus else 1
    usage: dict[tuple[str, str], Terms] = {(t, k): {} for t, q in quotas.items()
                                           for k in {*q.guaranteed, *q.limit}}
    for var, (j, model) in b.earnings.items():
        if j < 0:
            continue
        size = quota_usage(jobs[j], b.catalog[model]) * c.quota_scale
        for key in quota_keys(quotas, jobs[j].tenant, model):
            usage[key][var] = usage[key].get(var, 0.0) + size
    c.quota_terms = usage
