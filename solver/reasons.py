"""Why a job cannot be placed whatever the plan: reasons known before solving.

- `no_eligible_gpu`: no usable GPU of an eligible model (or MIG profile) in the cluster;
- `gang_too_large`: more eligible GPUs than one node / domain / the cluster has;
- `infeasible_constraints`: the host CPU / memory request fits no eligible node.
Jobs without such a reason that stay unplaced lack capacity (`insufficient_capacity`).
Running jobs are never given a static reason: they can always be kept.
"""

from __future__ import annotations

from collections import defaultdict

from models import Job, PlanRequest, mig_profiles_for, model_eligible


def _host_ok(job: Job, cpu: float | None, mem: float | None, share: float = 1.0) -> bool:
    return not ((cpu is not None and (job.cpu_millicores or 0.0) * share > cpu + 1e-9)
                or (mem is not None and (job.host_memory_gib or 0.0) * share > mem + 1e-9))


def static_reasons(request: PlanRequest) -> dict[str, tuple[str, str]]:
    """job name -> (reason, detail) for new jobs that no plan can place."""
    catalog = request.cluster.catalog()
    out: dict[str, tuple[str, str]] = {}
    for job in request.jobs:
        if job.current:
            continue
        per_node: dict[str, int] = defaultdict(int)   # usable eligible GPUs per node
        per_node_model: dict[tuple[str, str], int] = defaultdict(int)
        host_ok_nodes: set[str] = set()
        any_model = False
        for node in request.cluster.nodes:
            for gpu in node.gpus:
                spec = catalog[gpu.model]
                if not model_eligible(job, gpu.model, spec):
                    continue
                if job.shape == "mig":
                    if not gpu.mig_enabled or not mig_profiles_for(job, spec):
                        continue
                    if not request.policy.allow_mig_reconfiguration and not any(
                            p.name in {i.profile for i in gpu.mig_instances}
                            for p in mig_profiles_for(job, spec)):
                        continue
                elif gpu.mig_enabled:
                    continue
                any_model = True
                if not (node.schedulable and gpu.healthy):
                    continue
                per_node[node.name] += 1
                per_node_model[(node.name, gpu.model)] += 1
                g = job.gpus or 1
                share = 1.0 if job.single_node or g == 1 else 1.0 / g
                if _host_ok(job, node.cpu_millicores, node.memory_gib, share):
                    host_ok_nodes.add(node.name)
        if not per_node:
            detail = ("eligible GPUs exist only on unhealthy GPUs or unschedulable nodes"
                      if any_model else "no GPU in the cluster is of an eligible model")
            out[job.name] = ("no_eligible_gpu", detail)
            continue
        if job.shape == "whole":
            g = job.gpus or 1
            if job.single_node or g == 1:
                best = max(per_node_model.values())
                if best < g:
                    out[job.name] = ("gang_too_large",
                                     f"needs {g} GPUs of one model on one node; the largest "
                                     f"eligible node has {best}")
                    continue
                fits = any(n >= g and node in host_ok_nodes
                           for (node, _m), n in per_node_model.items())
            else:
                by_model: dict[tuple[str, str], int] = defaultdict(int)
                nodes = {n.name: n for n in request.cluster.nodes}
                for (nname, model), n in per_node_model.items():
                    dom = nodes[nname].topology_domain if job.same_domain else ""
                    key = (model, dom if dom is not None else f"\x00{nname}")
                    by_model[key] += n
                best = max(by_model.values())
                if best < g:
                    where = "domain" if job.same_domain else "cluster"
                    out[job.name] = ("gang_too_large",
                                     f"needs {g} GPUs of one model in one {where}; at most "
                                     f"{best} are eligible")
                    continue
                fits = bool(host_ok_nodes)
        else:
            fits = bool(host_ok_nodes)
        if not fits:
            out[job.name] = ("infeasible_constraints",
                             "its host CPU / memory request fits no eligible node")
    return out


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
