"""Compile a PlanRequest into one solver-neutral integer model, and decode its solutions.

Notation (one comment per constraint family below states its math):
- pool p = (node, model) of non-MIG GPUs; U_p its usable GPUs (healthy, node schedulable).
- groups G: identical new jobs (same shape, eligibility, values, host request, tenant) are
  aggregated: integer variables count how many members go to each target, so a queue of a
  thousand identical 1-GPU jobs costs one variable per pool, not per GPU. Members are taken
  in priority order (weight desc, submitted_at asc, name) when decoding.
- running jobs r are never aggregated: keep_r (stay exactly), new-placement variables
  (migrate) and neither (preempt).
- whole single-node gangs: c[G,p] = members of G placed as g-GPU gangs in pool p.
- multi-node gangs: y[j,p] = GPUs of j in pool p, u[j,m] = model chosen, d[j,D] = domain.
- shared jobs: bins = GPUs in share mode; virtual bins per pool (symmetric, opened in order)
  plus the GPUs that already host shared jobs; a[G,b] = members of G on bin b.
- MIG GPUs: v[g,i] = instance position i (profile, start) in g's final layout;
  m[G,g,pi] = members of G on instances of profile pi of g.
Identical nodes and identical MIG GPUs are ordered by load to break symmetry.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from heuristics.result import HeuristicResult
from models import (
    GpuModel,
    Instance,
    Job,
    MigInstance,
    MigProfileSpec,
    Placement,
    PlanRequest,
    instance_positions,
    is_valid_layout,
    mig_profiles_for,
    model_eligible,
)
from models.objective import objective_value_of, same_placement
from models.rules import host_fits, job_value, priority_key
from solver.linear import LinearModel, Terms, add_terms

T = TypeVar("T")

#: Resolution of the fairness objective's minimum share.
FAIRNESS_STEPS = 10_000


@dataclass
class Pool:
    """Non-MIG GPUs of one model on one node."""

    node: str
    model: str
    gpus: list[int]                      # every GPU index of this model on the node
    usable: list[int]                    # healthy, on a schedulable node
    whole_occ: dict[int, list[int]] = field(default_factory=dict)   # gpu -> running jobs
    share_occ: dict[int, list[int]] = field(default_factory=dict)   # gpu -> running jobs


@dataclass
class Bin:
    """A GPU in share mode: a concrete one (already hosting shared jobs) or a virtual one."""

    pool: tuple[str, str]
    gpu: int | None                      # None = virtual, mapped to a free GPU on decode
    open_var: int
    usable: bool


@dataclass
class MigGpu:
    """A MIG-enabled GPU and its layout variables (or fixed layout)."""

    node: str
    gpu: int
    model: str
    usable: bool
    positions: list[Instance]
    pos_vars: dict[Instance, int] | None      # None = layout fixed to current
    current: frozenset[Instance]


@dataclass
class Group:
    """Identical new jobs, members in priority order."""

    members: list[int]
    shape: str


@dataclass
class Compiled:
    """The model plus everything needed to decode a solution into placements."""

    request: PlanRequest
    model: LinearModel
    pools: dict[tuple[str, str], Pool]
    bins: list[Bin]
    mig_gpus: list[MigGpu]
    groups: list[Group]
    keep: dict[int, int]                                  # running job -> keep var
    # Decoding tables: (var, group index, target)
    whole_single: list[tuple[int, int, tuple[str, str]]] = field(default_factory=list)
    whole_single_run: list[tuple[int, int, tuple[str, str]]] = field(default_factory=list)
    multi: dict[int, list[tuple[int, tuple[str, str]]]] = field(default_factory=dict)
    multi_new: dict[int, int] = field(default_factory=dict)  # job -> new var (placed anew)
    multi_u: dict[int, dict[str, int]] = field(default_factory=dict)   # job -> model vars
    multi_d: dict[int, dict[str, int]] = field(default_factory=dict)   # job -> domain vars
    share_group: list[tuple[int, int, int]] = field(default_factory=list)   # var, group, bin
    share_run: list[tuple[int, int, int]] = field(default_factory=list)     # var, job, bin
    mig_group: list[tuple[int, int, int, str]] = field(default_factory=list)  # var, grp, mg, prof
    mig_run: list[tuple[int, int, int, str]] = field(default_factory=list)    # var, job, mg, prof
    placed_terms: dict[int, Terms] = field(default_factory=dict)   # job (running) -> terms
    group_terms: dict[int, Terms] = field(default_factory=dict)    # group -> count terms
    group_of: dict[int, tuple[int, int]] = field(default_factory=dict)  # job -> (group, rank)
    tenant_terms: dict[str, Terms] = field(default_factory=dict)   # tenant -> value terms
    throughput_terms: Terms = field(default_factory=dict)
    throughput_const: float = 0.0
    pruned: bool = False

    def placed_expr(self, job_index: int) -> tuple[Terms, float]:
        """(terms, threshold): the job is placed iff sum(terms) >= threshold."""
        if job_index in self.placed_terms:
            return self.placed_terms[job_index], 1.0
        g, rank = self.group_of[job_index]
        return self.group_terms[g], float(rank + 1)


def _domain(node_name: str, domain: str | None) -> str:
    # A node without a topology domain is its own singleton domain.
    return domain if domain is not None else f"\x00{node_name}"


class _Builder:
    def __init__(self, request: PlanRequest, objective: str, prune: int | None = None,
                 hint: Mapping[str, list[Placement]] | None = None):
        self.req = request
        self.objective = objective
        self.prune = prune
        self.hint_nodes: dict[str, set[str]] = {
            name: {p.node for p in pls} for name, pls in (hint or {}).items()}
        self.catalog: dict[str, GpuModel] = request.cluster.catalog()
        self.m = LinearModel()
        self.nodes = {n.name: n for n in request.cluster.nodes}
        self.cpu_rows: dict[str, Terms] = defaultdict(dict)
        self.mem_rows: dict[str, Terms] = defaultdict(dict)
        self.pool_use: dict[tuple[str, str], Terms] = defaultdict(dict)
        self.bin_frac: dict[int, Terms] = defaultdict(dict)
        self.bin_mem: dict[int, Terms] = defaultdict(dict)
        self.mig_use: dict[tuple[int, str], Terms] = defaultdict(dict)
        self.obj: Terms = {}
        self.thr: Terms = {}
        self._claims: dict[tuple[int, Instance], Terms] = {}
        self._group_names: dict[str, list[str]] = {}
        self._bins_by_pool: dict[tuple[str, str], list[tuple[int, Bin]]] | None = None
        self._eligible: dict[tuple[int, str], bool] = {}
        self._fits: dict[tuple[int, str, float], bool] = {}

    # ---------------------------------------------------------------- hardware
    def hardware(self) -> None:
        self.pools: dict[tuple[str, str], Pool] = {}
        self.mig_gpus: list[MigGpu] = []
        self.mig_index: dict[tuple[str, int], int] = {}
        reconf = self.req.policy.allow_mig_reconfiguration
        for node in self.req.cluster.nodes:
            for gpu in node.gpus:
                usable = node.schedulable and gpu.healthy
                if gpu.mig_enabled:
                    spec = self.catalog[gpu.model]
                    cur = frozenset(i.key() for i in gpu.mig_instances)
                    positions = instance_positions(spec)
                    pos_vars = None
                    if reconf and usable:
                        pos_vars = {p: self.m.new_var(f"v[{node.name}/{gpu.index},{p.profile}@"
                                                      f"{p.start}]") for p in positions}
                        for p, v in pos_vars.items():
                            self.m.hints[v] = int(p in cur)
                    self.mig_index[(node.name, gpu.index)] = len(self.mig_gpus)
                    self.mig_gpus.append(MigGpu(node.name, gpu.index, gpu.model, usable,
                                                positions, pos_vars, cur))
                    continue
                pool = self.pools.setdefault((node.name, gpu.model),
                                             Pool(node.name, gpu.model, [], []))
                pool.gpus.append(gpu.index)
                if usable:
                    pool.usable.append(gpu.index)
        # Layout validity of each MIG GPU with variable positions.
        for mg in self.mig_gpus:
            if mg.pos_vars is None:
                continue
            spec = self.catalog[mg.model]
            name = f"{mg.node}/{mg.gpu}"
            # each memory slice k: sum of positions covering k <= 1
            for k in range(spec.memory_slices):
                cover = [v for p, v in mg.pos_vars.items()
                         if p.start <= k < p.start + _prof(spec, p.profile).memory_slices]
                self.m.add(dict.fromkeys(cover, 1.0), hi=1, name=f"slice[{name},{k}]")
            # compute: sum of compute slices <= total
            self.m.add({v: _prof(spec, p.profile).compute_slices
                        for p, v in mg.pos_vars.items()},
                       hi=spec.compute_slices, name=f"compute[{name}]")
            # each profile at most its max count; at most one +me instance
            for prof in spec.mig_profiles:
                vs = [v for p, v in mg.pos_vars.items() if p.profile == prof.name]
                if len(vs) > prof.max_count:
                    self.m.add(dict.fromkeys(vs, 1.0), hi=prof.max_count)
            me = [v for p, v in mg.pos_vars.items() if _prof(spec, p.profile).media_extensions]
            if len(me) > 1:
                self.m.add(dict.fromkeys(me, 1.0), hi=1)

    def mig_count(self, mg_i: int, profile: str) -> tuple[Terms, float]:
        """Number of instances of `profile` in the final layout: (terms, constant)."""
        mg = self.mig_gpus[mg_i]
        if mg.pos_vars is None:
            return {}, float(sum(1 for p in mg.current if p.profile == profile))
        return {v: 1.0 for p, v in mg.pos_vars.items() if p.profile == profile}, 0.0

    # ---------------------------------------------------------------- jobs
    def values(self, job: Job, model: str) -> tuple[float, float]:
        """(objective coefficient, throughput value) of `job` on `model`."""
        thr = job_value(job, model, self.catalog)
        if self.objective in ("jct", "makespan"):
            return objective_value_of(job, model, self.catalog, self.objective), thr
        return thr, thr

    def add_value(self, var: int, job: Job, model: str, count: float = 1.0) -> None:
        o, t = self.values(job, model)
        self.obj[var] = self.obj.get(var, 0.0) + o * count
        self.thr[var] = self.thr.get(var, 0.0) + t * count
        tt = self.tenant_terms.setdefault(job.tenant, {})
        tt[var] = tt.get(var, 0.0) + t * count

    def host(self, node: str, var: int, job: Job, share: float) -> None:
        """Charge `share` of the job's host CPU / memory request to `node` per unit of var."""
        if job.cpu_millicores:
            self.cpu_rows[node][var] = self.cpu_rows[node].get(var, 0.0) \
                + job.cpu_millicores * share
        if job.host_memory_gib:
            self.mem_rows[node][var] = self.mem_rows[node].get(var, 0.0) \
                + job.host_memory_gib * share

    def host_fits(self, node: str, job: Job, share: float = 1.0) -> bool:
        key = (id(job), node, share)
        hit = self._fits.get(key)
        if hit is None:
            hit = self._fits[key] = self._host_fits(node, job, share)
        return hit

    def _host_fits(self, node: str, job: Job, share: float) -> bool:
        n = self.nodes[node]
        cpu = (job.cpu_millicores or 0.0) * share
        mem = (job.host_memory_gib or 0.0) * share
        return host_fits(cpu, mem, n.cpu_millicores, n.memory_gib)

    def eligible(self, job: Job, model: str) -> bool:
        key = (id(job), model)
        hit = self._eligible.get(key)
        if hit is None:
            spec = self.catalog.get(model)
            hit = self._eligible[key] = spec is not None and model_eligible(job, model, spec)
        return hit

    def limit(self, job: Job, items: list[T], model_of: Callable[[T], str],
              node_of: Callable[[T], str], needed: int) -> list[T]:
        """With pruning on, keep the `max(prune, needed)` targets where `job` is worth the
        most (ties rotated by a hash of the job's name, so that groups spread over the
        cluster), plus every target on the node a running job already uses."""
        k = max(self.prune or 0, needed)
        if self.prune is None or len(items) <= k:
            return items
        n = len(items)
        salt = zlib.crc32(job.name.encode())
        vals = {m: -round(self.values(job, m)[0], 9) for m in {model_of(x) for x in items}}
        keys = [(vals[model_of(x)], (i * 7919 + salt) % n) for i, x in enumerate(items)]
        ranked = sorted(range(n), key=keys.__getitem__)
        keep = set(ranked[:k])
        own = {p.node for p in job.current or []} | self._hinted(job)
        if own:
            keep |= {i for i in range(n) if node_of(items[i]) in own}
        self.c.pruned = True
        return [items[i] for i in sorted(keep)]

    def _hinted(self, job: Job) -> set[str]:
        """Nodes the hint plan uses for `job` or, for a group, for any of its members."""
        names = [job.name]
        if job.name in self._group_names:
            names = self._group_names[job.name]
        out: set[str] = set()
        for n in names:
            out |= self.hint_nodes.get(n, set())
        return out

    def signature(self, job: Job) -> tuple[object, ...]:
        models = sorted({p.model for p in self.pools.values()}
                        | {g.model for g in self.mig_gpus})
        vals = tuple(round(self.values(job, m)[0], 12) if self.eligible(job, m) else None
                     for m in models)
        mig = (job.mig.compute_slices, job.mig.memory_gib) if job.mig else None
        return (job.shape, job.gpus, job.single_node, job.same_domain, mig, job.mig_profile,
                job.gpu_share, job.gpu_memory_gib, job.cpu_millicores, job.host_memory_gib,
                job.tenant, vals)

    def build(self) -> Compiled:
        self.tenant_terms: dict[str, Terms] = {}
        self.hardware()
        jobs = self.req.jobs
        running = [i for i, j in enumerate(jobs) if j.current]
        new = sorted((i for i, j in enumerate(jobs) if not j.current),
                     key=lambda i: priority_key(jobs[i]))
        by_sig: dict[tuple[object, ...], list[int]] = {}
        for i in new:
            by_sig.setdefault(self.signature(jobs[i]), []).append(i)
        groups = [Group(members, jobs[members[0]].shape) for members in by_sig.values()]
        self._group_names = {jobs[g.members[0]].name: [jobs[i].name for i in g.members]
                             for g in groups}
        self.c = Compiled(self.req, self.m, self.pools, [], self.mig_gpus, groups, {})
        self.c.tenant_terms = self.tenant_terms
        self.keep_runs(running)
        self.make_bins(groups, running)
        for gi, grp in enumerate(groups):
            for rank, j in enumerate(grp.members):
                self.c.group_of[j] = (gi, rank)
            self.c.group_terms[gi] = {}
            job = jobs[grp.members[0]]
            if grp.shape == "whole" and (job.single_node or (job.gpus or 1) == 1):
                self.whole_single_group(gi, grp)
            elif grp.shape == "whole":
                prev = None
                for j in grp.members:
                    self.multi_node(j)
                    add_terms(self.c.group_terms[gi], {self.c.multi_new[j]: 1.0})
                    if prev is not None:
                        # identical gangs are placed in priority order: new_i >= new_{i+1}
                        self.m.add({prev: 1.0, self.c.multi_new[j]: -1.0}, lo=0)
                    prev = self.c.multi_new[j]
            elif grp.shape == "share":
                self.share_group(gi, grp)
            else:
                self.mig_group(gi, grp)
            if self.c.group_terms[gi]:
                # a group places at most its size
                self.m.add(self.c.group_terms[gi], hi=len(grp.members), name=f"group[{gi}]")
        for r in running:
            self.running_new(r)
        self.capacity_rows()
        if self.prune is None:
            # Pruned targets differ per job, so nodes are no longer interchangeable.
            self.symmetry()
        self.m.objective = self.obj
        self.c.throughput_terms = self.thr
        return self.c

    # -------------------------------------------------------------- running jobs
    def keep_runs(self, running: list[int]) -> None:
        jobs = self.req.jobs
        pol = self.req.policy
        for r in running:
            job = jobs[r]
            k = self.m.new_var(f"keep[{job.name}]")
            self.c.keep[r] = k
            self.m.hints[k] = 1
            if not job.preemptible:
                self.m.fix(k, 1)  # a non-preemptible running job keeps its placement
            cur = job.current or []
            self.add_value(k, job, self._model_of(cur[0].node, cur[0].gpu))
            per_node: dict[str, int] = defaultdict(int)
            for p in cur:
                per_node[p.node] += 1
            for node, cnt in per_node.items():
                self.host(node, k, job, cnt / len(cur) if job.shape == "whole" else 1.0)
            for p in cur:
                if p.mig is not None:
                    mg_i = self.mig_index[(p.node, p.gpu)]
                    mg = self.mig_gpus[mg_i]
                    inst = p.mig.key()
                    if mg.pos_vars is not None:
                        # a kept job's instance stays: v[g, inst] >= keep_r
                        self.m.add({mg.pos_vars[inst]: 1.0, k: -1.0}, lo=0)
                    add_terms(self.mig_use[(mg_i, inst.profile)], {k: 1.0})
                    self._claims.setdefault((mg_i, inst), {})[k] = 1.0
                elif p.fraction is not None:
                    pool = self.pools[(p.node, self._model_of(p.node, p.gpu))]
                    pool.share_occ.setdefault(p.gpu, []).append(r)
                else:
                    pool = self.pools[(p.node, self._model_of(p.node, p.gpu))]
                    pool.whole_occ.setdefault(p.gpu, []).append(r)
            self.c.placed_terms[r] = {k: 1.0}
            # preemption_cost per running job stopped: -c * (1 - placed)
            self.obj[k] = self.obj.get(k, 0.0) + pol.preemption_cost
            self.thr[k] = self.thr.get(k, 0.0) + pol.preemption_cost
            self.m.objective_const -= pol.preemption_cost
            self.c.throughput_const -= pol.preemption_cost
        # two running jobs cannot keep the same MIG instance
        for terms in self._claims.values():
            if len(terms) > 1:
                self.m.add(terms, hi=1)

    def _model_of(self, node: str, gpu: int) -> str:
        for g in self.nodes[node].gpus:
            if g.index == gpu:
                return g.model
        raise KeyError((node, gpu))

    def running_new(self, r: int) -> None:
        """New-placement options of running job r (migration), charged migration_cost."""
        job = self.req.jobs[r]
        pol = self.req.policy
        k = self.c.keep[r]
        if not job.preemptible:
            return
        new_vars: list[int] = []
        if job.shape == "whole" and (job.single_node or (job.gpus or 1) == 1):
            g = job.gpus or 1
            cands = [(key, pool) for key, pool in self.pools.items()
                     if (len(pool.usable) >= g and self.eligible(job, pool.model)
                         and self.host_fits(pool.node, job))]
            for key, pool in self.limit(job, cands, lambda x: x[1].model,
                                        lambda x: x[1].node, 1):
                v = self.m.new_var(f"mv[{job.name},{key}]")
                add_terms(self.pool_use[key], {v: float(g)})
                self.add_value(v, job, pool.model)
                self.host(pool.node, v, job, 1.0)
                self.c.whole_single_run.append((v, r, key))
                new_vars.append(v)
        elif job.shape == "whole":
            self.multi_node(r)
            new_vars.append(self.c.multi_new[r])
        elif job.shape == "share":
            own = (job.current or [])[0]
            bins = [(bi, b) for bi, b in self._bins_for(job)
                    if not (b.gpu == own.gpu and b.pool[0] == own.node)]
            for bi, b in self.limit(job, bins, lambda x: x[1].pool[1],
                                    lambda x: x[1].pool[0], 1):
                v = self.m.new_var(f"ms[{job.name},{bi}]")
                self._charge_bin(bi, v, job)
                self.add_value(v, job, b.pool[1])
                self.host(b.pool[0], v, job, 1.0)
                self.c.share_run.append((v, r, bi))
                new_vars.append(v)
        else:
            gpus = [(mg_i, mg) for mg_i, mg in enumerate(self.mig_gpus)
                    if mg.usable and self.eligible(job, mg.model)
                    and self.host_fits(mg.node, job)]
            for mg_i, mg in self.limit(job, gpus, lambda x: x[1].model,
                                       lambda x: x[1].node, 1):
                for prof in mig_profiles_for(job, self.catalog[mg.model]):
                    cap_t, cap_c = self.mig_count(mg_i, prof.name)
                    if not cap_t and cap_c < 1:
                        continue
                    v = self.m.new_var(f"mm[{job.name},{mg.node}/{mg.gpu},{prof.name}]")
                    add_terms(self.mig_use[(mg_i, prof.name)], {v: 1.0})
                    self.add_value(v, job, mg.model)
                    self.host(mg.node, v, job, 1.0)
                    self.c.mig_run.append((v, r, mg_i, prof.name))
                    new_vars.append(v)
        terms = dict.fromkeys(new_vars, 1.0)
        if job.shape == "whole" and not (job.single_node or (job.gpus or 1) == 1):
            terms = {self.c.multi_new[r]: 1.0}
        # keep, migrate or preempt: keep_r + sum(new) <= 1 (== 1 without preemption)
        row = {k: 1.0, **terms}
        if pol.allow_preemption:
            self.m.add(row, hi=1, name=f"run[{job.name}]")
        else:
            self.m.add(row, lo=1, hi=1, name=f"run[{job.name}]")
        for v in terms:
            # migration_cost per running job moved, and the preemption cost it avoids
            self.obj[v] = self.obj.get(v, 0.0) - pol.migration_cost + pol.preemption_cost
            self.thr[v] = self.thr.get(v, 0.0) - pol.migration_cost + pol.preemption_cost
        self.c.placed_terms[r] = row

    # ------------------------------------------------------------- whole GPUs
    def whole_single_group(self, gi: int, grp: Group) -> None:
        job = self.req.jobs[grp.members[0]]
        g = job.gpus or 1
        cands = [(key, pool) for key, pool in self.pools.items()
                 if len(pool.usable) // g >= 1 and self.eligible(job, pool.model)
                 and self.host_fits(pool.node, job)]
        needed = 2 * math.ceil(len(grp.members) * g / 8)
        for key, pool in self.limit(job, cands, lambda x: x[1].model, lambda x: x[1].node,
                                    needed):
            cap = len(pool.usable) // g
            v = self.m.new_var(f"c[{gi},{key}]", 0, min(len(grp.members), cap))
            add_terms(self.pool_use[key], {v: float(g)})
            self.add_value(v, job, pool.model)
            self.host(pool.node, v, job, 1.0)
            self.c.whole_single.append((v, gi, key))
            add_terms(self.c.group_terms[gi], {v: 1.0})

    def multi_node(self, j: int) -> None:
        """A gang that may span nodes: y[j,p] GPUs per pool, one model, maybe one domain."""
        job = self.req.jobs[j]
        g = job.gpus or 1
        new = self.m.new_var(f"new[{job.name}]")
        self.c.multi_new[j] = new
        pools = [(key, p) for key, p in self.pools.items()
                 if p.usable and self.eligible(job, p.model)]
        models = sorted({p.model for _, p in pools})
        u = {m: self.m.new_var(f"u[{job.name},{m}]") for m in models}
        self.c.multi_u[j] = u
        # one model: sum_m u[j,m] = new_j
        self.m.add({**dict.fromkeys(u.values(), 1.0), new: -1.0}, lo=0, hi=0)
        d: dict[str, int] = {}
        if job.same_domain:
            doms = sorted({_domain(p.node, self.nodes[p.node].topology_domain)
                           for _, p in pools})
            d = {dm: self.m.new_var(f"d[{job.name},{dm}]") for dm in doms}
            self.c.multi_d[j] = d
            # one domain: sum_D d[j,D] = new_j
            self.m.add({**dict.fromkeys(d.values(), 1.0), new: -1.0}, lo=0, hi=0)
        ys: Terms = {}
        self.c.multi[j] = []
        for key, p in pools:
            cap = min(g, len(p.usable))
            y = self.m.new_var(f"y[{job.name},{key}]", 0, cap)
            ys[y] = 1.0
            # y[j,p] <= cap * u[j, model(p)]   (and <= cap * d[j, domain(p)])
            self.m.add({y: 1.0, u[p.model]: -float(cap)}, hi=0)
            if job.same_domain:
                dm = _domain(p.node, self.nodes[p.node].topology_domain)
                self.m.add({y: 1.0, d[dm]: -float(cap)}, hi=0)
            add_terms(self.pool_use[key], {y: 1.0})
            self.host(p.node, y, job, 1.0 / g)
            self.c.multi[j].append((y, key))
        # all or nothing: sum_p y[j,p] = g * new_j
        self.m.add({**ys, new: -float(g)}, lo=0, hi=0, name=f"gang[{job.name}]")
        for m, v in u.items():
            self.add_value(v, job, m)

    # ------------------------------------------------------------- shared GPUs
    def make_bins(self, groups: list[Group], running: list[int]) -> None:
        jobs = self.req.jobs
        bins = self.c.bins
        self.bin_of_gpu: dict[tuple[str, int], int] = {}
        for key, pool in self.pools.items():
            for gpu in sorted(pool.share_occ):
                o = self.m.new_var(f"open[{key},{gpu}]")
                self.m.hints[o] = 1
                self.bin_of_gpu[(pool.node, gpu)] = len(bins)
                bins.append(Bin(key, gpu, o, gpu in pool.usable))
                for r in pool.share_occ[gpu]:
                    k = self.c.keep[r]
                    # a kept shared job needs its GPU in share mode: keep_r <= open_b
                    self.m.add({k: 1.0, o: -1.0}, hi=0)
                    cur = (jobs[r].current or [])[0]
                    self.bin_frac[len(bins) - 1][k] = cur.fraction or 0.0
                    self.bin_mem[len(bins) - 1][k] = jobs[r].gpu_memory_gib or 0.0
        share_jobs = [jobs[g.members[0]] for g in groups if g.shape == "share"]
        share_sizes = [len(g.members) for g in groups if g.shape == "share"]
        run_share = [jobs[r] for r in running if jobs[r].shape == "share" and
                     jobs[r].preemptible]
        for key, pool in self.pools.items():
            free = sum(1 for g in pool.usable if g not in pool.share_occ)
            if free <= 0:
                continue
            demand = sum(n for j, n in zip(share_jobs, share_sizes, strict=True)
                         if self.eligible(j, pool.model) and self.host_fits(pool.node, j))
            demand += sum(1 for j in run_share if self.eligible(j, pool.model))
            k_p = min(free, demand)
            prev = None
            for k in range(k_p):
                o = self.m.new_var(f"vopen[{key},{k}]")
                bins.append(Bin(key, None, o, True))
                if prev is not None:
                    # virtual bins of a pool open in order: open_k >= open_{k+1}
                    self.m.add({prev: 1.0, o: -1.0}, lo=0)
                prev = o

    def _bins_for(self, job: Job) -> list[tuple[int, Bin]]:
        """The usable share bins of pools where `job` is eligible and fits the host."""
        if self._bins_by_pool is None:
            self._bins_by_pool = defaultdict(list)
            for bi, b in enumerate(self.c.bins):
                if b.usable:
                    self._bins_by_pool[b.pool].append((bi, b))
        out: list[tuple[int, Bin]] = []
        for (node, model), bins in self._bins_by_pool.items():
            if self.eligible(job, model) and self.host_fits(node, job):
                out += bins
        return out

    def _charge_bin(self, bi: int, var: int, job: Job, count: float = 1.0) -> None:
        self.bin_frac[bi][var] = self.bin_frac[bi].get(var, 0.0) + (job.gpu_share or 0) * count
        if job.gpu_memory_gib:
            self.bin_mem[bi][var] = self.bin_mem[bi].get(var, 0.0) + job.gpu_memory_gib * count

    def share_group(self, gi: int, grp: Group) -> None:
        job = self.req.jobs[grp.members[0]]
        f = job.gpu_share or 1.0
        # jobs of this group that fit one GPU by fraction (never more than the group has)
        per_bin = len(grp.members) if f * len(grp.members) <= 1.0 \
            else math.floor(1.0 / f + 1e-9)
        mem_cap_cache: dict[str, int] = {}
        bins = self._bins_for(job)
        for bi, b in self.limit(job, bins, lambda x: x[1].pool[1], lambda x: x[1].pool[0],
                                2 * len(grp.members)):
            model = b.pool[1]
            if model not in mem_cap_cache:
                mem = self.catalog[model].memory_gib
                need = job.gpu_memory_gib or 0.0
                mem_cap_cache[model] = per_bin if not need or mem is None \
                    or need * per_bin <= mem else math.floor(mem / need + 1e-9)
            ub = min(len(grp.members), mem_cap_cache[model])
            if ub < 1:
                continue
            v = self.m.new_var(f"a[{gi},{bi}]", 0, ub)
            self._charge_bin(bi, v, job)
            self.add_value(v, job, model)
            self.host(b.pool[0], v, job, 1.0)
            self.c.share_group.append((v, gi, bi))
            add_terms(self.c.group_terms[gi], {v: 1.0})

    # ------------------------------------------------------------- MIG
    def mig_group(self, gi: int, grp: Group) -> None:
        job = self.req.jobs[grp.members[0]]
        gpus = [(mg_i, mg) for mg_i, mg in enumerate(self.mig_gpus)
                if mg.usable and self.eligible(job, mg.model) and self.host_fits(mg.node, job)]
        for mg_i, mg in self.limit(job, gpus, lambda x: x[1].model, lambda x: x[1].node,
                                   2 * len(grp.members)):
            spec = self.catalog[mg.model]
            for prof in mig_profiles_for(job, spec):
                cap_t, cap_c = self.mig_count(mg_i, prof.name)
                cap = prof.max_count if cap_t else int(cap_c)
                if cap < 1:
                    continue
                v = self.m.new_var(f"m[{gi},{mg.node}/{mg.gpu},{prof.name}]", 0,
                                   min(len(grp.members), cap))
                add_terms(self.mig_use[(mg_i, prof.name)], {v: 1.0})
                self.add_value(v, job, mg.model)
                self.host(mg.node, v, job, 1.0)
                self.c.mig_group.append((v, gi, mg_i, prof.name))
                add_terms(self.c.group_terms[gi], {v: 1.0})

    # ------------------------------------------------------------- capacity
    def capacity_rows(self) -> None:
        virtual: dict[tuple[str, str], list[int]] = defaultdict(list)
        for b in self.c.bins:
            if b.gpu is None:
                virtual[b.pool].append(b.open_var)
        for key, pool in self.pools.items():
            use = dict(self.pool_use.get(key, {}))
            for o in virtual.get(key, []):
                use[o] = use.get(o, 0.0) + 1.0
            for gpu in set(pool.whole_occ) | set(pool.share_occ):
                busy: Terms = {}
                for r in pool.whole_occ.get(gpu, []):
                    add_terms(busy, {self.c.keep[r]: 1.0})
                if gpu in pool.share_occ:
                    add_terms(busy, {self.c.bins[self.bin_of_gpu[(pool.node, gpu)]].open_var:
                                     1.0})
                # an occupied GPU hosts one whole job, or is in share mode, not both
                self.m.add(busy, hi=1, name=f"excl[{key},{gpu}]")
                if gpu in pool.usable:
                    add_terms(use, busy)
            # pool p: whole GPUs of new gangs + share-mode GPUs + busy GPUs <= |U_p|
            if use:
                self.m.add(use, hi=len(pool.usable), name=f"pool[{key}]")
        for bi, b in enumerate(self.c.bins):
            frac = dict(self.bin_frac.get(bi, {}))
            if frac:
                # shared fractions on one GPU sum to <= 1 (only when it is in share mode)
                self.m.add({**frac, b.open_var: -1.0}, hi=0, name=f"frac[{bi}]")
            mem = dict(self.bin_mem.get(bi, {}))
            cap = self.catalog[b.pool[1]].memory_gib
            if mem and cap is not None:
                # shared memory on one GPU sums to <= its memory
                self.m.add({**mem, b.open_var: -cap}, hi=0, name=f"smem[{bi}]")
        for (mg_i, prof), use in self.mig_use.items():
            cap_t, cap_c = self.mig_count(mg_i, prof)
            # jobs on profile pi of GPU g <= instances of pi in g's final layout
            self.m.add({**use, **{v: -c for v, c in cap_t.items()}}, hi=cap_c)
        for name, row in self.cpu_rows.items():
            cap = self.nodes[name].cpu_millicores
            if cap is not None and row:
                self.m.add(row, hi=cap, name=f"cpu[{name}]")
        for name, row in self.mem_rows.items():
            cap = self.nodes[name].memory_gib
            if cap is not None and row:
                self.m.add(row, hi=cap, name=f"mem[{name}]")

    def symmetry(self) -> None:
        """Order identical clean nodes (and identical clean MIG GPUs of a node) by load."""
        occupied_nodes = {p.node for p in self.pools.values() if p.whole_occ or p.share_occ}
        occupied_nodes |= {mg.node for mg in self.mig_gpus if mg.current}
        for job in self.req.jobs:
            for p in job.current or []:
                occupied_nodes.add(p.node)
        load: dict[str, Terms] = defaultdict(dict)
        for key, use in self.pool_use.items():
            add_terms(load[key[0]], use)
        for b in self.c.bins:
            if b.gpu is None:
                add_terms(load[b.pool[0]], {b.open_var: 1.0})
        mig_load: dict[int, Terms] = {}
        for mg_i, mg in enumerate(self.mig_gpus):
            if mg.pos_vars is None:
                continue
            spec = self.catalog[mg.model]
            t = {v: _prof(spec, p.profile).compute_slices / spec.compute_slices
                 for p, v in mg.pos_vars.items()}
            mig_load[mg_i] = t
            add_terms(load[mg.node], t)
        classes: dict[tuple[object, ...], list[str]] = defaultdict(list)
        for node in self.req.cluster.nodes:
            if node.name in occupied_nodes or not node.schedulable:
                continue
            if not all(g.healthy for g in node.gpus):
                continue
            ckey = (tuple((g.model, g.mig_enabled) for g in sorted(node.gpus,
                                                                   key=lambda g: g.index)),
                    node.cpu_millicores, node.memory_gib, node.topology_domain)
            classes[ckey].append(node.name)
        for names in classes.values():
            for first, second in itertools.pairwise(names):
                # identical nodes: load(n_i) >= load(n_{i+1})
                row = dict(load.get(first, {}))
                add_terms(row, load.get(second, {}), -1.0)
                self.m.add(row, lo=0)
        by_node: dict[tuple[str, str], list[int]] = defaultdict(list)
        for mg_i, mg in enumerate(self.mig_gpus):
            if mg.pos_vars is not None and not mg.current and mg.node not in occupied_nodes:
                by_node[(mg.node, mg.model)].append(mg_i)
        for ids in by_node.values():
            for gi_a, gi_b in itertools.pairwise(ids):
                # identical MIG GPUs of a node: compute in use ordered
                row = dict(mig_load[gi_a])
                add_terms(row, mig_load[gi_b], -1.0)
                self.m.add(row, lo=0)


def _prof(spec: GpuModel, name: str) -> MigProfileSpec:
    p = spec.profile(name)
    assert p is not None
    return p


def compile_request(request: PlanRequest, objective: str | None = None,
                    prune: int | None = None,
                    hint: Mapping[str, list[Placement]] | None = None,
                    max_vars: int | None = None) -> Compiled:
    """Compile `request` for `objective` (default: the policy's; fairness and priority_fifo
    compile with throughput values and are handled by the driver).

    `prune` (None = exact) restricts each job to its `prune` most valuable targets (more
    for large groups): the model stays small on large clusters, at the price of
    optimality; `Compiled.pruned` tells whether any target was dropped. Targets that the
    `hint` plan uses are always kept, so that the hint stays feasible. With `max_vars`,
    `ModelTooLarge` is raised as soon as the model would grow past it.
    """
    obj = objective or request.policy.objective
    if obj in ("fairness", "priority_fifo"):
        obj = "throughput"
    b = _Builder(request, obj, prune, hint)
    b.m.max_vars = max_vars
    out = b.build()
    out.model.max_vars = None
    return out


# ---------------------------------------------------------------------- decoding
def decode(c: Compiled, values: list[int]) -> HeuristicResult:
    """Turn variable values into concrete placements (GPU indices, MIG instances)."""
    req = c.request
    jobs = req.jobs
    out: dict[str, list[Placement]] = {}
    kept = {r for r, k in c.keep.items() if values[k] >= 1}
    for r in kept:
        out[jobs[r].name] = [p.model_copy() for p in jobs[r].current or []]
    # Free usable GPUs per pool after kept jobs and open concrete share bins.
    free: dict[tuple[str, str], list[int]] = {}
    for key, pool in c.pools.items():
        busy: set[int] = set()
        for gpu, rs in pool.whole_occ.items():
            if any(r in kept for r in rs):
                busy.add(gpu)
        for b in c.bins:
            if b.pool == key and b.gpu is not None and values[b.open_var] >= 1:
                busy.add(b.gpu)
        free[key] = [g for g in sorted(pool.usable) if g not in busy]

    def take(key: tuple[str, str], n: int) -> list[int]:
        got, free[key] = free[key][:n], free[key][n:]
        if len(got) < n:
            raise AssertionError(f"decode: pool {key} short of GPUs")
        return got

    def members(gi: int, n: int, used: dict[int, int]) -> list[int]:
        start = used.get(gi, 0)
        used[gi] = start + n
        return c.groups[gi].members[start:start + n]

    used: dict[int, int] = {}
    for v, gi, key in c.whole_single:
        n = values[v]
        if not n:
            continue
        for j in members(gi, n, used):
            g = jobs[j].gpus or 1
            out[jobs[j].name] = [Placement(node=key[0], gpu=x) for x in take(key, g)]
    for v, r, key in c.whole_single_run:
        if values[v]:
            g = jobs[r].gpus or 1
            out[jobs[r].name] = [Placement(node=key[0], gpu=x) for x in take(key, g)]
    for j, ys in c.multi.items():
        if not values[c.multi_new[j]]:
            continue
        pls: list[Placement] = []
        for y, key in ys:
            pls += [Placement(node=key[0], gpu=x) for x in take(key, values[y])]
        out[jobs[j].name] = pls
    # Virtual share bins take free GPUs.
    bin_gpu: dict[int, int] = {}
    for bi, b in enumerate(c.bins):
        if b.gpu is not None:
            bin_gpu[bi] = b.gpu
        elif values[b.open_var]:
            bin_gpu[bi] = take(b.pool, 1)[0]
    for v, gi, bi in c.share_group:
        n = values[v]
        if not n:
            continue
        b = c.bins[bi]
        for j in members(gi, n, used):
            out[jobs[j].name] = [Placement(node=b.pool[0], gpu=bin_gpu[bi],
                                           fraction=jobs[j].gpu_share)]
    for v, r, bi in c.share_run:
        if values[v]:
            b = c.bins[bi]
            out[jobs[r].name] = [Placement(node=b.pool[0], gpu=bin_gpu[bi],
                                           fraction=jobs[r].gpu_share)]
    # MIG: the final layout's instances, minus those kept jobs hold, go to new jobs.
    avail: dict[tuple[int, str], list[Instance]] = {}
    for mg_i, mg in enumerate(c.mig_gpus):
        if mg.pos_vars is None:
            layout = set(mg.current)
        else:
            layout = {p for p, v in mg.pos_vars.items() if values[v]}
        held = {p.mig.key() for r in kept for p in jobs[r].current or []
                if p.mig is not None and (p.node, p.gpu) == (mg.node, mg.gpu)}
        for inst in sorted(layout - held, key=lambda i: (i.start, i.profile)):
            avail.setdefault((mg_i, inst.profile), []).append(inst)

    def take_inst(mg_i: int, prof: str) -> Placement:
        lst = avail.get((mg_i, prof), [])
        if not lst:
            raise AssertionError("decode: MIG instance short")
        inst = lst.pop(0)
        mg = c.mig_gpus[mg_i]
        return Placement(node=mg.node, gpu=mg.gpu,
                         mig=MigInstance(profile=inst.profile, start=inst.start))

    for v, gi, mg_i, prof in c.mig_group:
        n = values[v]
        if not n:
            continue
        for j in members(gi, n, used):
            out[jobs[j].name] = [take_inst(mg_i, prof)]
    for v, r, mg_i, prof in c.mig_run:
        if values[v]:
            out[jobs[r].name] = [take_inst(mg_i, prof)]
    right_size_mig(req, out, kept={jobs[r].name for r in kept})
    return HeuristicResult(placements=out)


def right_size_mig(request: PlanRequest, placements: dict[str, list[Placement]],
                   kept: set[str]) -> None:
    """Shrink each new MIG placement to the smallest covering profile that fits inside
    the memory slices of the instance it got (the objective is unchanged; the smaller
    instance leaves compute and slices free for later jobs)."""
    catalog = request.cluster.catalog()
    models = {(n.name, g.index): g.model for n in request.cluster.nodes for g in n.gpus}
    jobs = {j.name: j for j in request.jobs}
    layout: dict[tuple[str, int], list[Instance]] = defaultdict(list)
    for pls in placements.values():
        for p in pls:
            if p.mig is not None:
                layout[(p.node, p.gpu)].append(p.mig.key())
    fixed = not request.policy.allow_mig_reconfiguration
    for name, pls in placements.items():
        p = pls[0]
        if name in kept or p.mig is None or fixed:
            continue
        key = (p.node, p.gpu)
        spec = catalog[models[key]]
        got = _prof(spec, p.mig.profile)
        lo, hi = p.mig.start, p.mig.start + got.memory_slices
        others = [i for i in layout[key] if i != p.mig.key()]
        for cand in mig_profiles_for(jobs[name], spec):
            if cand.name == got.name or cand.memory_slices > got.memory_slices:
                continue
            if (cand.compute_slices, cand.memory_slices) >= (got.compute_slices,
                                                             got.memory_slices):
                continue
            start = next((s for s in cand.starts if lo <= s and s + cand.memory_slices <= hi
                          and is_valid_layout(spec, [*others, Instance(cand.name, s)])),
                         None)
            if start is not None:
                new = Instance(cand.name, start)
                layout[key] = [*others, new]
                pls[0] = Placement(node=p.node, gpu=p.gpu,
                                   mig=MigInstance(profile=new.profile, start=new.start))
                break


def encode_hints(c: Compiled, placements: Mapping[str, list[Placement]]) -> dict[int, int]:
    """Values of every variable that reproduce `placements` (a warm start for CP-SAT and
    CBC). Placements the model cannot express (a target pruned away, more share GPUs than
    virtual bins) are left out of the hint."""
    req = c.request
    jobs = req.jobs
    idx = {j.name: i for i, j in enumerate(jobs)}
    hints: dict[int, int] = dict.fromkeys(range(c.model.num_vars), 0)
    ws = {(gi, key): v for v, gi, key in c.whole_single}
    wr = {(r, key): v for v, r, key in c.whole_single_run}
    sg = {(gi, bi): v for v, gi, bi in c.share_group}
    sr = {(r, bi): v for v, r, bi in c.share_run}
    mgv = {(gi, mg_i, prof): v for v, gi, mg_i, prof in c.mig_group}
    mrv = {(r, mg_i, prof): v for v, r, mg_i, prof in c.mig_run}
    mig_of = {(mg.node, mg.gpu): i for i, mg in enumerate(c.mig_gpus)}
    model_of = {(n.name, g.index): g.model for n in req.cluster.nodes for g in n.gpus}
    concrete = {(b.pool[0], b.gpu): bi for bi, b in enumerate(c.bins) if b.gpu is not None}
    virtual: dict[tuple[str, str], list[int]] = defaultdict(list)
    for bi, b in enumerate(c.bins):
        if b.gpu is None:
            virtual[b.pool].append(bi)
    share_gpus: dict[tuple[str, str], list[int]] = defaultdict(list)
    for pls in placements.values():
        for p in pls:
            if p.fraction is not None and (p.node, p.gpu) not in concrete:
                key = (p.node, model_of[(p.node, p.gpu)])
                if p.gpu not in share_gpus[key]:
                    share_gpus[key].append(p.gpu)
    bin_of: dict[tuple[str, int], int] = dict(concrete)
    for key, gpus in share_gpus.items():
        for gpu, bi in zip(sorted(gpus), virtual.get(key, []), strict=False):
            bin_of[(key[0], gpu)] = bi
    for (node, gpu), bi in bin_of.items():
        if any(p.fraction is not None and (p.node, p.gpu) == (node, gpu)
               for pls in placements.values() for p in pls):
            hints[c.bins[bi].open_var] = 1

    def bump(var: int | None, n: int = 1) -> None:
        if var is not None:
            hints[var] = min(c.model.ubs[var], hints[var] + n)

    used_instances: dict[int, set[Instance]] = defaultdict(set)
    for name, pls in placements.items():
        i = idx.get(name)
        if i is None or not pls:
            continue
        job = jobs[i]
        if i in c.keep and job.current and same_placement(pls, job.current):
            hints[c.keep[i]] = 1
            for p in pls:
                if p.mig is not None and (p.node, p.gpu) in mig_of:
                    used_instances[mig_of[(p.node, p.gpu)]].add(p.mig.key())
            continue
        p = pls[0]
        running = i in c.keep
        gi = -1 if running else c.group_of[i][0]
        if p.mig is not None:
            mg_i = mig_of.get((p.node, p.gpu))
            if mg_i is None:
                continue
            used_instances[mg_i].add(p.mig.key())
            bump(mrv.get((i, mg_i, p.mig.profile)) if running
                 else mgv.get((gi, mg_i, p.mig.profile)))
        elif p.fraction is not None:
            share_bin = bin_of.get((p.node, p.gpu))
            if share_bin is not None:
                bump(sr.get((i, share_bin)) if running else sg.get((gi, share_bin)))
        elif i in c.multi:
            new = c.multi_new[i]
            hints[new] = 1
            model = model_of[(p.node, p.gpu)]
            if model in c.multi_u.get(i, {}):
                hints[c.multi_u[i][model]] = 1
            nodes = {q.node for q in pls}
            for dm, v in c.multi_d.get(i, {}).items():
                doms = {req_node_domain(req, n) for n in nodes}
                hints[v] = int(doms == {dm})
            for y, key in c.multi[i]:
                hints[y] = sum(1 for q in pls if q.node == key[0]
                               and model_of[(q.node, q.gpu)] == key[1])
        else:
            key = (p.node, model_of[(p.node, p.gpu)])
            bump(wr.get((i, key)) if running else ws.get((gi, key)))
    for mg_i, mg in enumerate(c.mig_gpus):
        if mg.pos_vars is None:
            continue
        layout = set(used_instances.get(mg_i, set()))
        for inst, v in mg.pos_vars.items():
            hints[v] = int(inst in layout)
    return hints


def req_node_domain(request: PlanRequest, node: str) -> str:
    """The topology domain key of `node` as the formulation uses it."""
    for n in request.cluster.nodes:
        if n.name == node:
            return _domain(n.name, n.topology_domain)
    return _domain(node, None)
