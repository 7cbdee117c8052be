"""Priority classes after the fact: no plan stops a higher-class running job that removing
only lower-class work would keep (contract 5.4, the validator's `priority` rule).

`restore_displaced(request, result)` looks, highest class first, at each preemptible
running job h that `result` stops. Let C be the removable jobs of lower classes (new ones,
and running ones that may be preempted) on h's GPUs and on h's host-limited nodes (the
validator's `priority` rule uses the same C; which of a tenant's jobs use its quota limit
is left to the levels). When taking C out lets h be kept
exactly where it runs without serving less guaranteed usage (contract 5.3's first level),
h is kept and the jobs of C are put back where they still fit (higher classes first, best
fit), the others left out. Each such step raises h's class and touches only lower ones,
so the levels rise lexicographically and the loop ends; the result passes the rule.

Every planner's answer goes through it (solver/driver.py): heuristics, LP rounding and a
time-limited exact search can all leave such a job behind; a proven lexicographic optimum
never does, so it is returned unchanged.
"""

from __future__ import annotations

from heuristics.greedy import Greedy
from heuristics.result import HeuristicResult
from models import PlanRequest
from models.instance import JobInfo
from models.objective import objective_value_of, same_placement
from models.rules import HOST_TOL, guaranteed_served, priority_classes


def _occupants(g: Greedy, gids: list[int]) -> set[str]:
    """The jobs on the GPUs `gids`."""
    st = g.state
    out: set[str] = set()
    for gid in gids:
        slot = st.gpus[gid]
        if slot.whole_job is not None:
            out.add(slot.whole_job)
        out.update(slot.share_jobs)
        out.update(slot.mig_used.values())
    return out


def _removable(g: Greedy, h: JobInfo) -> list[JobInfo]:
    """C for running job h (module doc): the removable lower-class jobs on its GPUs and
    on its host-limited nodes."""
    st = g.state
    cur = h.current or []
    names = _occupants(g, [st.gid_of[(p.node, p.gpu)] for p in cur])
    for node in {p.node for p in cur}:
        slot = st.nodes[st.node_of[node]]
        if slot.cpu_cap is not None or slot.mem_cap is not None:
            names |= _occupants(g, slot.gpus)
    out = []
    for name in sorted(names):
        info = g.by_name[name]
        if info.job.priority < h.job.priority and not (info.current and not info.preemptible):
            out.append(info)
    return out


def _restore(g: Greedy, h: JobInfo) -> bool:
    """Keep running job h by taking out lower-class work, if that serves no less
    guaranteed usage; True when done."""
    st = g.state
    cur = h.current or []
    worth = objective_value_of(h.job, st.model_of(cur), st.catalog,
                               g.request.policy.objective)
    if worth + g.request.policy.preemption_cost <= HOST_TOL:
        return False
    removed = _removable(g, h)
    if not removed:
        return False
    before = guaranteed_served(st.quotas, st.quota_used)
    old = {info.name: st.remove(info) for info in removed}
    if st.conflicts(h, cur) is None:
        st.place(h, list(cur))
        if guaranteed_served(st.quotas, st.quota_used) >= before - 1e-9 * max(1.0, before):
            g.reasons.pop(h.name, None)
            for info in sorted(removed, key=lambda i: (-i.job.priority, -i.density, i.name)):
                if not g.place(info):
                    g.reasons[info.name] = (
                        "lower_priority", f"its place went to {h.name}, of a higher class")
            return True
        st.remove(h)
    for info in removed:
        pl = old[info.name]
        if pl:
            st.place(info, pl)
    return False


def restore_displaced(request: PlanRequest, result: HeuristicResult) -> HeuristicResult:
    """`result` with every displaced higher-class running job kept (module doc)."""
    policy = request.policy
    classes = priority_classes(request.jobs)
    if len(classes) < 2 or not policy.allow_preemption or not any(
            j.current and j.preemptible and j.priority > classes[-1]
            and not result.placements.get(j.name) for j in request.jobs):
        return result
    g = Greedy(request)
    st = g.state
    by_name = g.by_name
    names = sorted(result.placements, key=lambda n: 0 if by_name[n].current and
                   same_placement(result.placements[n], by_name[n].current or []) else 1)
    for name in names:
        pl = result.placements[name]
        if pl:
            st.place(by_name[name], list(pl))
    g.reasons.update(result.reasons)
    changed = True
    done = False
    while changed:
        changed = False
        stopped = sorted((i for i in g.infos if i.current and i.preemptible
                          and i.name not in st.placed),
                         key=lambda i: (-i.job.priority, i.name))
        for h in stopped:
            if h.name not in st.placed and _restore(g, h):
                changed = done = True
    return g.result() if done else result
