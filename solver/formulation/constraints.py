"""The formulation's constraints, one `add_*` function per row family (notation: package doc).

Each docstring states the family's rows as math; the row names (`slice[...]`, `pool[...]`,
...) are the family names, so a row of a solver's model can be traced back here. The
functions read the variable tables and the usage ledgers that variables.py filled, and
add rows only; compile.py calls them in a fixed order (the row order of the model).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from models import Instance, allowed_sizes
from solver.formulation.builder import Builder, profile_of
from solver.formulation.tables import (
    BinPattern,
    ClassedShare,
    MigGpu,
    PatternShare,
    Pool,
    PoolKey,
)
from solver.formulation.variables import level_tag
from solver.linear import Terms, add_terms

# ------------------------------------------------------------------- MIG layouts


def add_mig_slice_once(b: Builder, mg: MigGpu) -> None:
    """slice[g, k]: each memory slice k of MIG GPU g is in at most one instance:
    sum_{i covers k} v[g, i] <= 1."""
    assert mg.pos_vars is not None
    spec = b.catalog[mg.model]
    name = f"{mg.node}/{mg.gpu}"
    for k in range(spec.memory_slices):
        cover = [v for p, v in mg.pos_vars.items()
                 if p.start <= k < p.start + profile_of(spec, p.profile).memory_slices]
        b.m.add(dict.fromkeys(cover, 1.0), hi=1, name=f"slice[{name},{k}]")


def add_mig_compute(b: Builder, mg: MigGpu) -> None:
    """compute[g]: the instances of g use at most its compute slices:
    sum_i compute(i) v[g, i] <= C_g."""
    assert mg.pos_vars is not None
    spec = b.catalog[mg.model]
    b.m.add({v: profile_of(spec, p.profile).compute_slices for p, v in mg.pos_vars.items()},
            hi=spec.compute_slices, name=f"compute[{mg.node}/{mg.gpu}]")


def add_mig_profile_count(b: Builder, mg: MigGpu) -> None:
    """mig_count[g, pi]: at most max_count(pi) instances of each profile pi:
    sum_{i of pi} v[g, i] <= max_count(pi) (only where more positions exist)."""
    assert mg.pos_vars is not None
    for prof in b.catalog[mg.model].mig_profiles:
        vs = [v for p, v in mg.pos_vars.items() if p.profile == prof.name]
        if len(vs) > prof.max_count:
            b.m.add(dict.fromkeys(vs, 1.0), hi=prof.max_count,
                    name=f"mig_count[{mg.node}/{mg.gpu},{prof.name}]")


def add_mig_one_media(b: Builder, mg: MigGpu) -> None:
    """mig_media[g]: at most one instance with media extensions:
    sum_{i is +me} v[g, i] <= 1."""
    assert mg.pos_vars is not None
    spec = b.catalog[mg.model]
    me = [v for p, v in mg.pos_vars.items() if profile_of(spec, p.profile).media_extensions]
    if len(me) > 1:
        b.m.add(dict.fromkeys(me, 1.0), hi=1, name=f"mig_media[{mg.node}/{mg.gpu}]")


# ------------------------------------------------------------------ running jobs


def add_kept_instance_stays(b: Builder, r: int) -> None:
    """kept_inst[r, g]: a kept MIG job's instance stays in its GPU's layout:
    v[g, inst(r)] >= keep[r] (GPUs with a variable layout)."""
    job = b.req.jobs[r]
    k = b.c.keep[r]
    for p in job.current or []:
        if p.mig is None:
            continue
        mg = b.mig_gpus[b.mig_index[(p.node, p.gpu)]]
        if mg.pos_vars is not None:
            b.m.add({mg.pos_vars[p.mig.key()]: 1.0, k: -1.0}, lo=0,
                    name=f"kept_inst[{job.name},{p.node}/{p.gpu}]")


def add_instance_kept_once(b: Builder) -> None:
    """claim[g, i]: two running jobs cannot both keep MIG instance i of GPU g:
    sum_{r holds (g, i)} keep[r] <= 1."""
    claims: dict[tuple[int, Instance], Terms] = {}
    for r in b.running:
        for p in b.req.jobs[r].current or []:
            if p.mig is not None:
                inst = p.mig.key()
                claims.setdefault((b.mig_index[(p.node, p.gpu)], inst), {})[b.c.keep[r]] = 1.0
    for (mg_i, inst), terms in claims.items():
        if len(terms) > 1:
            mg = b.mig_gpus[mg_i]
            b.m.add(terms, hi=1,
                    name=f"claim[{mg.node}/{mg.gpu},{inst.profile}@{inst.start}]")


def add_keep_move_or_stop(b: Builder, r: int) -> None:
    """run[r]: a preemptible running job is kept, moved once or stopped:
    keep[r] + sum(new placements of r) <= 1, and == 1 when preemption is not allowed."""
    row = b.c.placed_terms[r]
    name = f"run[{b.req.jobs[r].name}]"
    if b.req.policy.allow_preemption:
        b.m.add(row, hi=1, name=name)
    else:
        b.m.add(row, lo=1, hi=1, name=name)


# ------------------------------------------------------------------ share bins


def add_kept_share_needs_bin(b: Builder, bi: int) -> None:
    """share_mode[r, b]: a kept shared job needs its GPU in share mode:
    keep[r] <= open[b] for each job r sharing concrete bin b now."""
    bin_ = b.c.bins[bi]
    assert bin_.gpu is not None
    for r in b.pools[bin_.pool].share_occ[bin_.gpu]:
        b.m.add({b.c.keep[r]: 1.0, bin_.open_var: -1.0}, hi=0,
                name=f"share_mode[{b.req.jobs[r].name},{bi}]")


def add_virtual_bins_in_order(b: Builder, key: PoolKey, opens: list[int]) -> None:
    """bin_order[p, k]: the virtual bins of pool p (their `opens`) open in order
    (symmetry): open[p, k] >= open[p, k + 1]."""
    for k, (first, second) in enumerate(itertools.pairwise(opens)):
        b.m.add({first: 1.0, second: -1.0}, lo=0, name=f"bin_order[{key},{k}]")


def virtual_bins(b: Builder) -> dict[PoolKey, list[int]]:
    """Per pool, the open variables of its virtual bins, in order."""
    out: dict[PoolKey, list[int]] = defaultdict(list)
    for x in b.c.bins:
        if x.gpu is None:
            out[x.pool].append(x.open_var)
    return out


# ------------------------------------------------------------------ groups, gangs


def add_group_size(b: Builder, gi: int) -> None:
    """group[G]: a group places at most its size: sum(count variables of G) <= |G|."""
    if b.c.group_terms[gi]:
        b.m.add(b.c.group_terms[gi], hi=len(b.c.groups[gi].members), name=f"group[{gi}]")


def add_gang(b: Builder, j: int) -> None:
    """The rows of gang j that may span nodes, in order: one model, one domain per required
    level, then per pool its model, domain and span links, then all or nothing."""
    add_gang_one_model(b, j)
    add_gang_one_domain(b, j)
    for y, key in b.c.gangs[j].parts:
        add_gang_model_link(b, j, y, key)
        add_gang_domain_link(b, j, y, key)
        add_gang_span_link(b, j, y, key)
    add_gang_all_or_nothing(b, j)
    if b.c.gangs[j].sizes:
        for m in b.c.gangs[j].models:
            add_gang_size(b, j, m)


def add_gang_size(b: Builder, j: int, m: str) -> None:
    """gang_size[j, m]: an elastic gang on model m runs at one allowed size:
    sum_n z[j, m, n] = u[j, m]."""
    gang = b.c.gangs[j]
    zs = {z: 1.0 for (model, _n), z in gang.sizes.items() if model == m}
    b.m.add({**zs, gang.models[m]: -1.0}, lo=0, hi=0,
            name=f"gang_size[{b.req.jobs[j].name},{m}]")


def add_gang_one_model(b: Builder, j: int) -> None:
    """gang_model[j]: one model: sum_m u[j, m] = new[j]."""
    gang = b.c.gangs[j]
    b.m.add({**dict.fromkeys(gang.models.values(), 1.0), gang.new: -1.0}, lo=0, hi=0,
            name=f"gang_model[{b.req.jobs[j].name}]")


def add_gang_one_domain(b: Builder, j: int) -> None:
    """gang_domain[j, L]: one domain of each required topology level L (v1's same_domain
    is L = "domain", row gang_domain[j]): sum_D d[j, L, D] = new[j]."""
    job = b.req.jobs[j]
    gang = b.c.gangs[j]
    for level, doms in gang.required.items():
        tag = "" if level == "domain" else f",{level}"
        b.m.add({**dict.fromkeys(doms.values(), 1.0), gang.new: -1.0}, lo=0, hi=0,
                name=f"gang_domain[{job.name}{tag}]")


def _part_cap(b: Builder, j: int, key: PoolKey) -> float:
    """The most GPUs gang j may take in pool `key`: min(g, |U_p|) (g: an elastic gang's
    largest allowed size)."""
    job = b.req.jobs[j]
    g = max(allowed_sizes(job)) if job.elastic is not None else job.gpus or 1
    return float(min(g, len(b.pools[key].usable)))


def add_gang_model_link(b: Builder, j: int, y: int, key: PoolKey) -> None:
    """gang_use_model[j, p]: GPUs only on the chosen model:
    y[j, p] <= min(g, |U_p|) * u[j, model(p)]."""
    u = b.c.gangs[j].models[b.pools[key].model]
    b.m.add({y: 1.0, u: -_part_cap(b, j, key)}, hi=0,
            name=f"gang_use_model[{b.req.jobs[j].name},{key}]")


def add_gang_domain_link(b: Builder, j: int, y: int, key: PoolKey) -> None:
    """gang_use_domain[j, L, p]: GPUs only in the chosen domain of each required level L
    (v1's same_domain: L = "domain", row gang_use_domain[j, p]):
    y[j, p] <= min(g, |U_p|) * d[j, L, domain_L(p)]."""
    job = b.req.jobs[j]
    node = b.pools[key].node
    for level, doms in b.c.gangs[j].required.items():
        d = doms[b.topology().domain(node, level)]
        b.m.add({y: 1.0, d: -_part_cap(b, j, key)}, hi=0,
                name=f"gang_use_domain[{job.name},{level_tag(level)}{key}]")


def add_gang_span_link(b: Builder, j: int, y: int, key: PoolKey) -> None:
    """gang_span[j, p]: GPUs only in domains the gang is charged for at its costed
    preferred level L: y[j, p] <= min(g, |U_p|) * s[j, domain_L(p)]."""
    gang = b.c.gangs[j]
    if gang.span_level is None:
        return
    s = gang.spans[b.topology().domain(b.pools[key].node, gang.span_level)]
    b.m.add({y: 1.0, s: -_part_cap(b, j, key)}, hi=0,
            name=f"gang_span[{b.req.jobs[j].name},{key}]")


def add_gang_all_or_nothing(b: Builder, j: int) -> None:
    """gang[j]: all of the gang or nothing: sum_p y[j, p] = g * new[j]; for an elastic
    gang, its chosen size: sum_p y[j, p] = sum_{m, n} n z[j, m, n]."""
    job = b.req.jobs[j]
    gang = b.c.gangs[j]
    ys = {y: 1.0 for y, _key in gang.parts}
    if gang.sizes:
        ys.update({z: -float(n) for (_m, n), z in gang.sizes.items()})
        b.m.add(ys, lo=0, hi=0, name=f"gang[{job.name}]")
        return
    b.m.add({**ys, gang.new: -float(job.gpus or 1)}, lo=0, hi=0, name=f"gang[{job.name}]")


def add_gang_priority(b: Builder, first: int, second: int) -> None:
    """gang_order[i, i']: identical gangs are placed in priority order:
    new[i] >= new[i'] for consecutive members i, i' of a group."""
    jobs = b.req.jobs
    b.m.add({b.c.gangs[first].new: 1.0, b.c.gangs[second].new: -1.0}, lo=0,
            name=f"gang_order[{jobs[first].name},{jobs[second].name}]")


# ------------------------------------------------------------------ capacity


def occupied_gpus(pool: Pool) -> set[int]:
    """The GPUs of `pool` that running jobs hold now (whole or shared)."""
    return set(pool.whole_occ) | set(pool.share_occ)


def _busy(b: Builder, pool: Pool, gpu: int) -> Terms:
    """What holds occupied GPU `gpu` in the plan: keep[r] of its whole jobs, open[b] of
    its bin."""
    busy: Terms = {}
    for r in pool.whole_occ.get(gpu, []):
        add_terms(busy, {b.c.keep[r]: 1.0})
    if gpu in pool.share_occ:
        add_terms(busy, {b.c.bins[b.bin_of_gpu[(pool.node, gpu)]].open_var: 1.0})
    return busy


def add_exclusive_gpu(b: Builder, key: PoolKey, gpu: int) -> None:
    """excl[p, gpu]: an occupied GPU hosts one kept whole job, or is in share mode, not
    both: sum_{r on gpu} keep[r] + open[b(gpu)] <= 1."""
    b.m.add(_busy(b, b.pools[key], gpu), hi=1, name=f"excl[{key},{gpu}]")


def add_pool_capacity(b: Builder, key: PoolKey, opens: list[int]) -> None:
    """pool[p]: whole GPUs of new placements + share-mode GPUs + busy GPUs fit the pool:
    sum g c[G,p] + sum y[j,p] + sum g mv[r,p] + sum_{virtual b of p} open[b]
    + sum_{usable occupied gpu} busy(gpu) <= |U_p|, `opens` being p's virtual bins."""
    pool = b.pools[key]
    use = dict(b.pool_use.get(key, {}))
    for o in opens:
        use[o] = use.get(o, 0.0) + 1.0
    for gpu in occupied_gpus(pool):
        if gpu in pool.usable:
            add_terms(use, _busy(b, pool, gpu))
    if use:
        b.m.add(use, hi=len(pool.usable), name=f"pool[{key}]")


def add_share_fraction(b: Builder, bi: int) -> None:
    """frac[b]: shared fractions on one GPU sum to at most 1, and only when it is in share
    mode: sum_j share(j) x[j, b] <= open[b]."""
    frac = dict(b.bin_share.get(bi, {}))
    if frac:
        b.m.add({**frac, b.c.bins[bi].open_var: -1.0}, hi=0, name=f"frac[{bi}]")


def add_share_memory(b: Builder, bi: int) -> None:
    """smem[b]: shared jobs' GPU memory on one GPU fits it:
    sum_j mem(j) x[j, b] <= M_model(b) * open[b]."""
    bin_ = b.c.bins[bi]
    mem = dict(b.bin_mem.get(bi, {}))
    cap = b.catalog[bin_.pool[1]].memory_gib
    if mem and cap is not None:
        b.m.add({**mem, bin_.open_var: -cap}, hi=0, name=f"smem[{bi}]")


def add_mig_instances(b: Builder, mg_i: int, profile: str) -> None:
    """mig_use[g, pi]: jobs on profile pi of GPU g fit the instances of pi in g's final
    layout: sum keep/m/mm on (g, pi) <= sum_{i of pi} v[g, i] (or the current count)."""
    cap_t, cap_c = b.mig_count(mg_i, profile)
    mg = b.mig_gpus[mg_i]
    b.m.add({**b.mig_use[(mg_i, profile)], **{v: -c for v, c in cap_t.items()}}, hi=cap_c,
            name=f"mig_use[{mg.node}/{mg.gpu},{profile}]")


def add_host_cpu(b: Builder, node: str) -> None:
    """cpu[n]: host CPU requested on node n fits it: sum cpu(j) x <= CPU_n."""
    cap = b.nodes[node].cpu_millicores
    row = b.host_cpu[node]
    if cap is not None and row:
        b.m.add(row, hi=cap, name=f"cpu[{node}]")


def add_host_memory(b: Builder, node: str) -> None:
    """mem[n]: host memory requested on node n fits it: sum mem(j) x <= MEM_n."""
    cap = b.nodes[node].memory_gib
    row = b.host_mem[node]
    if cap is not None and row:
        b.m.add(row, hi=cap, name=f"mem[{node}]")


# ------------------------------------------------------------------ symmetry


def add_node_symmetry(b: Builder, first: str, second: str, load: dict[str, Terms]) -> None:
    """sym_node[n, n']: identical clean nodes are used in order of load:
    load(n) >= load(n'), load = GPUs taken + share-mode GPUs + MIG compute in use."""
    row = dict(load.get(first, {}))
    add_terms(row, load.get(second, {}), -1.0)
    b.m.add(row, lo=0, name=f"sym_node[{first},{second}]")


def add_mig_gpu_symmetry(b: Builder, first: int, second: int,
                         mig_load: dict[int, Terms]) -> None:
    """sym_mig[g, g']: identical clean MIG GPUs of a node are used in order of compute:
    sum_i compute(i) / C v[g, i] >= the same for g'."""
    row = dict(mig_load[first])
    add_terms(row, mig_load[second], -1.0)
    a, c = b.mig_gpus[first], b.mig_gpus[second]
    b.m.add(row, lo=0, name=f"sym_mig[{a.node}/{a.gpu},{c.gpu}]")


def symmetry_loads(b: Builder) -> tuple[dict[str, Terms], dict[int, Terms]]:
    """Per node, the load terms `add_node_symmetry` orders (GPUs of its pools in use,
    its virtual bins opened, its MIG compute in use); per MIG GPU, its compute in use."""
    load: dict[str, Terms] = defaultdict(dict)
    for key, use in b.pool_use.items():
        add_terms(load[key[0]], use)
    for x in b.c.bins:
        if x.gpu is None:
            add_terms(load[x.pool[0]], {x.open_var: 1.0})
    mig_load: dict[int, Terms] = {}
    for mg_i, mg in enumerate(b.mig_gpus):
        if mg.pos_vars is None:
            continue
        spec = b.catalog[mg.model]
        t = {v: profile_of(spec, p.profile).compute_slices / spec.compute_slices
             for p, v in mg.pos_vars.items()}
        mig_load[mg_i] = t
        add_terms(load[mg.node], t)
    return load, mig_load


def _occupied_nodes(b: Builder) -> set[str]:
    """Nodes where something runs now or a MIG GPU has instances."""
    occupied = {p.node for p in b.pools.values() if p.whole_occ or p.share_occ}
    occupied |= {mg.node for mg in b.mig_gpus if mg.current}
    for job in b.req.jobs:
        for p in job.current or []:
            occupied.add(p.node)
    return occupied


def symmetric_nodes(b: Builder) -> list[list[str]]:
    """Classes of identical clean nodes (same GPUs, host capacity and domain; schedulable,
    all GPUs healthy, nothing running, no MIG instance), in cluster order."""
    occupied = _occupied_nodes(b)
    classes: dict[tuple[object, ...], list[str]] = defaultdict(list)
    for node in b.req.cluster.nodes:
        if node.name in occupied or not node.schedulable:
            continue
        if not all(g.healthy for g in node.gpus):
            continue
        ckey = (tuple((g.model, g.mig_enabled) for g in sorted(node.gpus,
                                                               key=lambda g: g.index)),
                node.cpu_millicores, node.memory_gib, node.topology_domain,
                tuple(sorted(node.topology.items())))
        classes[ckey].append(node.name)
    return list(classes.values())


def symmetric_mig_gpus(b: Builder) -> list[list[int]]:
    """Per (node, model), the clean MIG GPUs with a variable layout on a node where
    nothing runs and no MIG GPU has instances."""
    occupied = _occupied_nodes(b)
    by_node: dict[tuple[str, str], list[int]] = defaultdict(list)
    for mg_i, mg in enumerate(b.mig_gpus):
        if mg.pos_vars is not None and not mg.current and mg.node not in occupied:
            by_node[(mg.node, mg.model)].append(mg_i)
    return list(by_node.values())


# ------------------------------------------------------- co-location interference


def add_pattern_choice(b: Builder, bi: int, patterns: list[BinPattern]) -> None:
    """pattern[b]: bin b has exactly one co-location pattern: sum_n p[b, n] = 1."""
    b.m.add({x.var: 1.0 for x in patterns}, lo=1, hi=1, name=f"pattern[{bi}]")


def add_pattern_count(b: Builder, bi: int, cls: str, xs: list[ClassedShare],
                      patterns: list[BinPattern]) -> None:
    """pattern_count[b, c]: bin b hosts as many jobs of class c as its pattern says
    (classes whose jobs on b are all worth the same):
    sum_{x puts class c on b} x - sum_n n_c p[b, n] = 0."""
    terms: Terms = {x.var: 1.0 for x in xs}
    for pat in patterns:
        n = dict(pat.counts).get(cls, 0)
        if n:
            terms[pat.var] = terms.get(pat.var, 0.0) - n
    b.m.add(terms, lo=0, hi=0, name=f"pattern_count[{bi},{cls}]")


def add_pattern_split(b: Builder, share: int, parts: list[PatternShare]) -> None:
    """pattern_split[x]: share variable x's jobs are split over its bin's patterns:
    x - sum_n s[x, n] = 0."""
    terms: Terms = {share: 1.0}
    for ps in parts:
        terms[ps.var] = -1.0
    b.m.add(terms, lo=0, hi=0, name=f"pattern_split[{share}]")


def add_pattern_class_count(b: Builder, pattern: BinPattern, cls: str,
                            parts: list[PatternShare]) -> None:
    """pattern_class[b, n, c]: with pattern n, bin b hosts n_c jobs of class c (classes
    whose jobs on b differ in value): sum_{x of class c} s[x, n] - n_c p[b, n] = 0."""
    terms: Terms = {ps.var: 1.0 for ps in parts}
    terms[pattern.var] = -float(dict(pattern.counts).get(cls, 0))
    b.m.add(terms, lo=0, hi=0, name=f"pattern_class[{pattern.bin},{pattern.var},{cls}]")


def add_pattern_order(b: Builder, first: int, second: int,
                      patterns: dict[int, list[BinPattern]]) -> None:
    """pattern_order[b, b']: consecutive virtual bins b, b' of one pool with the same
    pattern list are ordered (symmetry): 2 sum_n n p[b, n] + open[b] >=
    2 sum_n n p[b', n] + open[b'] (n: the pattern's place in the list, 0 = no class)."""
    terms: Terms = {b.c.bins[first].open_var: 1.0, b.c.bins[second].open_var: -1.0}
    for k, pat in enumerate(patterns[first]):
        terms[pat.var] = terms.get(pat.var, 0.0) + 2.0 * k
    for k, pat in enumerate(patterns[second]):
        terms[pat.var] = terms.get(pat.var, 0.0) - 2.0 * k
    b.m.add(terms, lo=0, name=f"pattern_order[{first},{second}]")
# ------------------------------------------------------------------- quotas (5.3)


def add_quota_limit(b: Builder, key: tuple[str, str]) -> None:
    """quota[k, m]: tenant k's usage on key m (a model or "*", descendants included) stays
    within its limit, or within what its non-preemptible running jobs already use:
    S * U[k, m] <= S * max(limit(k, m), fixed(k, m)), S = quota_scale (objective.py)."""
    tenant, model = key
    limit = b.req.cluster.quotas[tenant].limit[model]
    terms = b.c.quota_terms.get(key, {})
    fixed = sum(coef for var, coef in terms.items() if b.m.lbs[var] >= 1)
    b.m.add(terms, hi=max(limit * b.c.quota_scale, fixed),
            name=f"quota[{tenant},{model}]")
