"""The formulation's variables, one `new_*` function per family (notation: package doc).

Each function creates its family's variables, lists them in the variable tables of
`Compiled`, charges them to the usage ledgers and records what they earn (builder.py).
Rows are added later, by constraints.py. With pruning on, `Builder.limit` decides which
targets get a variable at all.
"""

from __future__ import annotations

import math
from collections import defaultdict

from models import allowed_sizes, mig_profiles_for
from models.capacity import HOST
from models.rules import costed_level, required_levels
from solver.formulation.builder import Builder
from solver.formulation.patterns import MAX_MODEL_PATTERNS, PatternsTooMany, bin_patterns
from solver.formulation.tables import (
    Bin,
    BinPattern,
    ClassedShare,
    Gang,
    GangPart,
    Group,
    GroupOnBin,
    GroupOnMig,
    GroupOnPool,
    GroupRank,
    PatternShare,
    RunningOnBin,
    RunningOnMig,
    RunningOnPool,
)
from solver.linear import ModelTooLarge, Terms, add_terms


def single_node_whole(gpus: int | None, single_node: bool) -> bool:
    """Whether a whole-GPU job fits one node by construction (one GPU, or single_node)."""
    return single_node or (gpus or 1) == 1


def new_layout_vars(b: Builder) -> None:
    """v[g, i] in {0, 1}: instance position i (profile, start) is in MIG GPU g's final
    layout; only on usable GPUs when the policy allows reconfiguration (else the current
    layout stays)."""
    if not b.req.policy.allow_mig_reconfiguration:
        return
    for mg in b.mig_gpus:
        if mg.usable:
            mg.pos_vars = {p: b.m.new_var(f"v[{mg.node}/{mg.gpu},{p.profile}@{p.start}]")
                           for p in mg.positions}


def new_keep_vars(b: Builder) -> None:
    """keep[r] in {0, 1}: running job r stays exactly where it runs (fixed to 1 when it is
    not preemptible). It earns its value on its current model and holds its host share,
    and its MIG instances."""
    jobs = b.req.jobs
    for r in b.running:
        job = jobs[r]
        k = b.m.new_var(f"keep[{job.name}]")
        b.c.keep[r] = k
        if not job.preemptible:
            b.m.fix(k, 1)
        cur = job.current or []
        b.earn(k, r, b.model_of(cur[0].node, cur[0].gpu))
        b.earn_keep(k)
        per_node: dict[str, int] = defaultdict(int)
        for p in cur:
            per_node[p.node] += 1
        for node, cnt in per_node.items():
            b.charge_host(node, k, job, cnt / len(cur) if job.shape == "whole" else 1.0)
        for p in cur:
            if p.mig is not None:
                b.charge(b.mig_use, (b.mig_index[(p.node, p.gpu)], p.mig.profile), k, 1.0)
        b.c.placed_terms[r] = {k: 1.0}


def new_bin_vars(b: Builder) -> None:
    """open[b] in {0, 1}: GPU b is in share mode. Concrete bins are the GPUs that host
    shared jobs now (their kept jobs charged to them); virtual bins, per pool, as many as
    its free usable GPUs or its possible shared jobs, whichever is fewer."""
    jobs = b.req.jobs
    bins = b.c.bins
    for key, pool in b.pools.items():
        for gpu in sorted(pool.share_occ):
            o = b.m.new_var(f"open[{key},{gpu}]")
            b.bin_of_gpu[(pool.node, gpu)] = len(bins)
            bins.append(Bin(key, gpu, o, gpu in pool.usable))
            for r in pool.share_occ[gpu]:
                k = b.c.keep[r]
                cur = (jobs[r].current or [])[0]
                b.bin_share[len(bins) - 1][k] = cur.fraction or 0.0
                b.bin_mem[len(bins) - 1][k] = jobs[r].gpu_memory_gib or 0.0
    share_groups = [g for g in b.c.groups if g.shape == "share"]
    run_share = [jobs[r] for r in b.running if jobs[r].shape == "share" and
                 jobs[r].preemptible]
    for key, pool in b.pools.items():
        free = sum(1 for g in pool.usable if g not in pool.share_occ)
        if free <= 0:
            continue
        demand = sum(len(g.members) for g in share_groups
                     if b.eligible(jobs[g.members[0]], pool.model)
                     and b.host_fits(pool.node, jobs[g.members[0]]))
        demand += sum(1 for j in run_share if b.eligible(j, pool.model))
        for k in range(min(free, demand)):
            bins.append(Bin(key, None, b.m.new_var(f"vopen[{key},{k}]"), True))


def new_group_vars(b: Builder, gi: int) -> None:
    """The variables of group `gi`, by its shape; `group_terms[gi]` counts its members
    placed."""
    grp = b.c.groups[gi]
    for rank, j in enumerate(grp.members):
        b.c.group_of[j] = GroupRank(gi, rank)
    b.c.group_terms[gi] = {}
    job = b.req.jobs[grp.members[0]]
    if grp.shape == "whole" and job.elastic is None \
            and single_node_whole(job.gpus, job.single_node):
        new_whole_group_vars(b, gi, grp)
    elif grp.shape == "whole":
        for j in grp.members:
            gang = new_gang_vars(b, j)
            add_terms(b.c.group_terms[gi], {gang.new: 1.0})
    elif grp.shape == "share":
        new_share_group_vars(b, gi, grp)
    else:
        new_mig_group_vars(b, gi, grp)


def new_whole_group_vars(b: Builder, gi: int, grp: Group) -> None:
    """c[G, p] in [0, min(|G|, |U_p| // g)]: members of G placed as g-GPU gangs in pool p
    (single-node gangs)."""
    job = b.req.jobs[grp.members[0]]
    g = job.gpus or 1
    cands = [(key, pool) for key, pool in b.pools.items()
             if len(pool.usable) // g >= 1 and b.eligible(job, pool.model)
             and b.host_fits(pool.node, job)]
    needed = 2 * math.ceil(len(grp.members) * g / 8)
    for key, pool in b.limit(job, cands, lambda x: x[1].model, lambda x: x[1].node,
                             needed):
        cap = len(pool.usable) // g
        v = b.m.new_var(f"c[{gi},{key}]", 0, min(len(grp.members), cap))
        b.charge(b.pool_use, key, v, float(g))
        b.earn(v, grp.members[0], pool.model)
        b.charge_host(pool.node, v, job, 1.0)
        b.c.whole.append(GroupOnPool(v, gi, key))
        add_terms(b.c.group_terms[gi], {v: 1.0})


def new_gang_vars(b: Builder, j: int) -> Gang:
    """A gang that may span nodes, or an elastic gang: new[j] in {0, 1}, u[j, m] in {0, 1}
    per eligible model, its topology variables (`new_gang_topology_vars`; a single-node
    elastic gang's node is its required "host" domain), y[j, p] in [0, min(g, |U_p|)] GPUs
    per pool (g: the largest allowed size; with pruning, an elastic gang's pools are
    limited like a group's). The model variables earn the gang's value; an elastic gang's
    size variables (`new_elastic_size_vars`) earn it instead."""
    job = b.req.jobs[j]
    g = max(allowed_sizes(job)) if job.elastic is not None else job.gpus or 1
    gang = Gang(b.m.new_var(f"new[{job.name}]"))
    b.c.gangs[j] = gang
    pools = [(key, p) for key, p in b.pools.items()
             if p.usable and b.eligible(job, p.model)]
    if job.elastic is not None:
        # elastic gangs are pruned like the groups (fixed gangs keep every pool, as in v1)
        pools = b.limit(job, pools, lambda x: x[1].model, lambda x: x[1].node,
                        2 * math.ceil(g / 8))
    models = sorted({p.model for _, p in pools})
    gang.models = {m: b.m.new_var(f"u[{job.name},{m}]") for m in models}
    new_gang_topology_vars(b, j, gang, sorted({p.node for _, p in pools}))
    for key, p in pools:
        y = b.m.new_var(f"y[{job.name},{key}]", 0, min(g, len(p.usable)))
        b.charge(b.pool_use, key, y, 1.0)
        # host request per `gpus` GPUs, pro rata (an elastic gang on n needs n / gpus)
        b.charge_host(p.node, y, job, 1.0 / (job.gpus or 1))
        gang.parts.append(GangPart(y, key))
    if job.elastic is not None:
        new_elastic_size_vars(b, j, gang)
        return gang
    for m, v in gang.models.items():
        b.earn(v, j, m)
    return gang


def new_elastic_size_vars(b: Builder, j: int, gang: Gang) -> None:
    """z[j, m, n] in {0, 1} per eligible model m and allowed size n of elastic gang j: it
    runs on n GPUs of m, and earns weight * speedup[n] * speed(m).

    Why one binary per (model, size): the value is a product of the model's speed and
    the size's speedup, and the time-based objectives divide by the remaining time on n
    GPUs, so neither is linear in an integer size; a binary per pair prices every pair
    exactly for any curve (concave or not, with gaps between the allowed sizes), costs
    only |models| x |sizes| binaries per gang (curves list a handful of sizes), and its
    LP relaxation stays as tight as the fixed gang's (a fixed gang is the case of one
    size). The gang's GPU count is sum_{m, n} n z[j, m, n] (`add_gang_size`)."""
    job = b.req.jobs[j]
    for m in gang.models:
        for n in allowed_sizes(job):
            z = b.m.new_var(f"z[{job.name},{m},{n}]")
            gang.sizes[(m, n)] = z
            b.earn_size(z, j, m, n)


def level_tag(level: str) -> str:
    """The level's part of a variable or row name: none for v1's level "domain" (its
    names stay v1's), `level:` otherwise."""
    return "" if level == "domain" else f"{level}:"


def new_gang_topology_vars(b: Builder, j: int, gang: Gang, nodes: list[str]) -> None:
    """d[j, L, D] in {0, 1} per required topology level L of gang j and domain D of L
    holding one of its `nodes` (v1's same_domain is L = "domain", named d[j, D]): the gang
    runs in D. s[j, D] in {0, 1} per domain D of its costed preferred level
    (`models.rules.costed_level`): the gang uses D; sum_D s[j, D] - new[j] domains beyond
    the first are charged to `topology_use`."""
    job = b.req.jobs[j]
    topo = b.topology()
    levels = (HOST,) if job.elastic is not None and job.single_node else required_levels(job)
    for level in levels:
        doms = sorted(topo.domains(nodes, level))
        gang.required[level] = {dm: b.m.new_var(f"d[{job.name},{level_tag(level)}{dm}]")
                                for dm in doms}
    costed = costed_level(job, topo, b.req.policy.topology_cost)
    if costed is None:
        return
    gang.span_level = costed
    gang.spans = {dm: b.m.new_var(f"s[{job.name},{costed}:{dm}]")
                  for dm in sorted(topo.domains(nodes, costed))}
    for v in gang.spans.values():
        b.topology_use[v] = 1.0
    b.topology_use[gang.new] = b.topology_use.get(gang.new, 0.0) - 1.0


def new_share_group_vars(b: Builder, gi: int, grp: Group) -> None:
    """a[G, b] in [0, min(|G|, what fits b by fraction and GPU memory)]: members of G
    sharing bin b."""
    job = b.req.jobs[grp.members[0]]
    f = job.gpu_share or 1.0
    # jobs of this group that fit one GPU by fraction (never more than the group has)
    per_bin = len(grp.members) if f * len(grp.members) <= 1.0 \
        else math.floor(1.0 / f + 1e-9)
    mem_cap: dict[str, int] = {}
    for bi, bin_ in b.limit(job, b.bins_for(job), lambda x: x[1].pool[1],
                            lambda x: x[1].pool[0], 2 * len(grp.members)):
        model = bin_.pool[1]
        if model not in mem_cap:
            mem = b.catalog[model].memory_gib
            need = job.gpu_memory_gib or 0.0
            mem_cap[model] = per_bin if not need or mem is None \
                or need * per_bin <= mem else math.floor(mem / need + 1e-9)
        ub = min(len(grp.members), mem_cap[model])
        if ub < 1:
            continue
        v = b.m.new_var(f"a[{gi},{bi}]", 0, ub)
        b.charge_bin(bi, v, job)
        b.earn(v, grp.members[0], model)
        b.charge_host(bin_.pool[0], v, job, 1.0)
        b.c.share.append(GroupOnBin(v, gi, bi))
        add_terms(b.c.group_terms[gi], {v: 1.0})


def new_mig_group_vars(b: Builder, gi: int, grp: Group) -> None:
    """m[G, g, pi] in [0, min(|G|, instances of pi g can hold)]: members of G on instances
    of profile pi of MIG GPU g, for each profile that covers the job."""
    job = b.req.jobs[grp.members[0]]
    gpus = [(mg_i, mg) for mg_i, mg in enumerate(b.mig_gpus)
            if mg.usable and b.eligible(job, mg.model) and b.host_fits(mg.node, job)]
    for mg_i, mg in b.limit(job, gpus, lambda x: x[1].model, lambda x: x[1].node,
                            2 * len(grp.members)):
        for prof in mig_profiles_for(job, b.catalog[mg.model]):
            cap_t, cap_c = b.mig_count(mg_i, prof.name)
            cap = prof.max_count if cap_t else int(cap_c)
            if cap < 1:
                continue
            v = b.m.new_var(f"m[{gi},{mg.node}/{mg.gpu},{prof.name}]", 0,
                            min(len(grp.members), cap))
            b.charge(b.mig_use, (mg_i, prof.name), v, 1.0)
            b.earn(v, grp.members[0], mg.model)
            b.charge_host(mg.node, v, job, 1.0)
            b.c.mig.append(GroupOnMig(v, gi, mg_i, prof.name))
            add_terms(b.c.group_terms[gi], {v: 1.0})


def new_move_vars(b: Builder, r: int) -> None:
    """The new placements of preemptible running job r (its migration options), by shape:
    mv[r, p], a gang's variables, ms[r, b] or mm[r, g, pi], each in {0, 1}. They earn the
    job's value on their model; `moves[r]` lists them (a gang: its `new[r]`)."""
    job = b.req.jobs[r]
    if not job.preemptible:
        return
    if job.shape == "whole" and job.elastic is None \
            and single_node_whole(job.gpus, job.single_node):
        new_vars = _whole_moves(b, r)
    elif job.shape == "whole":
        new_vars = [new_gang_vars(b, r).new]
    elif job.shape == "share":
        new_vars = _share_moves(b, r)
    else:
        new_vars = _mig_moves(b, r)
    b.moves[r] = new_vars
    for v in new_vars:
        b.earn_move(v)
    placed: Terms = {b.c.keep[r]: 1.0, **dict.fromkeys(new_vars, 1.0)}
    b.c.placed_terms[r] = placed


def _whole_moves(b: Builder, r: int) -> list[int]:
    """mv[r, p]: running single-node gang r moves to pool p."""
    job = b.req.jobs[r]
    g = job.gpus or 1
    cands = [(key, pool) for key, pool in b.pools.items()
             if (len(pool.usable) >= g and b.eligible(job, pool.model)
                 and b.host_fits(pool.node, job))]
    out: list[int] = []
    for key, pool in b.limit(job, cands, lambda x: x[1].model, lambda x: x[1].node, 1):
        v = b.m.new_var(f"mv[{job.name},{key}]")
        b.charge(b.pool_use, key, v, float(g))
        b.earn(v, r, pool.model)
        b.charge_host(pool.node, v, job, 1.0)
        b.c.whole_running.append(RunningOnPool(v, r, key))
        out.append(v)
    return out


def _share_moves(b: Builder, r: int) -> list[int]:
    """ms[r, b]: running shared job r moves to bin b (any but its own GPU)."""
    job = b.req.jobs[r]
    own = (job.current or [])[0]
    bins = [(bi, x) for bi, x in b.bins_for(job)
            if not (x.gpu == own.gpu and x.pool[0] == own.node)]
    out: list[int] = []
    for bi, bin_ in b.limit(job, bins, lambda x: x[1].pool[1], lambda x: x[1].pool[0], 1):
        v = b.m.new_var(f"ms[{job.name},{bi}]")
        b.charge_bin(bi, v, job)
        b.earn(v, r, bin_.pool[1])
        b.charge_host(bin_.pool[0], v, job, 1.0)
        b.c.share_running.append(RunningOnBin(v, r, bi))
        out.append(v)
    return out


def _mig_moves(b: Builder, r: int) -> list[int]:
    """mm[r, g, pi]: running MIG job r moves to an instance of profile pi of GPU g."""
    job = b.req.jobs[r]
    gpus = [(mg_i, mg) for mg_i, mg in enumerate(b.mig_gpus)
            if mg.usable and b.eligible(job, mg.model) and b.host_fits(mg.node, job)]
    out: list[int] = []
    for mg_i, mg in b.limit(job, gpus, lambda x: x[1].model, lambda x: x[1].node, 1):
        for prof in mig_profiles_for(job, b.catalog[mg.model]):
            cap_t, cap_c = b.mig_count(mg_i, prof.name)
            if not cap_t and cap_c < 1:
                continue
            v = b.m.new_var(f"mm[{job.name},{mg.node}/{mg.gpu},{prof.name}]")
            b.charge(b.mig_use, (mg_i, prof.name), v, 1.0)
            b.earn(v, r, mg.model)
            b.charge_host(mg.node, v, job, 1.0)
            b.c.mig_running.append(RunningOnMig(v, r, mg_i, prof.name))
            out.append(v)
    return out


def new_pattern_vars(b: Builder) -> None:
    """Co-location interference (contract 5.2; patterns.py says why patterns), on each bin
    where some co-location changes a value: p[b, n] in {0, 1} per pattern n of the bin's
    classes; and, for a class c whose jobs on b are not all worth the same, s[x, n] in
    [0, min(ub(x), n_c)] per classed share variable x of class c and pattern n with
    n_c > 0: x's jobs on b when b has pattern n (x = sum_n s[x, n]). The corrections they
    earn, on top of the plain values that the share variables earn:

        (F_c(n) - 1) * n_c * value_c   on p[b, n], when class c's jobs on b are all worth
                                       value_c (and share a tenant);
        (F_c(n) - 1) * value(x)        on s[x, n] otherwise.
    """
    if not b.interference:
        return
    for bi, xs, patterns in _bin_patterns(b):
        model = b.c.bins[bi].pool[1]
        by_cls: dict[str, list[ClassedShare]] = defaultdict(list)
        for x in xs:
            by_cls[x.cls].append(x)
        uniform = {c: _uniform_job(b, members, model) for c, members in by_cls.items()}
        for counts, factors in patterns:
            label = ",".join(f"{c}:{n}" for c, n in counts)
            p = b.m.new_var(f"pat[{bi},{label}]")
            b.c.patterns.append(BinPattern(p, bi, counts))
            for c, n in counts:
                f = factors[c]
                rep = uniform[c]
                if rep is not None:
                    if f != 1.0:
                        b.earn_scaled(p, rep, model, (f - 1.0) * n)
                    continue
                for x in by_cls[c]:
                    sv = b.m.new_var(f"pshare[{x.var},{p}]", 0, min(b.m.ubs[x.var], n))
                    b.c.pattern_shares.append(PatternShare(sv, x.var, p))
                    if f != 1.0:
                        b.earn_scaled(sv, x.job, model, f - 1.0)


def _bin_patterns(b: Builder) -> list[tuple[int, list[ClassedShare], list[tuple[
        tuple[tuple[str, int], ...], dict[str, float]]]]]:
    """Per bin that needs them, its classed share variables and its co-location patterns
    (identical demands share one enumeration), all listed before any variable is made:
    past `MAX_MODEL_PATTERNS` patterns, or when the pattern variables would take the
    model past its `max_vars`, the model is refused here, in the time of the enumeration
    alone, rather than after building thousands of variables that CP-SAT would not get
    through in a short time limit."""
    jobs = b.req.jobs
    seen: dict[tuple[tuple[str, tuple[int, float]], ...], list[tuple[
        tuple[tuple[str, int], ...], dict[str, float]]] | None] = {}
    out = []
    total = 0
    for bi, xs in _classed_shares(b).items():
        demand: dict[str, tuple[int, float]] = {}
        for x in xs:
            n, share = demand.get(x.cls, (0, 1.0))
            demand[x.cls] = (n + b.m.ubs[x.var], min(share, jobs[x.job].gpu_share or 1.0))
        key = tuple(sorted(demand.items()))
        if key not in seen:
            seen[key] = bin_patterns(demand, b.interference)
        patterns = seen[key]
        if patterns is None:
            continue
        total += len(patterns)
        if total > MAX_MODEL_PATTERNS:
            raise PatternsTooMany(f"more than {MAX_MODEL_PATTERNS} co-location patterns")
        if b.m.max_vars is not None and b.m.num_vars + total > b.m.max_vars:
            raise ModelTooLarge(f"more than {b.m.max_vars} variables")
        out.append((bi, xs, patterns))
    return out


def _classed_shares(b: Builder) -> dict[int, list[ClassedShare]]:
    """Per bin, its share variables whose jobs have a class that some interference pair
    names (`Compiled.classed` lists them all)."""
    jobs = b.req.jobs
    relevant = {c for pair in b.interference for c in pair}
    found: list[tuple[int, int, int]] = [
        (x.var, x.bin, b.c.groups[x.group].members[0]) for x in b.c.share]
    found += [(x.var, x.bin, x.job) for x in b.c.share_running]
    for bi, bin_ in enumerate(b.c.bins):
        if bin_.gpu is not None:
            found += [(b.c.keep[r], bi, r) for r in b.pools[bin_.pool].share_occ[bin_.gpu]]
    out: dict[int, list[ClassedShare]] = defaultdict(list)
    for var, bi, j in found:
        cls = jobs[j].colocation_class
        if cls is not None and cls in relevant:
            x = ClassedShare(var, bi, cls, j)
            out[bi].append(x)
            b.c.classed.append(x)
    return out


def _uniform_job(b: Builder, xs: list[ClassedShare], model: str) -> int | None:
    """A job standing for all of `xs` when their jobs are worth the same on `model` (both
    values) and share a tenant; None otherwise."""
    jobs = b.req.jobs
    first = jobs[xs[0].job]
    want = (b.values(first, model), first.tenant)
    if all((b.values(jobs[x.job], model), jobs[x.job].tenant) == want for x in xs[1:]):
        return xs[0].job
    return None
