"""The formulation's working state and its data stage.

`Builder` holds what compiling one request needs: the request's data (pools, MIG GPUs,
running jobs, groups of identical new jobs), the model under construction, the variable
tables (`Compiled`), the usage ledgers the capacity rows are made of, and what each
variable earns (`Earning`, read by the objective). The variable, constraint and objective
stages (variables.py, constraints.py, objective.py) fill it in that order; compile.py runs
them.

Ledgers: a variable that uses a resource is charged to the resource's ledger when it is
created (per unit of the variable), so each capacity row is `sum(ledger) <= capacity`:

- pool_use[p]: GPUs of non-MIG pool p taken by new whole placements;
- host_cpu[n], host_mem[n]: host CPU millicores and memory GiB requested on node n;
- bin_share[b], bin_mem[b]: GPU fraction and GPU memory GiB of the jobs sharing bin b;
- mig_use[g, pi]: jobs on instances of profile pi of MIG GPU g;
- topology_use: domains beyond the first that gangs span at their preferred topology
  level (contract 5.5), each unit costing `policy.topology_cost` in the objective.

Earnings: a variable earns its job's value on a model (`earn`; an elastic gang's size
variable its value on n GPUs, `earn_size`); the co-location corrections of contract 5.2
earn `scale` times some jobs' values (`earn_scaled`: one variable may carry the correction
of several classes' jobs).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import TypeVar

from models import (
    GpuModel,
    Job,
    MigProfileSpec,
    Placement,
    PlanRequest,
    instance_positions,
    model_eligible,
)
from models.capacity import Topology
from models.capacity import usable as gpu_usable
from models.objective import objective_value_of
from models.rules import (
    host_fits,
    interference_table,
    job_value,
    preferred_level,
    priority_key,
    required_levels,
)
from solver.formulation.tables import (
    Bin,
    Compiled,
    Group,
    MigGpu,
    Pool,
    PoolKey,
)
from solver.linear import LinearModel, Terms

T = TypeVar("T")


def profile_of(spec: GpuModel, name: str) -> MigProfileSpec:
    """The MIG profile `name` of `spec` (it exists: the request was validated)."""
    p = spec.profile(name)
    assert p is not None
    return p


#: What a variable earns in the objective: the job (request index) it places and the
#: model it places it on ((-1, ""): no value of its own, the new-placement variable of a
#: running gang, whose value sits on its model variables). objective.py turns earnings
#: into coefficients. (Plain tuples of ints and strings: the garbage collector stops
#: tracking them, which matters at hundreds of thousands of variables.)
Earning = tuple[int, str]


class Builder:
    """The state of one compile (module doc); the stages are functions over it."""

    def __init__(self, request: PlanRequest, objective: str, prune: int | None = None,
                 hint: Mapping[str, list[Placement]] | None = None):
        self.req = request
        self.objective = objective
        self.prune = prune
        self.hint_nodes: dict[str, set[str]] = {
            name: {p.node for p in pls} for name, pls in (hint or {}).items()}
        self.catalog: dict[str, GpuModel] = request.cluster.catalog()
        self.nodes = {n.name: n for n in request.cluster.nodes}
        self.m = LinearModel()
        # data
        self.pools: dict[PoolKey, Pool] = {}
        self.mig_gpus: list[MigGpu] = []
        self.mig_index: dict[tuple[str, int], int] = {}
        self.running: list[int] = []
        self.bin_of_gpu: dict[tuple[str, int], int] = {}
        # variable tables and what the driver reads back
        self.c = Compiled(request, self.m, self.pools, [], self.mig_gpus, [], {})
        #: running job -> its new-placement variables (a gang: its `new` variable)
        self.moves: dict[int, list[int]] = {}
        # ledgers (module doc) and earnings
        self.pool_use: dict[PoolKey, Terms] = defaultdict(dict)
        self.host_cpu: dict[str, Terms] = defaultdict(dict)
        self.host_mem: dict[str, Terms] = defaultdict(dict)
        self.bin_share: dict[int, Terms] = defaultdict(dict)
        self.bin_mem: dict[int, Terms] = defaultdict(dict)
        self.mig_use: dict[tuple[int, str], Terms] = defaultdict(dict)
        self.topology_use: Terms = {}
        self._topology: Topology | None = None
        #: what each variable earns, in the order the objective lists its terms
        self.earnings: dict[int, Earning] = {}
        #: elastic size variables z[j, m, n] -> n (they earn the value on n GPUs)
        self.earn_sizes: dict[int, int] = {}
        #: co-location corrections: var -> [(job, model, scale)], earning scale * value
        self.scaled: dict[int, list[tuple[int, str, float]]] = {}
        #: the request's interference pairs, (a, b) -> speed (contract 5.2)
        self.interference = interference_table(request.interference)
        #: keep[r] variables, and new placements of running jobs (migrations)
        self.keeps: set[int] = set()
        self.moved: set[int] = set()
        # caches
        self._group_names: dict[str, list[str]] = {}
        self._bins_by_pool: dict[PoolKey, list[tuple[int, Bin]]] | None = None
        self._eligible: dict[tuple[int, str], bool] = {}
        self._fits: dict[tuple[int, str, float], bool] = {}

    # ------------------------------------------------------------------ data
    def collect_hardware(self) -> None:
        """Pools of non-MIG GPUs per (node, model) and the MIG GPUs, in cluster order."""
        for node in self.req.cluster.nodes:
            for gpu in node.gpus:
                usable = gpu_usable(node, gpu)
                if gpu.mig_enabled:
                    spec = self.catalog[gpu.model]
                    cur = frozenset(i.key() for i in gpu.mig_instances)
                    self.mig_index[(node.name, gpu.index)] = len(self.mig_gpus)
                    self.mig_gpus.append(MigGpu(node.name, gpu.index, gpu.model, usable,
                                                instance_positions(spec), None, cur))
                    continue
                pool = self.pools.setdefault((node.name, gpu.model),
                                             Pool(node.name, gpu.model, [], []))
                pool.gpus.append(gpu.index)
                if usable:
                    pool.usable.append(gpu.index)

    def collect_occupancy(self) -> None:
        """The running jobs (request order) and the non-MIG GPUs they hold now."""
        jobs = self.req.jobs
        self.running = [i for i, j in enumerate(jobs) if j.current]
        for r in self.running:
            for p in jobs[r].current or []:
                if p.mig is not None:
                    continue
                pool = self.pools[(p.node, self.model_of(p.node, p.gpu))]
                occ = pool.share_occ if p.fraction is not None else pool.whole_occ
                occ.setdefault(p.gpu, []).append(r)

    def collect_groups(self) -> None:
        """Identical new jobs in groups (same `signature`), members in priority order."""
        jobs = self.req.jobs
        new = sorted((i for i, j in enumerate(jobs) if not j.current),
                     key=lambda i: priority_key(jobs[i]))
        by_sig: dict[tuple[object, ...], list[int]] = {}
        for i in new:
            by_sig.setdefault(self.signature(jobs[i]), []).append(i)
        self.c.groups.extend(Group(members, jobs[members[0]].shape)
                             for members in by_sig.values())
        self._group_names = {jobs[g.members[0]].name: [jobs[i].name for i in g.members]
                             for g in self.c.groups}

    def signature(self, job: Job) -> tuple[object, ...]:
        """What makes two new jobs interchangeable in the model."""
        models = sorted({p.model for p in self.pools.values()}
                        | {g.model for g in self.mig_gpus})
        vals = tuple(round(self.values(job, m)[0], 12) if self.eligible(job, m) else None
                     for m in models)
        mig = (job.mig.compute_slices, job.mig.memory_gib) if job.mig else None
        # Elastic gangs are never grouped (each gets its own gang variables); the last
        # entry is None for every other job, so their groups are those of v1.
        return (job.shape, job.gpus, job.single_node, job.same_domain, mig, job.mig_profile,
                job.gpu_share, job.gpu_memory_gib, job.cpu_millicores, job.host_memory_gib,
                job.tenant, vals, job.name if job.elastic is not None else None,
                required_levels(job), preferred_level(job), job.colocation_class, job.priority)

    def topology(self) -> Topology:
        """The domains of the cluster's nodes at every topology level (built once)."""
        if self._topology is None:
            self._topology = Topology(self.req.cluster)
        return self._topology

    def model_of(self, node: str, gpu: int) -> str:
        """The model of GPU `gpu` of `node`."""
        for g in self.nodes[node].gpus:
            if g.index == gpu:
                return g.model
        raise KeyError((node, gpu))

    def mig_count(self, mg_i: int, profile: str) -> tuple[Terms, float]:
        """Number of instances of `profile` in the final layout: (terms, constant)."""
        mg = self.mig_gpus[mg_i]
        if mg.pos_vars is None:
            return {}, float(sum(1 for p in mg.current if p.profile == profile))
        return {v: 1.0 for p, v in mg.pos_vars.items() if p.profile == profile}, 0.0

    # ------------------------------------------------------------- job rules
    def values(self, job: Job, model: str, n: int | None = None) -> tuple[float, float]:
        """(objective coefficient, throughput value) of `job` on `model` (an elastic gang
        on n GPUs; None: its nominal size)."""
        thr = job_value(job, model, self.catalog, n)
        if self.objective in ("jct", "makespan"):
            return objective_value_of(job, model, self.catalog, self.objective, n), thr
        return thr, thr

    def eligible(self, job: Job, model: str) -> bool:
        """Whether `job` may run on `model` (cached per job and model)."""
        key = (id(job), model)
        hit = self._eligible.get(key)
        if hit is None:
            spec = self.catalog.get(model)
            hit = self._eligible[key] = spec is not None and model_eligible(job, model, spec)
        return hit

    def host_fits(self, node: str, job: Job, share: float = 1.0) -> bool:
        """Whether `share` of the job's host request fits `node` when empty (cached)."""
        key = (id(job), node, share)
        hit = self._fits.get(key)
        if hit is None:
            n = self.nodes[node]
            cpu = (job.cpu_millicores or 0.0) * share
            mem = (job.host_memory_gib or 0.0) * share
            hit = self._fits[key] = host_fits(cpu, mem, n.cpu_millicores, n.memory_gib)
        return hit

    def bins_for(self, job: Job) -> list[tuple[int, Bin]]:
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

    # ------------------------------------------------- ledgers and earnings
    def earn(self, var: int, job: int, model: str) -> None:
        """`var` places job `job` (request index) on `model`: it earns its value there."""
        self.earnings[var] = (job, model)

    def earn_size(self, var: int, job: int, model: str, n: int) -> None:
        """`var` places elastic gang `job` on n GPUs of `model`: it earns its value there."""
        self.earnings[var] = (job, model)
        self.earn_sizes[var] = n
    def earn_scaled(self, var: int, job: int, model: str, scale: float) -> None:
        """`var` earns `scale` times the value of job `job` (request index) on `model`, on
        top of what it earns already (a co-location correction, contract 5.2)."""
        self.scaled.setdefault(var, []).append((job, model, scale))

    def earn_keep(self, var: int) -> None:
        """`var` is keep[r] of a running job (it earns back the preemption cost)."""
        self.keeps.add(var)

    def earn_move(self, var: int) -> None:
        """`var` places a running job anew (a migration)."""
        self.earnings.setdefault(var, (-1, ""))
        self.moved.add(var)

    def charge_host(self, node: str, var: int, job: Job, share: float) -> None:
        """Charge `share` of the job's host CPU / memory request to `node` per unit of var."""
        if job.cpu_millicores:
            self.host_cpu[node][var] = self.host_cpu[node].get(var, 0.0) \
                + job.cpu_millicores * share
        if job.host_memory_gib:
            self.host_mem[node][var] = self.host_mem[node].get(var, 0.0) \
                + job.host_memory_gib * share

    def charge_bin(self, bi: int, var: int, job: Job) -> None:
        """Charge the job's GPU fraction and GPU memory to bin `bi` per unit of var."""
        self.bin_share[bi][var] = self.bin_share[bi].get(var, 0.0) + (job.gpu_share or 0)
        if job.gpu_memory_gib:
            self.bin_mem[bi][var] = self.bin_mem[bi].get(var, 0.0) + job.gpu_memory_gib

    def charge(self, ledger: dict[T, Terms], key: T, var: int, amount: float) -> None:
        """ledger[key] += amount * var."""
        row = ledger[key]
        row[var] = row.get(var, 0.0) + amount
