"""Who holds which GPU: the simulator's capacity ledger and first-fit search.

`Occupancy` records the placements of running jobs on a cluster and refuses any placement
that the contract forbids (section 3 of the contract): a whole GPU hosts one job and
nothing else, a gang gets `gpus` distinct GPUs (an elastic gang: an allowed size,
`models.rules.allowed_sizes`) of one eligible model (one node when `single_node`), shared
fractions sum to <= 1 and their GPU memory to <= the GPU's on a non-MIG GPU
(`models.rules.share_fits`, the planners' device fit), and a MIG job sits on one instance
of a valid layout that covers its demand. Host CPU / memory is not simulated. The engine
rebuilds an Occupancy from every decision, so a policy that oversubscribes a GPU fails
loudly (`CapacityError`).

MIG layouts follow `solver/build.py::final_layouts`: instances hosting jobs stay; idle
instances stay while they fit beside them; a new instance is created when a job names a
position that is not in the layout (the GPU is then marked reconfigured).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from models import Cluster, GpuModel, Instance, Job, MigInstance, Placement, is_valid_layout
from models.rules import HOST_TOL, allowed_sizes, mig_profiles_for, model_eligible, share_fits

GpuKey = tuple[str, int]


class CapacityError(AssertionError):
    """A placement that breaks a capacity or eligibility rule: a simulator or policy bug."""


@dataclass(slots=True)
class GpuState:
    """One GPU: its whole-GPU holder, shared fractions (and their GPU memory) or MIG
    instances (-> holder)."""

    node: str
    index: int
    model: str
    mig: bool
    #: GPU memory in GiB (None = unknown: never constrains)
    memory: float | None = None
    whole: str | None = None
    shares: dict[str, float] = field(default_factory=dict)
    share_mem: dict[str, float] = field(default_factory=dict)
    instances: dict[Instance, str | None] = field(default_factory=dict)

    @property
    def key(self) -> GpuKey:
        return (self.node, self.index)

    def share_used(self) -> float:
        return sum(self.shares.values())

    def share_fits(self, fraction: float, mem: float) -> bool:
        """Whether a share of `fraction` and `mem` GiB fits beside what runs here."""
        return (not self.mig and self.whole is None
                and share_fits(self.share_used(), sum(self.share_mem.values()), fraction,
                               mem, self.memory))

    def used_instances(self) -> list[Instance]:
        return [i for i, j in self.instances.items() if j is not None]

    def is_empty(self) -> bool:
        """Nothing runs on it."""
        return self.whole is None and not self.shares and not self.used_instances()

    def copy(self) -> GpuState:
        return GpuState(self.node, self.index, self.model, self.mig, self.memory, self.whole,
                        dict(self.shares), dict(self.share_mem), dict(self.instances))


class Occupancy:
    """The placements of running jobs on a cluster, checked on every change."""

    def __init__(self, cluster: Cluster,
                 layouts: Mapping[GpuKey, Iterable[Instance]] | None = None) -> None:
        self.catalog: dict[str, GpuModel] = cluster.catalog()
        self.gpus: dict[GpuKey, GpuState] = {}
        self.node_gpus: dict[str, list[GpuState]] = {}
        for node in cluster.nodes:
            row = []
            for g in node.gpus:
                st = GpuState(node.name, g.index, g.model, g.mig_enabled,
                              self.catalog[g.model].memory_gib)
                if g.mig_enabled:
                    insts = (layouts or {}).get((node.name, g.index))
                    if insts is None:
                        insts = [m.key() for m in g.mig_instances]
                    st.instances = dict.fromkeys(insts)
                row.append(st)
                self.gpus[st.key] = st
            self.node_gpus[node.name] = row
        self.jobs: dict[str, list[Placement]] = {}
        self.job_specs: dict[str, Job] = {}
        self.reconfigured: set[GpuKey] = set()

    def copy(self) -> Occupancy:
        """An independent copy (policies plan on copies)."""
        new = object.__new__(Occupancy)
        new.catalog = self.catalog
        new.gpus = {k: g.copy() for k, g in self.gpus.items()}
        new.node_gpus = {n: [new.gpus[g.key] for g in row] for n, row in self.node_gpus.items()}
        new.jobs = {j: list(p) for j, p in self.jobs.items()}
        new.job_specs = dict(self.job_specs)
        new.reconfigured = set(self.reconfigured)
        return new

    # ----- reading -------------------------------------------------------------------
    def model_of(self, placements: Sequence[Placement]) -> str:
        """The GPU model of a placement list (its first GPU)."""
        p = placements[0]
        return self.gpus[(p.node, p.gpu)].model

    def layouts(self) -> dict[GpuKey, frozenset[Instance]]:
        """The MIG layout of every MIG GPU."""
        return {k: frozenset(g.instances) for k, g in self.gpus.items() if g.mig}

    def allocated(self) -> float:
        """GPUs in use as docs/semantics.md counts them (MIG by compute slices)."""
        total = 0.0
        for g in self.gpus.values():
            if g.whole is not None:
                total += 1.0
            elif g.shares:
                total += min(1.0, g.share_used())
            elif g.mig:
                spec = self.catalog[g.model]
                used = sum(_compute(spec, i) for i in g.used_instances())
                total += used / spec.compute_slices
        return total

    def has_idle_gpu(self) -> bool:
        """Some GPU hosts nothing at all."""
        return any(g.is_empty() for g in self.gpus.values())

    # ----- changing -------------------------------------------------------------------
    def add(self, job: Job, placements: Sequence[Placement]) -> None:
        """Record `job` on `placements`; raise CapacityError when the rules forbid it."""
        if job.name in self.jobs:
            raise CapacityError(f"{job.name} placed twice")
        if not placements:
            raise CapacityError(f"{job.name}: empty placement")
        states = []
        for p in placements:
            g = self.gpus.get((p.node, p.gpu))
            if g is None:
                raise CapacityError(f"{job.name}: no GPU {p.node}/{p.gpu}")
            states.append(g)
        models = {g.model for g in states}
        if len(models) != 1:
            raise CapacityError(f"{job.name}: placement mixes models {sorted(models)}")
        model = states[0].model
        if not model_eligible(job, model, self.catalog[model]):
            raise CapacityError(f"{job.name}: model {model} is not eligible")
        adders = {"whole": self._add_whole, "share": self._add_share, "mig": self._add_mig}
        adders[job.shape](job, placements, states)
        self.jobs[job.name] = list(placements)
        self.job_specs[job.name] = job

    def _add_whole(self, job: Job, placements: Sequence[Placement],
                   states: list[GpuState]) -> None:
        if (len(placements) not in allowed_sizes(job)
                or len({g.key for g in states}) != len(states)):
            raise CapacityError(f"{job.name}: needs {allowed_sizes(job)} distinct GPUs")
        if job.single_node and len({g.node for g in states}) != 1:
            raise CapacityError(f"{job.name}: single-node gang spread over nodes")
        for p, g in zip(placements, states, strict=True):
            if g.mig or p.mig is not None or p.fraction is not None:
                raise CapacityError(f"{job.name}: whole GPU expected at {g.key}")
            if not g.is_empty():
                raise CapacityError(f"{job.name}: GPU {g.key} is oversubscribed")
        for g in states:
            g.whole = job.name

    def _add_share(self, job: Job, placements: Sequence[Placement],
                   states: list[GpuState]) -> None:
        (p,), (g,) = placements, states
        f = job.gpu_share or 0.0
        if g.mig or p.fraction is None or abs(p.fraction - f) > HOST_TOL:
            raise CapacityError(f"{job.name}: a share of {f} on a non-MIG GPU expected")
        mem = job.gpu_memory_gib or 0.0
        if not g.share_fits(f, mem):
            raise CapacityError(f"{job.name}: GPU {g.key} is oversubscribed")
        g.shares[job.name] = f
        g.share_mem[job.name] = mem

    def _add_mig(self, job: Job, placements: Sequence[Placement],
                 states: list[GpuState]) -> None:
        (p,), (g,) = placements, states
        if not g.mig or p.mig is None:
            raise CapacityError(f"{job.name}: a MIG instance on a MIG GPU expected")
        spec = self.catalog[g.model]
        inst = p.mig.key()
        if inst.profile not in {s.name for s in mig_profiles_for(job, spec)}:
            raise CapacityError(f"{job.name}: profile {inst.profile} does not cover it")
        if inst in g.instances:
            if g.instances[inst] is not None:
                raise CapacityError(f"{job.name}: instance {inst} on {g.key} is taken")
            g.instances[inst] = job.name
            return
        used = g.used_instances()
        if not is_valid_layout(spec, [*used, inst]):
            raise CapacityError(f"{job.name}: {inst} does not fit the layout of {g.key}")
        layout: dict[Instance, str | None] = {i: g.instances[i] for i in used}
        layout[inst] = job.name
        for idle in (i for i, j in g.instances.items() if j is None):
            if is_valid_layout(spec, [*layout, idle]):
                layout[idle] = None
        g.instances = layout
        self.reconfigured.add(g.key)

    def remove(self, name: str) -> None:
        """Free the GPUs of job `name` (its MIG instance stays, idle)."""
        for p in self.jobs.pop(name):
            g = self.gpus[(p.node, p.gpu)]
            if g.whole == name:
                g.whole = None
            g.shares.pop(name, None)
            g.share_mem.pop(name, None)
            if p.mig is not None and g.instances.get(p.mig.key()) == name:
                g.instances[p.mig.key()] = None
        self.job_specs.pop(name, None)

    # ----- searching ------------------------------------------------------------------
    def find(self, job: Job, models: Sequence[str] | None = None) -> list[Placement] | None:
        """First-fit placement for `job` in node order, on `models` in the given order
        (any eligible model, in node order, when None); None when nothing fits."""
        finders = {"whole": self._find_whole, "share": self._find_share,
                   "mig": self._find_mig}
        if models is None:
            return finders[job.shape](job, None)
        for m in models:
            found = finders[job.shape](job, m)
            if found is not None:
                return found
        return None

    def _ok(self, job: Job, g: GpuState, model: str | None) -> bool:
        if model is not None and g.model != model:
            return False
        return model_eligible(job, g.model, self.catalog[g.model])

    def _find_whole(self, job: Job, model: str | None) -> list[Placement] | None:
        need = job.gpus or 0
        pools: dict[str, list[GpuState]] = {}
        for row in self.node_gpus.values():
            free: dict[str, list[GpuState]] = {}
            for g in row:
                if not g.mig and g.is_empty() and self._ok(job, g, model):
                    free.setdefault(g.model, []).append(g)
            for m, gs in free.items():
                if len(gs) >= need:
                    return [Placement(node=g.node, gpu=g.index) for g in gs[:need]]
                pools.setdefault(m, []).extend(gs)
        if job.single_node:
            return None
        for gs in pools.values():
            if len(gs) >= need:
                return [Placement(node=g.node, gpu=g.index) for g in gs[:need]]
        return None

    def _find_share(self, job: Job, model: str | None) -> list[Placement] | None:
        f = job.gpu_share or 0.0
        mem = job.gpu_memory_gib or 0.0
        for g in self.gpus.values():
            if g.share_fits(f, mem) and self._ok(job, g, model):
                return [Placement(node=g.node, gpu=g.index, fraction=f)]
        return None

    def _find_mig(self, job: Job, model: str | None) -> list[Placement] | None:
        cands = [g for g in self.gpus.values() if g.mig and self._ok(job, g, model)]
        # An idle instance that covers the demand first (no reconfiguration) ...
        for g in cands:
            names = [s.name for s in mig_profiles_for(job, self.catalog[g.model])]
            idle = sorted((i for i, j in g.instances.items()
                           if j is None and i.profile in names),
                          key=lambda i: (names.index(i.profile), i.start))
            if idle:
                return [_mig_placement(g, idle[0])]
        # ... else the smallest profile that can be created beside the busy instances.
        for g in cands:
            spec = self.catalog[g.model]
            used = g.used_instances()
            for prof in mig_profiles_for(job, spec):
                if prof.media_extensions:
                    continue
                for start in prof.starts:
                    inst = Instance(prof.name, start)
                    if is_valid_layout(spec, [*used, inst]):
                        return [_mig_placement(g, inst)]
        return None


def _compute(spec: GpuModel, inst: Instance) -> int:
    prof = spec.profile(inst.profile)
    return prof.compute_slices if prof is not None else 0


def _mig_placement(g: GpuState, inst: Instance) -> Placement:
    return Placement(node=g.node, gpu=g.index,
                     mig=MigInstance(profile=inst.profile, start=inst.start))
