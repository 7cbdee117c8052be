"""The formulation's objective, written once.

    maximise   sum_x value(job(x), model(x)) * x                       (placements)
             + preemption_cost * (sum_r keep[r] + sum_r moved[r] - |R|)  (stops cost)
             - migration_cost * sum_r moved[r]                           (moves cost)

over every variable x that places a job on a model (keep[r] on r's current model, the
count and move variables on their target's, a fixed gang's u[j, m] on m, an elastic
gang's z[j, m, n] on n GPUs of m, valued weight * speedup[n] * speed(m)), where moved[r] sums
running job r's new placements: a running job stopped costs `preemption_cost`, one
moved costs `migration_cost`. value is the policy's per-job objective value (jct and
makespan), or the throughput value for throughput, fairness and priority_fifo (the
driver runs those two on top of this model with their own rows).

The same sum with throughput values is kept as `Compiled.throughput_terms`, and per
tenant as `Compiled.tenant_terms` (the fairness objective's shares).
"""

from __future__ import annotations

from solver.formulation.builder import Builder

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
            value, throughput = b.values(job, model, b.earn_sizes.get(var))
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
