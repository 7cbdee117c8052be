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

from models.rules import preferred_level, quota_keys, quota_usage, topology_cost
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


def add_level_terms(b: Builder) -> None:
    """The per-class objective terms and the quota usage terms (module doc). A variable's
    coefficient belongs to the class of the job it places (a gang's span variables to the
    gang, contract 5.5); a co-location correction (contract 5.2) is split over the jobs it
    scales, each part going to that job's class and tenant."""
    jobs = b.req.jobs
    c = b.c
    owner: dict[int, int] = {v: r for r, vs in b.moves.items() for v in vs}
    for var, (j, _model) in b.earnings.items():
        if j >= 0:
            owner[var] = j
    for j, gang in c.gangs.items():
        owner.setdefault(gang.new, j)
        for v in gang.spans.values():
            owner.setdefault(v, j)
    thr = c.throughput_terms
    scaled: dict[int, dict[int, tuple[float, float]]] = {}   # var -> job -> (obj, thr)
    for var, parts in b.scaled.items():
        for j, model, scale in parts:
            value, throughput = b.values(jobs[j], model)
            o, t = scaled.setdefault(var, {}).get(j, (0.0, 0.0))
            scaled[var][j] = (o + value * scale, t + throughput * scale)
    for var, coef in b.m.objective.items():
        rest_o, rest_t = coef, thr.get(var, 0.0)
        for j, (o, t) in scaled.get(var, {}).items():
            p = jobs[j].priority
            ct, cth = c.class_terms.setdefault(p, {}), c.class_throughput.setdefault(p, {})
            ct[var], cth[var] = ct.get(var, 0.0) + o, cth.get(var, 0.0) + t
            rest_o, rest_t = rest_o - o, rest_t - t
        if var in owner:
            p = jobs[owner[var]].priority
            ct, cth = c.class_terms.setdefault(p, {}), c.class_throughput.setdefault(p, {})
            ct[var], cth[var] = ct.get(var, 0.0) + rest_o, cth.get(var, 0.0) + rest_t
        elif abs(rest_o) > 1e-12 or abs(rest_t) > 1e-12:
            raise ValueError(f"objective variable {b.m.names[var]} places no job")
    for tenant, terms in c.tenant_terms.items():
        for var, coef in terms.items():
            rest = coef
            for j, (_o, t) in scaled.get(var, {}).items():
                if jobs[j].tenant == tenant:
                    tt = c.class_tenant_terms.setdefault(jobs[j].priority, {}).setdefault(
                        tenant, {})
                    tt[var] = tt.get(var, 0.0) + t
                    rest -= t
            if var in owner:
                tt = c.class_tenant_terms.setdefault(jobs[owner[var]].priority, {}).setdefault(
                    tenant, {})
                tt[var] = tt.get(var, 0.0) + rest
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
        size = quota_usage(jobs[j], b.catalog[model], b.earn_sizes.get(var)) * c.quota_scale
        for key in quota_keys(quotas, jobs[j].tenant, model):
            usage[key][var] = usage[key].get(var, 0.0) + size
    c.quota_terms = usage
