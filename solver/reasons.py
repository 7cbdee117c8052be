"""Why a request or a job cannot be planned, known before solving.

- `static_reasons(request)`: the static reasons of the new jobs no plan can place
  (`no_eligible_gpu`, `gang_too_large`, `infeasible_constraints`); one implementation in
  `models.reasons`, shared with the heuristics and re-exported here for the driver.
- `hard_conflicts(request)`: conflicts among the running jobs that must keep their
  placement, which make the whole request infeasible.
"""

from __future__ import annotations

from collections import defaultdict

from models import Node, PlanRequest
from models.objective import compiled_infos
from models.reasons import static_reasons
from models.rules import fits

__all__ = ["hard_conflicts", "static_reasons"]


def hard_conflicts(request: PlanRequest) -> list[str]:
    """Conflicts among the running jobs that must keep their placement (non-preemptible
    ones): two on one whole GPU, shares over 1 or over memory, one MIG instance claimed
    twice, host CPU / memory over capacity. Any such conflict makes the request infeasible.
    The pinned jobs are found through the JobInfos when the request is compiled
    (`compiled_infos`: a pass over them costs a fraction of one over the job models).
    """
    whole: dict[tuple[str, int], list[str]] = defaultdict(list)
    share: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    inst: dict[tuple[str, int, str, int], list[str]] = defaultdict(list)
    cpu: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    infos = compiled_infos(request)
    # (name, current placements, shape, GPU memory, CPU, host memory) of each pinned job
    pinned = ([(j.name, j.current, j.shape, j.gpu_memory_gib or 0.0, j.cpu_millicores or 0.0,
                j.host_memory_gib or 0.0)
               for j in request.jobs if j.current and not j.preemptible] if infos is None
              else [(i.name, i.current, i.shape, i.gpu_mem, i.cpu, i.host_mem)
                    for i in infos if i.current and not i.preemptible])
    for name, current, shape, gpu_mem, cpu_use, mem_use in pinned:
        part = 1.0 / len(current or ()) if shape == "whole" else 1.0
        for p in current or ():
            key = (p.node, p.gpu)
            if p.mig is not None:
                inst[(p.node, p.gpu, p.mig.profile, p.mig.start)].append(name)
            elif p.fraction is not None:
                share[key].append((p.fraction, gpu_mem, name))
            else:
                whole[key].append(name)
            cpu[p.node] += cpu_use * part
            mem[p.node] += mem_use * part
    out: list[str] = []
    for key, names in whole.items():
        if len(names) > 1 or key in share:
            others = names + [n for _, _, n in share.get(key, [])]
            out.append(f"non-preemptible jobs {', '.join(others)} share GPU {key[0]}/{key[1]}")
    # Nodes and GPU models are looked up for the nodes the pinned jobs use only: a map of
    # every node or GPU of a large cluster costs more than the whole pass.
    nodes = _nodes_named(request, {*cpu, *(node for node, _ in share)})
    catalog = request.cluster.catalog()
    for key, items in share.items():
        if not fits(sum(f for f, _, _ in items), 1.0):
            out.append(f"non-preemptible shares on GPU {key[0]}/{key[1]} sum over 1")
        cap = catalog[_gpu_model(nodes[key[0]], key[1])].memory_gib
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


def _nodes_named(request: PlanRequest, names: set[str]) -> dict[str, Node]:
    """The nodes of `request`'s cluster named in `names`, by name."""
    return {n.name: n for n in request.cluster.nodes if n.name in names} if names else {}


def _gpu_model(node: Node, index: int) -> str:
    """The model of GPU `index` of `node` (running placements name existing GPUs: the
    request's validation checks them)."""
    return next(g.model for g in node.gpus if g.index == index)
