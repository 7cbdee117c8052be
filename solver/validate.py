"""The independent plan validator: every invariant of contract section 3, and the objective.

`validate_plan(request, plan)` returns a list of `Violation`s (empty = valid). It shares no
code with the planners' bookkeeping (models/objective.py, models/instance.py,
solver/build.py), so that a slip in either place is caught.

Re-derived here on purpose (the planners' copies live in models/rules.py,
models/capacity.py and models/objective.py): speed, size and value of a job (`_speed`,
`_size`, `_value`), the objective terms and their horizon (`HORIZON_S`), the fairness
demands D_k, MIG demand cover (`_check_mig_covers`), gang topology (one model, one node,
one domain, a node without a domain being a domain of its own), whole-GPU exclusivity, and
every capacity sum (shares, GPU memory, host CPU / memory) with its own `CAPACITY_TOL`
(equal to the planners' `models.rules.HOST_TOL`, so that nothing a planner accepts is
rejected here; a test pins the two constants and the two horizons together).
Shared with the planners, because they are the contract's definitions rather than
bookkeeping: the request and plan types, the MIG layout geometry of the catalog
(`layout_violations`) and the model eligibility rule (`models.rules.model_eligible`).

Rule names (`Violation.rule`), one per invariant:

- `accounting`: every job exactly once in `assignments` or `unplaced`, no unknown job, no
  empty assignment, no assignment at all when the status is `infeasible`.
- `eligibility`: new placements name existing healthy GPUs of schedulable nodes of an
  eligible model; every placement's kind matches the job's shape and the GPU's mode; a
  shared placement's fraction is the job's `gpu_share`; a MIG instance covers the demand.
- `whole_gpu`: a whole GPU hosts at most one whole-GPU job; a gang has exactly `gpus`
  distinct GPUs of one model, on one node (`single_node`) or in one domain (`same_domain`).
- `mig`: final layouts (current - destroy + create) are valid; destroy/create are
  consistent with the current layout; MIG changes only on MIG GPUs and only when
  reconfiguration is allowed; an instance hosts at most one job and exists in the final
  layout; instances of kept running jobs are not destroyed.
- `shared`: per GPU, fractions sum to <= 1 and `gpu_memory_gib` to <= the GPU's memory;
  never on a MIG GPU, never beside a whole-GPU job.
- `host_resources`: per node, `cpu_millicores` and `memory_gib` hold the placed jobs' host
  requests (a gang's request split pro rata over its GPUs).
- `running`: non-preemptible running jobs are kept; with `allow_preemption: false` no
  running job is stopped; `preempted` / `migrated` list exactly the stopped / moved jobs.
- `topology` (T1, contract 5.5): a gang's GPUs lie in one domain of each level its
  `topology.required` names ("host" = one node; a domain of a listed level is the path of
  the node's domains from the widest level down). v1's `same_domain` is the same rule at
  the level "domain" and keeps its v1 rule name, `whole_gpu`.
- `objective`: `objective_value` is the recomputed objective (with the topology costs of
  contract 5.5: `topology_cost` per domain beyond the first that a gang spans at its
  preferred level, charged wherever migration costs are); `best_bound` and `gap` agree.

Kept placements of running jobs (placed exactly on their `current` GPUs / instances) are
grandfathered: health, schedulability, model eligibility and gang topology are not checked
for them, capacity always is. The validator never raises on a well-typed plan, however
nonsensical: unknown nodes, GPUs, jobs or profiles are reported as violations.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from models.catalog import GpuModel, Instance, layout_violations
from models.plan import Plan
from models.request import Gpu, Job, Node, Placement, PlanRequest
from models.rules import model_eligible

#: Slack on capacity sums (fractions, GiB, millicores).
CAPACITY_TOL = 1e-9
#: Relative tolerance on the objective value, bound and gap.
OBJECTIVE_RTOL = 1e-6
#: Normalising horizon H of the `jct` and `makespan` objectives (docs/semantics.md).
HORIZON_S = 3600.0

GpuKey = tuple[str, int]
PlacementKey = tuple[str, int, str, int]


@dataclass(frozen=True)
class Violation:
    """One broken invariant: the rule's name, a message, and where (job / node / GPU)."""

    rule: str
    message: str
    job: str | None = None
    node: str | None = None
    gpu: int | None = None

    def where(self) -> str:
        """A short location, e.g. `job=x node=n gpu=3` ('-' when the plan as a whole)."""
        parts = [f"{k}={v}" for k, v in (("job", self.job), ("node", self.node),
                                          ("gpu", self.gpu)) if v is not None]
        return " ".join(parts) or "-"


@dataclass
class _Ctx:
    """Everything the rule checks share, computed once from the request and the plan."""

    request: PlanRequest
    plan: Plan
    catalog: dict[str, GpuModel]
    jobs: dict[str, Job]
    nodes: dict[str, Node]
    gpus: dict[GpuKey, Gpu]
    #: Placed known jobs -> their placements (the first assignment of each job).
    placed: dict[str, list[Placement]] = field(default_factory=dict)
    #: Running jobs placed exactly on their current placements.
    kept: set[str] = field(default_factory=set)
    out: list[Violation] = field(default_factory=list)

    def add(self, rule: str, message: str, *, job: str | None = None,
            node: str | None = None, gpu: int | None = None) -> None:
        self.out.append(Violation(rule, message, job, node, gpu))

    def model_of(self, key: GpuKey) -> tuple[str, GpuModel] | None:
        gpu = self.gpus.get(key)
        if gpu is None:
            return None
        spec = self.catalog.get(gpu.model)
        return None if spec is None else (gpu.model, spec)

    def placements_on_gpus(self) -> Iterable[tuple[str, Placement, Gpu]]:
        """(job, placement, GPU) for every placement naming an existing GPU."""
        for name, pls in self.placed.items():
            for p in pls:
                gpu = self.gpus.get((p.node, p.gpu))
                if gpu is not None:
                    yield name, p, gpu


def _pkey(p: Placement) -> PlacementKey:
    """A placement as (node, gpu, MIG profile, MIG start); fractions are not part of it."""
    return (p.node, p.gpu, p.mig.profile if p.mig else "", p.mig.start if p.mig else -1)


def _is_kept(job: Job, pls: list[Placement]) -> bool:
    return bool(job.current) and {_pkey(p) for p in pls} == {
        _pkey(p) for p in job.current or []
    }


def _where(p: Placement) -> str:
    mig = f" {p.mig.profile}@{p.mig.start}" if p.mig else ""
    return f"{p.node}/{p.gpu}{mig}"


# ---------------------------------------------------------------- 1. accounting


def _check_accounting(c: _Ctx) -> None:
    seen: Counter[str] = Counter()
    for a in c.plan.assignments:
        seen[a.job] += 1
        if a.job not in c.jobs:
            c.add("accounting", "assignment of a job that is not in the request", job=a.job)
        elif not a.placements:
            c.add("accounting", "assignment with no placements", job=a.job)
    for u in c.plan.unplaced:
        seen[u.job] += 1
        if u.job not in c.jobs:
            c.add("accounting", "unplaced entry for a job that is not in the request", job=u.job)
    for name in c.jobs:
        if seen[name] == 0:
            c.add("accounting", "job appears in neither assignments nor unplaced", job=name)
        elif seen[name] > 1:
            c.add("accounting", f"job appears {seen[name]} times in assignments/unplaced",
                  job=name)
    if c.plan.status == "infeasible" and c.plan.assignments:
        c.add("accounting", f"status infeasible but {len(c.plan.assignments)} assignments")


# ---------------------------------------------------------------- 2. eligibility


def _check_eligibility(c: _Ctx) -> None:
    for name, pls in c.placed.items():
        job = c.jobs[name]
        kept = name in c.kept
        if job.shape != "whole" and len(pls) != 1:
            c.add("eligibility", f"a {job.shape} job takes exactly one placement, got {len(pls)}",
                  job=name)
        for p in pls:
            _check_placement(c, job, p, kept)


def _check_placement(c: _Ctx, job: Job, p: Placement, kept: bool) -> None:
    def bad(msg: str) -> None:
        c.add("eligibility", f"{_where(p)}: {msg}", job=job.name, node=p.node, gpu=p.gpu)

    node = c.nodes.get(p.node)
    gpu = c.gpus.get((p.node, p.gpu))
    if node is None or gpu is None:
        bad("no such node" if node is None else "no such GPU on this node")
        return
    if not kept:
        if not node.schedulable:
            bad("node is not schedulable")
        if not gpu.healthy:
            bad("GPU is not healthy")
    spec = c.catalog.get(gpu.model)
    if spec is None:
        bad(f"GPU model {gpu.model!r} is not in the catalog")
        return
    if not kept and not model_eligible(job, gpu.model, spec):
        bad(f"model {gpu.model} is not eligible for the job")
    # The placement's kind must match the job's shape and the GPU's MIG mode. A fraction on
    # a MIG GPU is reported by the `shared` rule (contract invariant 5).
    if job.shape == "whole":
        if p.mig is not None or p.fraction is not None:
            bad("a whole-GPU job's placement carries a MIG instance or a fraction")
        elif gpu.mig_enabled:
            bad("whole-GPU placement on a MIG-enabled GPU")
    elif job.shape == "share":
        if p.fraction is None:
            bad("a shared job's placement needs a fraction")
        else:
            allowed = [job.gpu_share] + [q.fraction for q in job.current or [] if kept]
            if not any(f is not None and abs(p.fraction - f) <= CAPACITY_TOL for f in allowed):
                bad(f"fraction {p.fraction} differs from the job's gpu_share {job.gpu_share}")
    elif p.mig is None:
        bad("a MIG job's placement needs a MIG instance")
    elif not gpu.mig_enabled:
        bad("MIG placement on a GPU without MIG mode")
    elif not kept:
        _check_mig_covers(job, p, spec, bad)


def _check_mig_covers(job: Job, p: Placement, spec: GpuModel,
                      bad: Callable[[str], None]) -> None:
    assert p.mig is not None
    prof = spec.profile(p.mig.profile)
    if prof is None:
        bad(f"model has no MIG profile {p.mig.profile!r}")
    elif job.mig_profile is not None:
        if prof.name != job.mig_profile:
            bad(f"instance {prof.name} is not the demanded profile {job.mig_profile}")
    elif job.mig is not None and (prof.compute_slices < job.mig.compute_slices
                                  or prof.memory_gib < job.mig.memory_gib - CAPACITY_TOL):
        bad(f"instance {prof.name} ({prof.compute_slices} compute slices, {prof.memory_gib} "
            f"GiB) does not cover the demand ({job.mig.compute_slices}, "
            f"{job.mig.memory_gib} GiB)")


# ---------------------------------------------------------------- 3. whole GPUs


def _check_whole_gpu(c: _Ctx) -> None:
    holders: dict[GpuKey, set[str]] = defaultdict(set)
    for name, pls in c.placed.items():
        job = c.jobs[name]
        if job.shape != "whole":
            continue
        for p in pls:
            if p.mig is None and p.fraction is None:
                holders[(p.node, p.gpu)].add(name)
        _check_gang(c, job, pls)
    for (node, idx), names in sorted(holders.items()):
        if len(names) > 1 and (node, idx) in c.gpus:
            c.add("whole_gpu", f"whole GPU hosts {len(names)} whole-GPU jobs: "
                  f"{', '.join(sorted(names))}", node=node, gpu=idx)


def _check_gang(c: _Ctx, job: Job, pls: list[Placement]) -> None:
    name = job.name
    keys = [(p.node, p.gpu) for p in pls]
    if len(pls) != job.gpus:
        c.add("whole_gpu", f"gang needs {job.gpus} GPUs, got {len(pls)}", job=name)
    if len(set(keys)) != len(keys):
        c.add("whole_gpu", "gang lists the same GPU more than once", job=name)
    if name in c.kept:
        return
    known = [k for k in keys if k in c.gpus]
    models = {c.gpus[k].model for k in known}
    if len(models) > 1:
        c.add("whole_gpu", f"gang spans several models: {', '.join(sorted(models))}", job=name)
    nodes = {n for n, _ in known}
    if job.single_node:
        if len(nodes) > 1:
            c.add("whole_gpu", f"single-node gang spans nodes {', '.join(sorted(nodes))}",
                  job=name)
    elif job.same_domain:
        _check_level(c, job, nodes, "domain", "whole_gpu", "same-domain gang")


def _node_domain(c: _Ctx, node: str, level: str) -> str:
    """The domain of `node` at `level`: itself at "host", its `topology_domain` (else its
    own singleton domain) at "domain", the path of its domains down to a listed level."""
    n = c.nodes[node]
    if level == "host":
        return node
    if level == "domain":
        return n.topology_domain or f"(node {node})"
    levels = c.request.cluster.topology_levels
    if level not in levels:
        return f"(unknown level {level})"
    return " > ".join(repr(n.topology.get(lv, "")) for lv in levels[:levels.index(level) + 1])


def _check_level(c: _Ctx, job: Job, nodes: set[str], level: str, rule: str,
                 what: str) -> None:
    """The nodes of a new gang placement lie in one domain of `level`."""
    domains = {_node_domain(c, n, level) for n in nodes}
    if len(domains) > 1:
        where = "domains" if level == "domain" else f"{level} domains"
        c.add(rule, f"{what} spans {where} {', '.join(sorted(domains))}", job=job.name)


# ---------------------------------------------------------------- T1. topology levels


def _check_topology(c: _Ctx) -> None:
    """T1: new placements of a job with `topology.required` lie in one domain of it (kept
    placements are grandfathered)."""
    for name, pls in c.placed.items():
        job = c.jobs[name]
        required = job.topology.required if job.topology is not None else None
        if required is None or name in c.kept:
            continue
        nodes = {p.node for p in pls if p.node in c.nodes}
        _check_level(c, job, nodes, required, "topology", f"gang requiring one {required}")


# ---------------------------------------------------------------- 4. MIG


def _check_mig(c: _Ctx) -> None:
    policy = c.request.policy
    destroy: dict[GpuKey, list[Instance]] = defaultdict(list)
    create: dict[GpuKey, list[Instance]] = defaultdict(list)
    listed: Counter[GpuKey] = Counter()
    for ch in c.plan.mig_changes:
        key = (ch.node, ch.gpu)
        listed[key] += 1
        gpu = c.gpus.get(key)
        if gpu is None:
            c.add("mig", "MIG change on a GPU that does not exist", node=ch.node, gpu=ch.gpu)
            continue
        if not gpu.mig_enabled:
            c.add("mig", "MIG change on a GPU without MIG mode", node=ch.node, gpu=ch.gpu)
            continue
        if (ch.destroy or ch.create) and not policy.allow_mig_reconfiguration:
            c.add("mig", "MIG change while allow_mig_reconfiguration is false",
                  node=ch.node, gpu=ch.gpu)
        destroy[key].extend(m.key() for m in ch.destroy)
        create[key].extend(m.key() for m in ch.create)
    for (node, idx), n in sorted(listed.items()):
        if n > 1:
            c.add("mig", f"GPU listed {n} times in mig_changes", node=node, gpu=idx)

    final: dict[GpuKey, list[Instance]] = {}
    for key, gpu in c.gpus.items():
        if gpu.mig_enabled:
            final[key] = _final_layout(c, key, gpu, destroy[key], create[key])

    # Each instance hosts at most one job and exists in the final layout.
    hosts: dict[tuple[str, int, Instance], list[str]] = defaultdict(list)
    for name, p, gpu in c.placements_on_gpus():
        if p.mig is None or not gpu.mig_enabled:
            continue
        inst = p.mig.key()
        hosts[(p.node, p.gpu, inst)].append(name)
        if inst not in final[(p.node, p.gpu)]:
            c.add("mig", f"instance {inst.profile}@{inst.start} is not in the final layout",
                  job=name, node=p.node, gpu=p.gpu)
    for (node, idx, inst), names in sorted(hosts.items()):
        if len(names) > 1:
            c.add("mig", f"instance {inst.profile}@{inst.start} hosts {len(names)} jobs: "
                  f"{', '.join(sorted(names))}", node=node, gpu=idx)

    # A kept running job's instance is busy: destroying it would fail.
    for name in sorted(c.kept):
        for p in c.placed[name]:
            if p.mig is not None and p.mig.key() in destroy[(p.node, p.gpu)]:
                c.add("mig", f"destroys {p.mig.profile}@{p.mig.start}, which hosts the kept "
                      "running job", job=name, node=p.node, gpu=p.gpu)


def _final_layout(c: _Ctx, key: GpuKey, gpu: Gpu, destroy: list[Instance],
                  create: list[Instance]) -> list[Instance]:
    node, idx = key
    current = [m.key() for m in gpu.mig_instances]
    for inst, n in Counter(destroy).items():
        if inst not in current:
            c.add("mig", f"destroys {inst.profile}@{inst.start}, not in the current layout",
                  node=node, gpu=idx)
        elif n > 1:
            c.add("mig", f"destroys {inst.profile}@{inst.start} {n} times", node=node, gpu=idx)
    remaining = [i for i in current if i not in destroy]
    for inst in create:
        if inst in remaining:
            c.add("mig", f"creates {inst.profile}@{inst.start}, which already exists",
                  node=node, gpu=idx)
    layout = remaining + create
    spec = c.catalog.get(gpu.model)
    if spec is not None and (create or destroy):
        for msg in layout_violations(spec, layout):
            c.add("mig", f"invalid final layout: {msg}", node=node, gpu=idx)
    return layout


# ---------------------------------------------------------------- 5. shared GPUs


def _check_shared(c: _Ctx) -> None:
    fractions: dict[GpuKey, float] = defaultdict(float)
    memory: dict[GpuKey, float] = defaultdict(float)
    whole: dict[GpuKey, list[str]] = defaultdict(list)
    sharers: dict[GpuKey, list[str]] = defaultdict(list)
    for name, p, gpu in c.placements_on_gpus():
        key = (p.node, p.gpu)
        if p.fraction is not None:
            if gpu.mig_enabled:
                c.add("shared", "shared placement on a MIG-enabled GPU",
                      job=name, node=p.node, gpu=p.gpu)
            fractions[key] += p.fraction
            memory[key] += c.jobs[name].gpu_memory_gib or 0.0
            sharers[key].append(name)
        elif p.mig is None and c.jobs[name].shape == "whole":
            whole[key].append(name)
    for key in sorted(sharers):
        node, idx = key
        names = ", ".join(sorted(sharers[key]))
        if fractions[key] > 1 + CAPACITY_TOL:
            c.add("shared", f"fractions sum to {fractions[key]:.6g} > 1 ({names})",
                  node=node, gpu=idx)
        got = c.model_of(key)
        cap = got[1].memory_gib if got else None
        if cap is not None and memory[key] > cap + CAPACITY_TOL:
            c.add("shared", f"shared jobs need {memory[key]:.6g} GiB > the GPU's {cap:.6g} "
                  f"({names})", node=node, gpu=idx)
        if whole[key]:
            c.add("shared", f"shared jobs ({names}) beside whole-GPU job "
                  f"{', '.join(sorted(whole[key]))}", node=node, gpu=idx)


# ---------------------------------------------------------------- 6. host resources


def _check_host_resources(c: _Ctx) -> None:
    cpu: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    for name, p, _ in c.placements_on_gpus():
        job = c.jobs[name]
        # A gang's host request is split pro rata over its GPUs (docs/semantics.md).
        part = 1.0 / job.gpus if job.gpus else 1.0
        cpu[p.node] += (job.cpu_millicores or 0.0) * part
        mem[p.node] += (job.host_memory_gib or 0.0) * part
    for name in sorted(set(cpu) | set(mem)):
        node = c.nodes[name]
        for what, used, cap in (("cpu_millicores", cpu[name], node.cpu_millicores),
                                ("memory_gib", mem[name], node.memory_gib)):
            if cap is not None and used > cap * (1 + CAPACITY_TOL) + CAPACITY_TOL:
                c.add("host_resources", f"{what}: placed jobs need {used:.6g} > {cap:.6g}",
                      node=name)


# ---------------------------------------------------------------- 7. running jobs


def _running_outcome(c: _Ctx) -> tuple[list[str], list[str]]:
    """(moved, stopped) running jobs, in request order."""
    moved = [n for n, j in c.jobs.items() if j.current and n in c.placed and n not in c.kept]
    stopped = [n for n, j in c.jobs.items() if j.current and n not in c.placed]
    return moved, stopped


def _check_running(c: _Ctx) -> None:
    moved, stopped = _running_outcome(c)
    # An infeasible plan reports that the hard constraints conflict; it keeps nothing.
    if c.plan.status != "infeasible":
        for name in moved:
            if not c.jobs[name].preemptible:
                c.add("running", "non-preemptible running job is moved off its current "
                      "placement", job=name)
        for name in stopped:
            if not c.jobs[name].preemptible:
                c.add("running", "non-preemptible running job is stopped", job=name)
            elif not c.request.policy.allow_preemption:
                c.add("running", "running job is stopped while allow_preemption is false",
                      job=name)
    for label, listed, truth in (("preempted", c.plan.preempted, stopped),
                                 ("migrated", c.plan.migrated, moved)):
        for name, n in Counter(listed).items():
            if n > 1:
                c.add("running", f"{label} lists the job {n} times", job=name)
        for name in sorted(set(listed) - set(truth)):
            c.add("running", f"listed in {label} but the plan does not "
                  f"{'stop' if label == 'preempted' else 'move'} it", job=name)
        for name in truth:
            if name not in listed:
                c.add("running", f"{'stopped' if label == 'preempted' else 'moved'} running "
                      f"job missing from {label}", job=name)


# ---------------------------------------------------------------- 8. objective


def _speed(job: Job, model: str, spec: GpuModel) -> float:
    if job.throughput:
        return job.throughput.get(model, 0.0)
    return spec.relative_speed


def _size(job: Job, spec: GpuModel) -> float:
    if job.gpus is not None:
        return float(job.gpus)
    if job.gpu_share is not None:
        return job.gpu_share
    if job.mig is not None:
        demanded = job.mig.compute_slices
    else:
        prof = spec.profile(job.mig_profile or "")
        demanded = prof.compute_slices if prof is not None else 0
    return demanded / spec.compute_slices


def _value(job: Job, model: str, spec: GpuModel) -> float:
    """value_j(m) = weight_j * size_j(m) * speed_j(m)."""
    return job.weight * _size(job, spec) * _speed(job, model, spec)


def _remaining(job: Job) -> float:
    return max(job.remaining_work, 1.0) if job.remaining_work is not None else HORIZON_S


def _job_term_throughput(job: Job, model: str, spec: GpuModel) -> float:
    return _value(job, model, spec)


def _job_term_jct(job: Job, model: str, spec: GpuModel) -> float:
    return job.weight * _speed(job, model, spec) * HORIZON_S / _remaining(job)


def _job_term_makespan(job: Job, model: str, spec: GpuModel) -> float:
    return _value(job, model, spec) * _remaining(job) / HORIZON_S


#: Per-job contribution of each additive objective (before migration/preemption costs).
_ADDITIVE: Mapping[str, Callable[[Job, str, GpuModel], float]] = {
    "throughput": _job_term_throughput,
    "priority_fifo": _job_term_throughput,
    "jct": _job_term_jct,
    "makespan": _job_term_makespan,
}


def _placed_models(c: _Ctx) -> dict[str, tuple[str, GpuModel]]:
    """Placed job -> the model of its first placement (jobs on unknown GPUs are skipped)."""
    out: dict[str, tuple[str, GpuModel]] = {}
    for name, pls in c.placed.items():
        got = c.model_of((pls[0].node, pls[0].gpu))
        if got is not None:
            out[name] = got
    return out


def _fairness(c: _Ctx, models: Mapping[str, tuple[str, GpuModel]]) -> float:
    """min over tenants k of (value of k's placed jobs) / D_k (docs/semantics.md)."""
    # Models present in each mode: MIG jobs need MIG-enabled GPUs, the others non-MIG ones.
    present = {mig: {g.model for g in c.gpus.values() if g.mig_enabled == mig}
               for mig in (False, True)}
    demand: dict[str, float] = defaultdict(float)
    got: dict[str, float] = defaultdict(float)
    for name, job in c.jobs.items():
        mode = job.mig is not None or job.mig_profile is not None
        options = {m for m in present[mode]
                   if m in c.catalog and model_eligible(job, m, c.catalog[m])}
        if job.current:
            # A running job's own model counts even when no longer eligible.
            cur = c.gpus.get((job.current[0].node, job.current[0].gpu))
            if cur is not None and cur.model in c.catalog:
                options.add(cur.model)
        if options:
            demand[job.tenant] += max(_value(job, m, c.catalog[m]) for m in options)
        if name in models:
            got[job.tenant] += _value(job, *models[name])
    return min((got[k] / d for k, d in demand.items() if d > 0), default=0.0)


def recompute_objective(request: PlanRequest, plan: Plan) -> float:
    """The objective of `plan` under `request.policy.objective`, from its placements only."""
    c = _context(request, plan)
    return _objective(c)


def _objective(c: _Ctx) -> float:
    models = _placed_models(c)
    objective = c.request.policy.objective
    if objective == "fairness":
        return _fairness(c, models)
    moved, stopped = _running_outcome(c)
    policy = c.request.policy
    costs = (policy.migration_cost * len(moved) + policy.preemption_cost * len(stopped)
             + _topology_costs(c))
    term = _ADDITIVE[objective]
    return sum(term(c.jobs[n], *models[n]) for n in c.jobs if n in models) - costs


def _topology_costs(c: _Ctx) -> float:
    """sum over placed jobs with a preferred level of topology_cost * (domains spanned
    there - 1) (contract 5.5)."""
    cost = c.request.policy.topology_cost
    total = 0.0
    for name, pls in c.placed.items():
        job = c.jobs[name]
        level = job.topology.preferred if job.topology is not None else None
        if level is None:
            continue
        spanned = {_node_domain(c, p.node, level) for p in pls if p.node in c.nodes}
        total += cost * max(len(spanned) - 1, 0)
    return total


def _check_objective(c: _Ctx) -> None:
    plan = c.plan
    value = plan.objective_value
    if not math.isfinite(value):
        c.add("objective", f"objective_value {value} is not finite")
        return
    expected = _objective(c)
    tol = OBJECTIVE_RTOL * max(1.0, abs(expected))
    if abs(value - expected) > tol:
        c.add("objective", f"objective_value {value:.9g} but the plan's "
              f"{c.request.policy.objective} objective is {expected:.9g}")
    bound = plan.best_bound
    if bound is not None:
        if not math.isfinite(bound) or bound < value - OBJECTIVE_RTOL * max(1.0, abs(value)):
            c.add("objective", f"best_bound {bound} is below objective_value {value:.9g}")
        elif plan.gap is not None:
            want = (bound - value) / max(1.0, abs(bound))
            if not math.isfinite(plan.gap) or abs(plan.gap - want) > OBJECTIVE_RTOL * max(
                1.0, abs(want)
            ):
                c.add("objective", f"gap {plan.gap} but (bound - value) / max(1, |bound|) "
                      f"= {want:.9g}")


# ---------------------------------------------------------------- driver


def _context(request: PlanRequest, plan: Plan) -> _Ctx:
    nodes: dict[str, Node] = {}
    gpus: dict[GpuKey, Gpu] = {}
    for node in request.cluster.nodes:
        nodes.setdefault(node.name, node)
        for gpu in node.gpus:
            gpus.setdefault((node.name, gpu.index), gpu)
    jobs: dict[str, Job] = {}
    for job in request.jobs:
        jobs.setdefault(job.name, job)
    c = _Ctx(request=request, plan=plan, catalog=request.cluster.catalog(),
             jobs=jobs, nodes=nodes, gpus=gpus)
    for a in plan.assignments:
        if a.job in jobs and a.placements and a.job not in c.placed:
            c.placed[a.job] = list(a.placements)
    c.kept = {n for n, pls in c.placed.items() if _is_kept(jobs[n], pls)}
    return c


#: The rule checks, keyed by rule name (contract section 3 order).
CHECKS: Mapping[str, Callable[[_Ctx], None]] = {
    "accounting": _check_accounting,
    "eligibility": _check_eligibility,
    "whole_gpu": _check_whole_gpu,
    "mig": _check_mig,
    "shared": _check_shared,
    "host_resources": _check_host_resources,
    "running": _check_running,
    "topology": _check_topology,
    "objective": _check_objective,
}

#: The rule names, in the order of contract section 3.
RULES: tuple[str, ...] = tuple(CHECKS)


def validate_plan(request: PlanRequest, plan: Plan) -> list[Violation]:
    """Every violation of contract section 3 by `plan` for `request` (empty = valid)."""
    c = _context(request, plan)
    for check in CHECKS.values():
        check(c)
    return c.out
