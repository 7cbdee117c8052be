"""Why a request or a job cannot be planned, known before solving.

- `static_reasons(request)`: the static reasons of the new jobs no plan can place
  (`no_eligible_gpu`, `gang_too_large`, `infeasible_constraints`); one implementation in
  `models.reasons`, shared with the heuristics and re-exported here for the driver.
- `hard_conflicts(request)`: conflicts among the running jobs that must keep their
  placement, which make the whole request infeasible.
"""

from __future__ import annotations

from collections import defaultdict

from models import PlanRequest
from models.reasons import static_reasons
from models.rules import fits

__all__ = ["hard_conflicts", "static_reasons"]


def hard_conflicts(request: PlanRequest) -> list[str]:
    """Conflicts among the running jobs that must keep their placement (non-preemptible
    ones): two on one whole GPU, shares over 1 or over memory, one MIG instance claimed
    twice, host CPU / memory over capacity. Any such conflict makes the request infeasible.
    """
    catalog = request.cluster.catalog()
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
    # GPU models, read only for shared GPUs (a pass over every GPU otherwise)
    models = {(n.name, g.index): g.model for n in request.cluster.nodes
              for g in n.gpus} if share else {}
    for key, items in share.items():
        if not fits(sum(f for f, _, _ in items), 1.0):
            out.append(f"non-preemptible shares on GPU {key[0]}/{key[1]} sum over 1")
        cap = catalog[models[key]].memory_gib
        if cap is not None and not fits(sum(m for _, m, _ in items), cap):
            out.append(f"non-preemptible shares on GPU {key[0]}/{key[1]} exceed its memory")
    for (node, gpu, prof, start), names in inst.items():
        if len(names) > 1:
            out.append(f"non-preemptible jobs {', '.join(names)} hold the same MIG instance "
                       f"{prof}@{start} on {node}/{gpu}")
    for node_name, used in cpu.items():
        cap = nodes[node_name].cpu_millicores
        if cap is not None and not fits(used, cap):
            out.append(f"non-preemptible jobs exceed the CPU of node {node_name}")
    for node_name, used in mem.items():
        cap = nodes[node_name].memory_gib
        if cap is not None and not fits(used, cap):
            out.append(f"non-preemptible jobs exceed the memory of node {node_name}")
    return out
