"""Why a job cannot be placed whatever the plan: reasons known before solving.

- `no_eligible_gpu`: no usable GPU of an eligible model (or MIG profile) in the cluster;
- `gang_too_large`: more eligible GPUs than one node / domain / the cluster has;
- `infeasible_constraints`: the host CPU / memory request fits no eligible node.
Jobs without such a reason that stay unplaced lack capacity (`insufficient_capacity`).
Running jobs are never given a static reason: they can always be kept.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from models import GpuModel, Job, PlanRequest, mig_profiles_for, model_eligible


def _host_ok(job: Job, cpu: float | None, mem: float | None, share: float = 1.0) -> bool:
    return not ((cpu is not None and (job.cpu_millicores or 0.0) * share > cpu + 1e-9)
                or (mem is not None and (job.host_memory_gib or 0.0) * share > mem + 1e-9))


@dataclass
class _NodeSummary:
    """Per node: usable / any GPUs per (model, mig mode), and per MIG model the usable GPUs
    that hold an instance of each profile now."""

    name: str
    domain: str
    cpu: float | None
    mem: float | None
    usable: dict[tuple[str, bool], int] = field(default_factory=lambda: defaultdict(int))
    present: set[tuple[str, bool]] = field(default_factory=set)
    profiles: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))


def _summaries(request: PlanRequest) -> list[_NodeSummary]:
    out = []
    for node in request.cluster.nodes:
        s = _NodeSummary(node.name, node.topology_domain if node.topology_domain is not None
                         else f"\x00{node.name}", node.cpu_millicores, node.memory_gib)
        for gpu in node.gpus:
            key = (gpu.model, gpu.mig_enabled)
            s.present.add(key)
            if node.schedulable and gpu.healthy:
                s.usable[key] += 1
                for prof in {i.profile for i in gpu.mig_instances}:
                    s.profiles[(gpu.model, prof)] += 1
        out.append(s)
    return out


def _signature(job: Job) -> tuple[object, ...]:
    return (job.shape, job.gpus, job.single_node, job.same_domain, job.mig_profile,
            None if job.mig is None else (job.mig.compute_slices, job.mig.memory_gib),
            job.gpu_memory_gib, tuple(sorted(job.throughput or {})),
            None if job.allowed_models is None else tuple(sorted(job.allowed_models)),
            job.cpu_millicores, job.host_memory_gib)


def static_reasons(request: PlanRequest) -> dict[str, tuple[str, str]]:
    """job name -> (reason, detail) for new jobs that no plan can place.

    Works on per-node summaries and memoises by job shape, so it stays linear in
    jobs + nodes on large requests."""
    catalog = request.cluster.catalog()
    nodes = _summaries(request)
    models = {m for s in nodes for m, _ in s.present}
    memo: dict[tuple[object, ...], tuple[str, str] | None] = {}
    out: dict[str, tuple[str, str]] = {}
    for job in request.jobs:
        if job.current:
            continue
        sig = _signature(job)
        if sig not in memo:
            memo[sig] = _reason(request, job, catalog, nodes, models)
        why = memo[sig]
        if why is not None:
            out[job.name] = why
    return out


def _reason(request: PlanRequest, job: Job, catalog: dict[str, GpuModel],
            nodes: list[_NodeSummary], models: set[str]) -> tuple[str, str] | None:
    mig = job.shape == "mig"
    fixed = not request.policy.allow_mig_reconfiguration
    ok_models = {}
    for m in models:
        spec = catalog[m]
        if not model_eligible(job, m, spec):
            continue
        ok_models[m] = {p.name for p in mig_profiles_for(job, spec)} if mig else set()
    g = job.gpus or 1
    whole_multi = job.shape == "whole" and not job.single_node and g > 1
    share = 1.0 / g if whole_multi else 1.0
    per_node_model: dict[tuple[str, str], int] = {}
    host_ok_nodes: set[str] = set()
    any_model = False
    for s in nodes:
        for m, profs in ok_models.items():
            if (m, mig) not in s.present:
                continue
            if mig and fixed:
                n = sum(s.profiles.get((m, p), 0) for p in profs)
                if not any(s.profiles.get((m, p), 0) for p in profs):
                    # no current instance of a covering profile on this node
                    n = 0
                any_model = any_model or n > 0
            else:
                any_model = True
                n = s.usable.get((m, mig), 0)
            if n <= 0:
                continue
            per_node_model[(s.name, m)] = n
            if _host_ok(job, s.cpu, s.mem, share):
                host_ok_nodes.add(s.name)
    if not per_node_model:
        detail = ("eligible GPUs exist only on unhealthy GPUs or unschedulable nodes"
                  if any_model else "no GPU in the cluster is of an eligible model")
        return ("no_eligible_gpu", detail)
    if job.shape == "whole":
        if not whole_multi:
            best = max(per_node_model.values())
            if best < g:
                return ("gang_too_large", f"needs {g} GPUs of one model on one node; the "
                                          f"largest eligible node has {best}")
            fits = any(n >= g and node in host_ok_nodes
                       for (node, _m), n in per_node_model.items())
        else:
            domain = {s.name: s.domain for s in nodes}
            by_key: dict[tuple[str, str], int] = defaultdict(int)
            for (nname, m), n in per_node_model.items():
                by_key[(m, domain[nname] if job.same_domain else "")] += n
            best = max(by_key.values())
            if best < g:
                where = "domain" if job.same_domain else "cluster"
                return ("gang_too_large", f"needs {g} GPUs of one model in one {where}; at "
                                          f"most {best} are eligible")
            fits = bool(host_ok_nodes)
    else:
        fits = bool(host_ok_nodes)
    if not fits:
        return ("infeasible_constraints", "its host CPU / memory request fits no eligible node")
    return None


def hard_conflicts(request: PlanRequest) -> list[str]:
    """Conflicts among the running jobs that must keep their placement (non-preemptible
    ones): two on one whole GPU, shares over 1 or over memory, one MIG instance claimed
    twice, host CPU / memory over capacity. Any such conflict makes the request infeasible.
    """
    catalog = request.cluster.catalog()
    models = {(n.name, g.index): g.model for n in request.cluster.nodes for g in n.gpus}
    nodes = {n.name: n for n in request.cluster.nodes}
    whole: dict[tuple[str, int], list[str]] = defaultdict(list)
    share: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    inst: dict[tuple[str, int, str, int], list[str]] = defaultdict(list)
    cpu: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    for job in request.jobs:
        if not job.current or job.preemptible:
            continue
        for p in job.current:
            key = (p.node, p.gpu)
            if p.mig is not None:
                inst[(p.node, p.gpu, p.mig.profile, p.mig.start)].append(job.name)
            elif p.fraction is not None:
                share[key].append((p.fraction, job.gpu_memory_gib or 0.0, job.name))
            else:
                whole[key].append(job.name)
            part = 1.0 / len(job.current) if job.shape == "whole" else 1.0
            cpu[p.node] += (job.cpu_millicores or 0.0) * part
            mem[p.node] += (job.host_memory_gib or 0.0) * part
    out: list[str] = []
    for key, names in whole.items():
        if len(names) > 1 or key in share:
            others = names + [n for _, _, n in share.get(key, [])]
            out.append(f"non-preemptible jobs {', '.join(others)} share GPU {key[0]}/{key[1]}")
    for key, items in share.items():
        if sum(f for f, _, _ in items) > 1 + 1e-9:
            out.append(f"non-preemptible shares on GPU {key[0]}/{key[1]} sum over 1")
        cap = catalog[models[key]].memory_gib
        if cap is not None and sum(m for _, m, _ in items) > cap + 1e-9:
            out.append(f"non-preemptible shares on GPU {key[0]}/{key[1]} exceed its memory")
    for (node, gpu, prof, start), names in inst.items():
        if len(names) > 1:
            out.append(f"non-preemptible jobs {', '.join(names)} hold the same MIG instance "
                       f"{prof}@{start} on {node}/{gpu}")
    for node_name, used in cpu.items():
        cap = nodes[node_name].cpu_millicores
        if cap is not None and used > cap + 1e-9:
            out.append(f"non-preemptible jobs exceed the CPU of node {node_name}")
    for node_name, used in mem.items():
        cap = nodes[node_name].memory_gib
        if cap is not None and used > cap + 1e-9:
            out.append(f"non-preemptible jobs exceed the memory of node {node_name}")
    return out
