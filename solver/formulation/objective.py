"""The formulation's objective, written once.

    maximise   sum_x value(job(x), model(x)) * x                       (placements)
             + preemption_cost * (sum_r keep[r] + sum_r moved[r] - |R|)  (stops cost)
             - migration_cost * sum_r moved[r]                           (moves cost)
             - topology_cost * (sum_j (sum_D s[j, D] - new[j])          (topology costs)
                                + sum_r spans(r) keep[r])

over every variable x that places a job on a model (keep[r] on r's current model, the
count and move variables on their target's, a fixed gang's u[j, m] on m, an elastic
gang's z[j, m, n] on n GPUs of m, valued weight * speedup[n] * speed(m)), where moved[r] sums
running job r's new placements: a running job stopped costs `preemption_cost`, one
moved costs `migration_cost`, a gang pays `topology_cost` per domain beyond the first
that it uses at its preferred level (s[j, D], contract 5.5), a kept running job for the
domains beyond the first that its current placement spans there (spans(r)). value is
the policy's per-job objective value (jct and makespan), or the throughput value for
throughput, fairness and priority_fifo (the driver runs those two on top of this model
with their own rows).

Co-location interference (contract 5.2) adds its corrections, (F - 1) times the values
of the jobs a pattern variable or a split variable stands for (variables.py:
new_pattern_vars), so a shared job earns F times its value in total.

The same sum with throughput values is kept as `Compiled.throughput_terms`, and per
tenant as `Compiled.tenant_terms` (the fairness objective's shares).
"""

from __future__ import annotations

from models.rules import preferred_level, topology_cost
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
    for var, scaled in b.scaled.items():
        # Co-location corrections (contract 5.2): scale times the jobs' values.
        for j, model, scale in scaled:
            job = jobs[j]
            value, throughput = b.values(job, model)
            obj[var] = obj.get(var, 0.0) + value * scale
            thr[var] = thr.get(var, 0.0) + throughput * scale
            tt = tenants.setdefault(job.tenant, {})
            tt[var] = tt.get(var, 0.0) + throughput * scale
    for _ in b.running:
        b.m.objective_const -= pol.preemption_cost
        b.c.throughput_const -= pol.preemption_cost
    add_topology_costs(b)


def add_topology_costs(b: Builder) -> None:
    """The topology costs (module doc) in the objective and the throughput terms: the
    `topology_use` ledger, and each kept running job's current spans."""
    cost = b.req.policy.topology_cost
    use = dict(b.topology_use)
    for r, k in b.c.keep.items():
        job = b.req.jobs[r]
        if preferred_level(job) is not None and job.current:
            spans = topology_cost(job, {p.node for p in job.current}, b.topology(), 1.0)
            if spans:
                use[k] = use.get(k, 0.0) + spans
    for var, units in use.items():
        b.m.objective[var] = b.m.objective.get(var, 0.0) - cost * units
        b.c.throughput_terms[var] = b.c.throughput_terms.get(var, 0.0) - cost * units
