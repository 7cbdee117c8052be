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

`reclaim_nodes(request, result)` takes GPUs back for the guarantees (contract 5.3's first
level). Best fit places a gang where a node has room; when the jobs within the other
tenants' guarantees are spread over every node, no node has room for a tenant's 8-GPU
gang even though preempting borrowed work and moving those jobs would make some. So for
each unplaced whole-GPU job (at most one node's worth) of a tenant below its guarantee,
highest class first, then the largest, it tries the few nodes of each model where it
would serve more guarantee that are cheapest to clear: on each, the GPUs it needs whose
occupants hold the fewest guarantees, then are of the lowest class, then are worth the
least (none may be a non-preemptible running job, nor a running one without
`allow_preemption`). Those occupants are taken out, the job placed, the occupants put
back where they fit (those holding a guarantee first, best fit; one that no longer fits
takes the place of one borrowed job elsewhere, `_make_room`), the others left out. The
step is kept only when the guaranteed usage served rises: the plan is then
lexicographically better (the guarantees are the first level, above every class),
whatever the lower levels lose; `restore_displaced`, run after it (`settle_levels`),
puts back a higher-class job that the step stopped where that serves no less guarantee.
"""

from __future__ import annotations

from heuristics.greedy import Greedy, guarantee_models
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.instance import JobInfo
from models.objective import objective_value_of, same_placement
from models.rules import HOST_TOL, guaranteed_served, priority_classes, quota_usage

#: nodes tried per model for one job, and node clearings tried per plan
#: (`reclaim_nodes`; after a failure, the other jobs of that tenant and size are skipped)
RECLAIM_NODES = 4
RECLAIM_TRIES = 24


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


def _greedy_of(request: PlanRequest, result: HeuristicResult) -> Greedy:
    """A placer holding `result` (kept running jobs first) and its reasons."""
    g = Greedy(request)
    by_name = g.by_name
    names = sorted(result.placements, key=lambda n: 0 if by_name[n].current and
                   same_placement(result.placements[n], by_name[n].current or []) else 1)
    for name in names:
        pl = result.placements[name]
        if pl:
            g.state.place(by_name[name], list(pl))
    g.reasons.update(result.reasons)
    return g


def restore_displaced(request: PlanRequest, result: HeuristicResult) -> HeuristicResult:
    """`result` with every displaced higher-class running job kept (module doc)."""
    policy = request.policy
    classes = priority_classes(request.jobs)
    if len(classes) < 2 or not policy.allow_preemption or not any(
            j.current and j.preemptible and j.priority > classes[-1]
            and not result.placements.get(j.name) for j in request.jobs):
        return result
    g = _greedy_of(request, result)
    st = g.state
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


def _holds_guarantee(g: Greedy, info: JobInfo, model: str) -> bool:
    """Whether taking placed job `info` (on `model`) out would serve less guarantee."""
    st = g.state
    size = quota_usage(info.job, st.catalog[model], len(st.placed[info.name]))
    return any(st.quotas[t].guaranteed.get(k, 0.0) > 0 and st.quota_used.get((t, k), 0.0)
               - size < st.quotas[t].guaranteed[k] - HOST_TOL
               for t, k in st.quota_keys(info.job.tenant, model))


def _clear_cost(g: Greedy, info: JobInfo, ni: int, model: str
                ) -> tuple[tuple[int, int, float], list[JobInfo]] | None:
    """(cost, occupants) of freeing `info.gpus` GPUs of `model` on node `ni` for gang
    `info` (module doc): the GPUs whose occupants cost least (free ones first, then by
    the occupants holding a guarantee, their highest class, their value); all of the
    node's GPUs when its host CPU or memory is limited. None when it has too few such GPUs
    or an occupant may not be moved (a non-preemptible running job, or a running job
    without `allow_preemption`: it might not find room again)."""
    st = g.state
    slot = st.nodes[ni]
    stay = not g.request.policy.allow_preemption
    per_gpu: list[tuple[tuple[int, int, float], set[str]]] = []
    for gid in slot.gpus:
        gpu = st.gpus[gid]
        if gpu.model != model or not gpu.usable or gpu.mig:
            continue
        names = _occupants(g, [gid])
        holding = top = 0
        value = 0.0
        for name in names:
            o = g.by_name[name]
            if o.current and (stay or not o.preemptible):
                break
            pl = st.placed[name]
            holding += _holds_guarantee(g, o, st.model_of(pl))
            top = max(top, o.job.priority + 1)
            value += g.value_at(o, pl)
        else:
            per_gpu.append(((holding, top, value), names))
    if len(per_gpu) < info.gpus:
        return None
    per_gpu.sort(key=lambda c: c[0])
    host = slot.cpu_cap is not None or slot.mem_cap is not None
    chosen = per_gpu if host else per_gpu[:info.gpus]
    names = set().union(*(n for _, n in chosen))
    if host and any(g.by_name[n].current and (stay or not g.by_name[n].preemptible)
                    for n in _occupants(g, slot.gpus)):
        return None
    cost = (sum(c[0] for c, _ in chosen), max((c[1] for c, _ in chosen), default=0),
            sum(c[2] for c, _ in chosen))
    return cost, [g.by_name[n] for n in sorted(names)]


def _try_node(g: Greedy, info: JobInfo, model: str, occupants: list[JobInfo]) -> bool:
    """Clear the occupants, place gang `info` on `model`, put them back where they fit;
    kept when the guaranteed usage served rises (module doc), else undone."""
    st = g.state
    before = guaranteed_served(st.quotas, st.quota_used)
    old = {o.name: st.remove(o) for o in occupants}
    found = g.find(info, [model])
    if found is not None:
        st.place(info, found)
        back = sorted(occupants, key=lambda o: (
            -_holds_guarantee_at(g, o, old[o.name]), -o.job.priority, -o.density, o.name))
        evicted: dict[str, list[Placement]] = {}  # borrowed jobs `_make_room` took out
        for o in back:
            if not g.place(o) and _holds_guarantee_at(g, o, old[o.name]):
                _make_room(g, o, info, evicted)
        if guaranteed_served(st.quotas, st.quota_used) > before + HOST_TOL:
            g.reasons.pop(info.name, None)
            for o in [*occupants, *(g.by_name[n] for n in evicted)]:
                if o.name not in st.placed and not o.current:
                    g.reasons[o.name] = ("lower_priority", f"its GPUs went to {info.name}, "
                                         f"reclaimed for tenant {info.job.tenant}'s "
                                         "guaranteed quota")
            return True
        st.remove(info)
        for o in occupants:
            st.remove(o)
        old.update(evicted)
    for name, pl in old.items():
        if pl:
            st.place(g.by_name[name], pl)
    return False


def _make_room(g: Greedy, o: JobInfo, gang: JobInfo,
               evicted: dict[str, list[Placement]]) -> bool:
    """Place `o`, which held a guarantee before the clearing for `gang`, by taking out one
    placed job that holds none (borrowed work, new or preemptible) on a model `o` may use:
    the first of at most RECLAIM_NODES such jobs, the smallest at least `o`'s size first,
    whose place fits it; the job taken out goes into `evicted` with its placements (the
    caller puts it back if the clearing is undone). True when placed."""
    st = g.state
    models = set(g.ranked_models(o))
    stay = not g.request.policy.allow_preemption
    tried = 0
    for x in sorted((g.by_name[n] for n in st.placed),
                    key=lambda i: (i.size < o.size, i.size, i.name)):
        if tried >= RECLAIM_NODES:
            break
        pl = st.placed[x.name]
        if (x.name == gang.name or not pl
                or (x.current and (stay or not x.preemptible))
                or st.model_of(pl) not in models
                or _holds_guarantee(g, x, st.model_of(pl))):
            continue
        tried += 1
        st.remove(x)
        if g.place(o):
            evicted[x.name] = pl
            return True
        st.place(x, pl)
    return False


def _holds_guarantee_at(g: Greedy, info: JobInfo, pl: list[Placement] | None) -> bool:
    """Whether `info`, placed at `pl` before the clearing, counted toward a guarantee
    (its tenant's usage is then lower by its size: the test is against that)."""
    if not pl:
        return False
    st = g.state
    model = st.model_of(pl)
    return any(st.quotas[t].guaranteed.get(k, 0.0) > 0 and st.quota_used.get((t, k), 0.0)
               < st.quotas[t].guaranteed[k] - HOST_TOL
               for t, k in st.quota_keys(info.job.tenant, model))


def _reclaim_one(g: Greedy, info: JobInfo, nodes: dict[str, list[int]],
                 tries: list[int]) -> bool:
    """Try the cheapest nodes to clear for job `info` on each model where it would serve
    more guarantee (module doc; `nodes`: model -> the nodes with GPUs of it; `tries`: the
    clearings left, decremented); True when it was placed."""
    for model in guarantee_models(g, info):
        costs = []
        for ni in nodes.get(model, []):
            got = _clear_cost(g, info, ni, model)
            if got is not None:
                costs.append((got[0], ni, got[1]))
        costs.sort(key=lambda c: (c[0], c[1]))
        for _, _, occupants in costs[:RECLAIM_NODES]:
            if tries[0] <= 0:
                return False
            tries[0] -= 1
            if _try_node(g, info, model, occupants):
                return True
    return False


def _reclaim_candidates(g: Greedy) -> list[JobInfo]:
    """The unplaced whole-GPU jobs of at most one node's worth (module doc), highest class
    first, then the largest."""
    st = g.state
    most = max((len(n.gpus) for n in st.nodes), default=0)
    out = [i for i in g.infos if i.name not in st.placed and i.shape == "whole"
           and not i.elastic and 1 <= i.gpus <= most
           and not (i.current and not i.preemptible)]
    return sorted(out, key=lambda i: (-i.job.priority, -i.gpus, i.name))


def reclaim_nodes(request: PlanRequest, result: HeuristicResult) -> HeuristicResult:
    """`result` with GPUs taken back for the jobs of tenants below their guarantees
    (module doc); `result` itself when nothing changes."""
    quotas = request.cluster.quotas
    if not quotas or not any(g > 0 for q in quotas.values() for g in q.guaranteed.values()):
        return result
    if all(result.placements.get(j.name) for j in request.jobs):
        return result
    g = _greedy_of(request, result)
    nodes: dict[str, list[int]] = {}
    for gpu in g.state.gpus:
        at = nodes.setdefault(gpu.model, [])
        if not at or at[-1] != gpu.node:
            at.append(gpu.node)
    done = False
    tries = [RECLAIM_TRIES]
    failed: set[tuple[str, int]] = set()
    for info in _reclaim_candidates(g):
        shape = (info.job.tenant, info.gpus)
        if tries[0] <= 0:
            break
        if shape in failed or info.name in g.state.placed:
            continue
        if _reclaim_one(g, info, nodes, tries):
            done = True
        else:
            failed.add(shape)
    return g.result() if done else result


def settle_levels(request: PlanRequest, result: HeuristicResult) -> HeuristicResult:
    """`result` after `reclaim_nodes`, then `restore_displaced` (module doc)."""
    return restore_displaced(request, reclaim_nodes(request, result))
