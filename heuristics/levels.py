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

`improve_levels(request, result, deadline)` raises the classes below the guarantees by
exchanges (additive objectives), each kept only when no less guaranteed usage is served
and the highest class that changes gains (`rises`, on the jobs' terms, `Greedy.term`,
before and after): `raise_classes` clears lower-class work off a node for an unplaced
higher-class job; `upgrade_classes` moves a placed job to a model where it is worth more
by clearing a node of work of its class or lower, which goes back where it fits;
`refill_classes` trades a placed job for unplaced jobs of its class or higher worth more;
`restore_running` keeps a stopped running job where it runs by taking out the jobs on its
GPUs and, when its quota limit binds, jobs using that quota; `return_running` puts a moved
running job of any shape back on its GPUs when the jobs there, of its class or lower, find
room elsewhere. The planner
(`solver.levels.level_search`) runs it within its time; it is not part of
`settle_levels`, whose guarantee step (`reclaim_nodes`) runs until the driver's deadline
and whose `restore_displaced` every answer passes untimed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from heuristics.greedy import Greedy, guarantee_models
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.instance import JobInfo
from models.objective import level_key, objective_value_of, same_placement
from models.rules import (
    HOST_TOL,
    guaranteed_served,
    lexicographic_levels,
    priority_classes,
    quota_usage,
)

#: nodes tried per model for one job, and node clearings tried per plan
#: (`reclaim_nodes`; after a failure, the other jobs of that tenant and size are skipped)
RECLAIM_NODES = 4
RECLAIM_TRIES = 24
#: node clearings tried per plan by `raise_classes` (after a failure, the other jobs of
#: that tenant, size, class and models are skipped)
RAISE_TRIES = 64
#: placed jobs tried by `refill_classes` per plan, and unplaced jobs offered to each
REFILL_TRIES = 200
REFILL_OFFER = 40
#: stopped running jobs tried by `restore_running` per plan, and jobs it may take out
#: for one of them
RESTORE_TRIES = 100
RESTORE_OUT = 96
#: moved running jobs `return_running` tries to put back per plan
HOME_TRIES = 64
#: nodes costed between two looks at the deadline (`_clear_for`)
_DEADLINE_NODES = 16


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
        if info.job.priority < h.job.priority and not info.pinned:
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


def placer_of(request: PlanRequest, result: HeuristicResult) -> Greedy:
    """A placer holding `result` (kept running jobs first) and its reasons (the level
    steps here and in solver/level_fit.py)."""
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


def may_move(g: Greedy, info: JobInfo) -> bool:
    """Whether placed job `info` may be taken out of its GPUs (not `_stays`)."""
    return not _stays(g, info)


def find_beside_limits(g: Greedy, info: JobInfo) -> list[Placement] | None:
    """`info`'s best fit in the current state on its best-ranked model where one fits,
    the quota limits aside (the caller keeps them)."""
    finder = Greedy._FINDERS[info.shape]
    for m in g.ranked_models(info):
        found = finder(g, info, m)
        if found is not None:
            return found
    return None


def restore_displaced(request: PlanRequest, result: HeuristicResult) -> HeuristicResult:
    """`result` with every displaced higher-class running job kept (module doc)."""
    policy = request.policy
    classes = priority_classes(request.jobs)
    if len(classes) < 2 or not policy.allow_preemption or not any(
            j.current and j.preemptible and j.priority > classes[-1]
            and not result.placements.get(j.name) for j in request.jobs):
        return result
    g = placer_of(request, result)
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


def _stays(g: Greedy, o: JobInfo) -> bool:
    """Whether running job `o` may not be taken out of its GPUs: it is pinned, or the
    policy allows no preemption (it might not find room again)."""
    return o.pinned or (bool(o.current) and not g.request.policy.allow_preemption)


def _clear_cost(g: Greedy, info: JobInfo, ni: int, model: str, below: int | None = None
                ) -> tuple[tuple[int, int, float], list[JobInfo]] | None:
    """(cost, occupants) of freeing `info.gpus` GPUs of `model` on node `ni` for gang
    `info` (module doc): the GPUs whose occupants cost least (free ones first, then by
    the occupants holding a guarantee, their highest class, their value); all of the
    node's GPUs when its host CPU or memory is limited. None when it has too few such GPUs
    or an occupant may not be moved (a non-preemptible running job, or a running job
    without `allow_preemption`: it might not find room again; with `below`, a job of
    class `below` or higher)."""
    st = g.state
    top_ok = float("inf") if below is None else below
    slot = st.nodes[ni]
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
            if _stays(g, o) or o.job.priority >= top_ok:
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
    if host and any(_stays(g, g.by_name[n])
                    or g.by_name[n].job.priority >= top_ok for n in _occupants(g, slot.gpus)):
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
    tried = 0
    for x in sorted((g.by_name[n] for n in st.placed),
                    key=lambda i: (i.size < o.size, i.size, i.name)):
        if tried >= RECLAIM_NODES:
            break
        pl = st.placed[x.name]
        if (x.name == gang.name or not pl
                or _stays(g, x)
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
                 tries: list[int], deadline: float | None = None) -> bool:
    """Try the cheapest nodes to clear for job `info` on each model where it would serve
    more guarantee (module doc; `nodes`: model -> the nodes with GPUs of it; `tries`: the
    clearings left, decremented; until `deadline`); True when it was placed."""
    return _clear_for(g, info, guarantee_models(g, info), nodes, tries, _try_node,
                      deadline=deadline)


def _clear_for(g: Greedy, info: JobInfo, models: list[str], nodes: dict[str, list[int]],
               tries: list[int], place: Callable[[Greedy, JobInfo, str, list[JobInfo]], bool],
               below: int | None = None, moves_only: bool = False,
               deadline: float | None = None) -> bool:
    """On each of `models` in turn, the `RECLAIM_NODES` cheapest nodes to clear for gang
    `info` (`_clear_cost`, of work of classes below `below` when given; with
    `moves_only`, only nodes where something is moved), each tried with `place` while
    `tries` lasts and until `deadline` (`time.monotonic()`, checked every
    `_DEADLINE_NODES` nodes costed: L has hundreds per model); True when `info` was
    placed."""
    for model in models:
        costs = []
        for k, ni in enumerate(nodes.get(model, [])):
            if (deadline is not None and k % _DEADLINE_NODES == 0
                    and time.monotonic() > deadline):
                return False
            got = _clear_cost(g, info, ni, model, below=below)
            if got is not None and (got[1] or not moves_only):
                costs.append((got[0], ni, got[1]))
        costs.sort(key=lambda c: (c[0], c[1]))
        for _, _, occupants in costs[:RECLAIM_NODES]:
            if tries[0] <= 0:
                return False
            tries[0] -= 1
            if place(g, info, model, occupants):
                return True
    return False


def _reclaim_candidates(g: Greedy) -> list[JobInfo]:
    """The unplaced whole-GPU jobs of at most one node's worth (module doc), highest class
    first, then the largest."""
    st = g.state
    most = max((len(n.gpus) for n in st.nodes), default=0)
    out = [i for i in g.infos if i.name not in st.placed and i.shape == "whole"
           and not i.elastic and 1 <= i.gpus <= most
           and not i.pinned]
    return sorted(out, key=lambda i: (-i.job.priority, -i.gpus, i.name))


def _model_nodes(g: Greedy) -> dict[str, list[int]]:
    """Model -> the nodes with GPUs of it, in node order."""
    nodes: dict[str, list[int]] = {}
    for gpu in g.state.gpus:
        at = nodes.setdefault(gpu.model, [])
        if not at or at[-1] != gpu.node:
            at.append(gpu.node)
    return nodes


def reclaim_nodes(request: PlanRequest, result: HeuristicResult,
                  deadline: float | None = None) -> HeuristicResult:
    """`result` with GPUs taken back for the jobs of tenants below their guarantees
    (module doc), until `deadline` (`time.monotonic()`; L: 0.44 CPU s when nothing is
    found); `result` itself when nothing changes."""
    if deadline is not None and time.monotonic() > deadline:
        return result
    quotas = request.cluster.quotas
    if not quotas or not any(g > 0 for q in quotas.values() for g in q.guaranteed.values()):
        return result
    if all(result.placements.get(j.name) for j in request.jobs):
        return result
    g = placer_of(request, result)
    nodes = _model_nodes(g)
    done = False
    tries = [RECLAIM_TRIES]
    failed: set[tuple[str, int]] = set()
    for info in _reclaim_candidates(g):
        shape = (info.job.tenant, info.gpus)
        if tries[0] <= 0 or (deadline is not None and time.monotonic() > deadline):
            break
        if shape in failed or info.name in g.state.placed:
            continue
        if _reclaim_one(g, info, nodes, tries, deadline):
            done = True
        else:
            failed.add(shape)
    return g.result() if done else result


def _gain(g: Greedy, info: JobInfo, found: list[Placement]) -> float:
    """What placing `info` at `found` adds to its class: its value less its topology cost
    (a new job) or less the migration it makes and plus the preemption it saves (a
    running job)."""
    pol = g.request.policy
    value = g.value_at(info, found)
    if not info.current:
        return value - g.topology_cost(info, found)
    moved = not same_placement(found, info.current)
    return value + pol.preemption_cost - (pol.migration_cost if moved else 0.0)


def _try_class_node(g: Greedy, info: JobInfo, model: str, occupants: list[JobInfo]) -> bool:
    """Clear the lower-class `occupants`, place `info` on `model`, put them back where they
    fit; kept when `info` adds to its class and no less guaranteed usage is served
    (module doc of `raise_classes`), else undone."""
    st = g.state
    before = guaranteed_served(st.quotas, st.quota_used)
    old = {o.name: st.remove(o) for o in occupants}
    found = g.find(info, [model])
    if found is not None and _gain(g, info, found) > HOST_TOL:
        st.place(info, found)
        for o in sorted(occupants, key=lambda o: (
                -_holds_guarantee_at(g, o, old[o.name]), -o.job.priority, -o.density,
                o.name)):
            g.place(o)
        if guaranteed_served(st.quotas, st.quota_used) >= before - 1e-9 * max(1.0, before):
            g.reasons.pop(info.name, None)
            for o in occupants:
                if o.name not in st.placed and not o.current:
                    g.reasons[o.name] = ("lower_priority", f"its GPUs went to {info.name}, "
                                         f"of the higher class {info.job.priority}")
            return True
        st.remove(info)
        for o in occupants:
            st.remove(o)
    for name, pl in old.items():
        if pl:
            st.place(g.by_name[name], pl)
    return False


def _raise_one(g: Greedy, info: JobInfo, nodes: dict[str, list[int]],
               tries: list[int], deadline: float | None = None) -> bool:
    """Try the cheapest nodes to clear of lower-class work for `info` on each of its
    models, best first (`nodes`: model -> its nodes; `tries`: the clearings left,
    decremented; until `deadline`); True when it was placed."""
    return _clear_for(g, info, g.ranked_models(info), nodes, tries, _try_class_node,
                      below=info.job.priority, moves_only=True, deadline=deadline)


def raise_classes(request: PlanRequest, result: HeuristicResult,
                  deadline: float | None = None) -> HeuristicResult:
    """`result` with unplaced jobs of the higher classes placed on GPUs taken from lower
    classes (contract 5.4's levels). A greedy pass fills the GPUs in one order; when the
    running lower-class jobs keep their GPUs first, or a job of a higher class came after
    the cluster filled, a higher-class job stays out although only lower-class work
    stands in its way. For each unplaced whole-GPU job (at most one node's worth) of a
    class above the lowest, highest class first, then by value per GPU: placed where it
    fits if it fits; else on the few nodes of each model cheapest to clear of jobs of
    lower classes only (`_clear_cost` with the job's class as the cap), those jobs put
    back where they fit. A step is kept when the job adds to its class's value and the
    guaranteed usage served does not drop: the levels above the job's class are untouched
    (only lower classes lose), the guarantees no lower and its class higher, so the plan
    rises lexicographically. Until `deadline` (`time.monotonic()`; L: 0.7 s of CPU for
    no gain, hence not part of `settle_levels`). `result` itself when nothing changes."""
    classes = priority_classes(request.jobs)
    if len(classes) < 2 or all(result.placements.get(j.name) for j in request.jobs):
        return result
    g = placer_of(request, result)
    st = g.state
    most = max((len(n.gpus) for n in st.nodes), default=0)
    cands = sorted((i for i in g.infos if i.name not in st.placed and i.shape == "whole"
                    and not i.elastic and 1 <= i.gpus <= most and i.values
                    and i.job.priority > classes[-1]
                    and not i.pinned),
                   key=lambda i: (-i.job.priority, -i.density, i.name))
    nodes = _model_nodes(g)
    tries = [RAISE_TRIES]
    failed: set[tuple[str, int, int, tuple[str, ...]]] = set()
    done = False
    for info in cands:
        shape = (info.job.tenant, info.gpus, info.job.priority, tuple(g.ranked_models(info)))
        if tries[0] <= 0 or (deadline is not None and time.monotonic() > deadline):
            break
        if shape in failed or info.name in st.placed:
            continue
        if g.place(info) or _raise_one(g, info, nodes, tries, deadline):
            done = True
        else:
            failed.add(shape)
    return g.result() if done else result


def _try_upgrade(g: Greedy, x: JobInfo, model: str, occupants: list[JobInfo]) -> bool:
    """Move placed job `x` to `model` on GPUs cleared of `occupants` (of `x`'s class or
    lower), which are put back where they fit (`x`'s old GPUs included), highest class
    first; kept when no less guaranteed usage is served and the classes rise (`rises`),
    else undone."""
    return _exchange(g, x, occupants, lambda: g.find(x, [model]),
                     f"its GPUs went to {x.name}, worth more to class {x.job.priority} there")


def _exchange(g: Greedy, x: JobInfo, occupants: list[JobInfo],
              where: Callable[[], list[Placement] | None], reason: str) -> bool:
    """Take `x` and `occupants` out, put `x` where `where` says once they are out (none:
    undone), then the occupants back where they fit, highest class first; kept when no
    less guaranteed usage is served and the classes rise (`rises`), the occupants left
    out then saying `reason`, else undone."""
    st = g.state
    before = guaranteed_served(st.quotas, st.quota_used)
    old = {x.name: st.remove(x) or []}
    old.update((o.name, st.remove(o) or []) for o in occupants)
    found = where()
    if found is None:
        put_back(g, old)
        return False
    st.place(x, found)
    for o in sorted(occupants, key=lambda o: (-o.job.priority, -o.density, o.name)):
        g.place(o)
    return keep_or_undo(g, old, before, reason)


def keep_or_undo(g: Greedy, old: dict[str, list[Placement]], before: float,
                 reason: str) -> bool:
    """Once the jobs of `old` (name -> their placements before; [] when unplaced) were
    taken out and placed again: kept when no less guaranteed usage is served than
    `before` and the classes rise (`rises`), those left out that do not run now then
    saying `reason`; else every job of `old` goes back as it was (`put_back`). True when
    kept."""
    st = g.state
    deltas: dict[int, float] = {}
    for n, pl in old.items():
        o = g.by_name[n]
        deltas[o.job.priority] = (deltas.get(o.job.priority, 0.0)
                                  + g.term(o, st.placed.get(n)) - g.term(o, pl))
    after = guaranteed_served(st.quotas, st.quota_used)
    if after >= before - 1e-9 * max(1.0, before) and rises(deltas):
        for n in old:
            if n not in st.placed and not g.by_name[n].current:
                g.reasons[n] = ("lower_priority", reason)
        return True
    put_back(g, old)
    return False


def put_back(g: Greedy, old: dict[str, list[Placement]]) -> None:
    """Every job of `old` (name -> its placements before; [] when unplaced) as it was."""
    st = g.state
    for n in old:
        st.remove(g.by_name[n])
    for n, pl in old.items():
        if pl:
            st.place(g.by_name[n], pl)


def upgrade_classes(request: PlanRequest, result: HeuristicResult,
                    deadline: float | None = None) -> HeuristicResult:
    """`result` with placed jobs moved to models where they are worth more to their class
    (additive objectives). Best fit fills the fastest model with the jobs that come first
    (the highest class, then by value per GPU), which need not be those that gain most
    there: on M, class-1000 8-GPU gangs worth 0.9-2.2 more on H200 sit on H100 while
    1-GPU jobs of their class, worth 0.1-0.3 more on H200, hold it. For each placed
    whole-GPU job `x` of at most one node (not pinned, nor running without
    `allow_preemption`), highest class first, then the largest gain, and each model where
    its term (`Greedy.term`: migration and topology costs included) is higher than where
    it is: the few nodes of that model cheapest to clear of jobs of `x`'s class or lower
    (`_clear_for`) are tried; the occupants go back where they fit, `x`'s old GPUs
    included. A move is kept when the guaranteed usage served does not drop and the
    highest class that changes gains (`rises`). After a failure, the other jobs of that
    class and size moving between the same models are skipped (on M the
    class-1000 8-GPU gangs alone used up every try). At most RAISE_TRIES clearings,
    until `deadline`. `result` itself when nothing changes."""
    if (not lexicographic_levels(request)
            or request.policy.objective in ("fairness", "priority_fifo")):
        return result
    g = placer_of(request, result)
    st = g.state
    most = max((len(n.gpus) for n in st.nodes), default=0)
    cands: list[tuple[int, float, str, str]] = []
    for i in g.infos:
        pl = st.placed.get(i.name)
        if (not pl or i.shape != "whole" or i.elastic or i.gpus > most or _stays(g, i)):
            continue
        now, here = g.term(i, pl), st.model_of(pl)
        for m in g.ranked_models(i):
            gain = g.value_on(i, m) - (request.policy.migration_cost if i.current else 0.0)
            if m != here and gain - now > HOST_TOL:
                cands.append((-i.job.priority, now - gain, i.name, m))
    cands.sort()
    nodes = _model_nodes(g)
    tries = [RAISE_TRIES]
    failed: set[tuple[int, int, str, str]] = set()
    done = False
    for _, _, name, model in cands:
        if tries[0] <= 0 or (deadline is not None and time.monotonic() > deadline):
            break
        x = g.by_name[name]
        pl = st.placed.get(name)
        if not pl or st.model_of(pl) == model:
            continue
        shape = (x.job.priority, x.gpus, st.model_of(pl), model)
        if shape in failed:
            continue
        if _clear_for(g, x, [model], nodes, tries, _try_upgrade,
                      below=x.job.priority + 1, deadline=deadline):
            done = True
        else:
            failed.add(shape)
    return g.result() if done else result


def rises(deltas: dict[int, float]) -> bool:
    """Whether class changes `deltas` (class -> value change) raise the classes
    lexicographically: the highest class that changes gains."""
    for p in sorted(deltas, reverse=True):
        if deltas[p] > HOST_TOL:
            return True
        if deltas[p] < -HOST_TOL:
            return False
    return False


def _offers(g: Greedy, x: JobInfo, model: str, unplaced: list[JobInfo]) -> list[JobInfo]:
    """The unplaced jobs that may take the place of placed job `x` on `model` (module
    doc of `refill_classes`; `unplaced`: the candidates, highest class first, then by
    value per GPU): of `x`'s class or higher, eligible there, at most `x`'s GPUs; `x`'s
    own tenant's first within a class (keeping its guarantee); at most REFILL_OFFER."""
    st = g.state
    out: list[JobInfo] = []
    rest: list[JobInfo] = []
    for i in unplaced:
        if i.job.priority < x.job.priority:
            break
        if (i.name in st.placed or model not in i.values
                or (i.shape == "whole" and i.gpus > x.gpus)):
            continue
        (out if i.job.tenant == x.job.tenant else rest).append(i)
        if len(out) >= REFILL_OFFER:
            break
    out.extend(rest)
    out.sort(key=lambda i: -i.job.priority)   # stable: own tenant first within a class
    return out[:REFILL_OFFER]


def _refill(g: Greedy, x: JobInfo, unplaced: list[JobInfo]) -> bool:
    """Take placed job `x` out, place the offered jobs (`_offers`) where they fit, then
    `x` again if it still fits; kept when no less guaranteed usage is served and the
    classes rise (`rises`), else undone. True when kept."""
    st = g.state
    before = guaranteed_served(st.quotas, st.quota_used)
    old = st.remove(x) or []
    model = st.model_of(old)
    added = [o for o in _offers(g, x, model, unplaced) if g.place(o)]
    if not added:
        st.place(x, old)
        return False
    g.place(x)
    deltas: dict[int, float] = {}
    for o in added:
        deltas[o.job.priority] = (deltas.get(o.job.priority, 0.0)
                                  + g.term(o, st.placed.get(o.name)) - g.term(o, None))
    deltas[x.job.priority] = (deltas.get(x.job.priority, 0.0)
                              + g.term(x, st.placed.get(x.name)) - g.term(x, old))
    after = guaranteed_served(st.quotas, st.quota_used)
    if after > before + HOST_TOL or (after >= before - 1e-9 * max(1.0, before)
                                     and rises(deltas)):
        for o in added:
            g.reasons.pop(o.name, None)
        if x.name not in st.placed and not x.current:
            g.reasons[x.name] = ("lower_priority", "its GPUs went to jobs worth more to "
                                 f"class {x.job.priority} or a higher one")
        return True
    for o in added:
        st.remove(o)
    st.remove(x)
    st.place(x, old)
    return False


def refill_classes(request: PlanRequest, result: HeuristicResult,
                   deadline: float | None = None) -> HeuristicResult:
    """`result` improved class by class by exchanges (contract 5.4's levels, additive
    objectives): a placed whole-GPU job `x` is taken out and the unplaced jobs of its
    class or higher that are worth the most per GPU (its own tenant's first, so that its
    guarantee stays served) are placed where they fit, then `x` again where it still
    fits. The exchange is kept when the guaranteed usage served does not drop and the
    highest class that changes gains: the classes above `x`'s only gain jobs, and `x`'s
    class gains more than `x` was worth. This is how a tenant whose quota limit binds
    trades a large job of little value per GPU for several small ones worth more, which a
    greedy pass that placed the large job first never undoes. Jobs are tried as `x`
    lowest class first, then least value per GPU, at most REFILL_TRIES, until
    `deadline` (`time.monotonic()`). `result` itself when nothing changes."""
    if (not lexicographic_levels(request)
            or request.policy.objective in ("fairness", "priority_fifo")):
        return result
    g = placer_of(request, result)
    st = g.state
    victims = sorted((i for i in g.infos if i.name in st.placed and i.shape == "whole"
                      and not _stays(g, i)),
                     key=lambda i: (i.job.priority, i.density, i.name))
    if not victims or len(victims) == len(g.infos):
        return result
    unplaced = sorted((i for i in g.infos if i.name not in st.placed
                       and not i.pinned),
                      key=lambda i: (-i.job.priority, -i.density, i.name))
    done = False
    for x in victims[:REFILL_TRIES]:
        if deadline is not None and time.monotonic() > deadline:
            break
        if x.name in st.placed and _refill(g, x, unplaced):
            done = True
    return g.result() if done else result


def _quota_room(g: Greedy, h: JobInfo, model: str, old: dict[str, list[Placement]]) -> None:
    """Take placed jobs out (into `old`) until running job `h` fits its quota limits on
    `model`: jobs of class `h`'s or lower whose usage counts toward a key that blocks it,
    its own tenant's first, then the lowest class, the least value per GPU; at most
    RESTORE_OUT jobs out in all."""
    st = g.state
    keys = set(st.quota_keys(h.job.tenant, model))
    pool = [g.by_name[n] for n, pl in st.placed.items()
            if g.by_name[n].job.priority <= h.job.priority
            and not _stays(g, g.by_name[n])
            and keys.intersection(st.quota_keys(g.by_name[n].job.tenant, st.model_of(pl)))]
    pool.sort(key=lambda o: (o.job.tenant != h.job.tenant, o.job.priority, o.density, o.name))
    for o in pool:
        if st.quota_fits(h, model) or len(old) >= RESTORE_OUT:
            return
        old[o.name] = st.remove(o) or []


def _evict_for(g: Greedy, o: JobInfo, h: JobInfo, old: dict[str, list[Placement]]) -> bool:
    """Place `o`, displaced for running job `h`, by taking out one placed job of a lower
    class on a model `o` may use (its own tenant's first, for its quota, then the lowest
    class, one at least `o`'s size, the least value per GPU; at most RECLAIM_NODES
    tried); the job taken out goes into `old` with its first placements. True when
    placed."""
    st = g.state
    models = set(g.ranked_models(o))
    cands = [g.by_name[n] for n, pl in st.placed.items()
             if n != h.name and g.by_name[n].job.priority < o.job.priority
             and not _stays(g, g.by_name[n])
             and st.model_of(pl) in models]
    cands.sort(key=lambda x: (x.job.tenant != o.job.tenant, x.job.priority, x.size < o.size,
                              x.density, x.name))
    for x in cands[:RECLAIM_NODES]:
        pl = st.remove(x) or []
        if g.place(o):
            old.setdefault(x.name, pl)
            return True
        st.place(x, pl)
    return False


def _restore_one(g: Greedy, h: JobInfo) -> bool:
    """Keep running job `h`, stopped or moved, where it runs by taking out the jobs on its
    GPUs (and
    on its host-limited nodes; of any class: one of a higher class must find a place as
    good elsewhere, or the step is undone) and, when its quota limit binds, those of its
    class or lower using that quota (`_quota_room`), then putting them back where they
    fit, highest class first; kept when no less guaranteed usage is served and the
    classes rise (`rises`)."""
    st = g.state
    cur = list(h.current or [])
    before = guaranteed_served(st.quotas, st.quota_used)
    prev = st.remove(h)   # a migrated job leaves its new place first
    gids = [st.gid_of[(q.node, q.gpu)] for q in cur]
    names = _occupants(g, gids)
    for node in {q.node for q in cur}:
        slot = st.nodes[st.node_of[node]]
        if slot.cpu_cap is not None or slot.mem_cap is not None:
            names |= _occupants(g, slot.gpus)
    if any(_stays(g, g.by_name[n]) for n in names):
        if prev:
            st.place(h, prev)
        return False
    old = {n: st.remove(g.by_name[n]) or [] for n in sorted(names)}
    _quota_room(g, h, st.model_of(cur), old)
    if st.conflicts(h, cur) is None:
        st.place(h, cur)
        lowest = min(i.job.priority for i in g.infos)
        for n in sorted(old, key=lambda n: (-g.by_name[n].job.priority,
                                            -g.by_name[n].density, n)):
            o = g.by_name[n]
            if not g.place(o) and o.job.priority > lowest:
                _evict_for(g, o, h, old)
        deltas = {h.job.priority: g.term(h, cur) - g.term(h, prev)}
        for n, pl in old.items():
            o = g.by_name[n]
            deltas[o.job.priority] = (deltas.get(o.job.priority, 0.0)
                                      + g.term(o, st.placed.get(n)) - g.term(o, pl))
        after = guaranteed_served(st.quotas, st.quota_used)
        if after > before + HOST_TOL or (after >= before - 1e-9 * max(1.0, before)
                                         and rises(deltas)):
            g.reasons.pop(h.name, None)
            for n in old:
                if n not in st.placed and not g.by_name[n].current:
                    g.reasons[n] = ("lower_priority", f"its place went to the running job "
                                    f"{h.name}, of class {h.job.priority}")
            return True
        st.remove(h)
        for n in old:
            st.remove(g.by_name[n])
    for n, pl in old.items():
        if pl:
            st.place(g.by_name[n], pl)
    if prev:
        st.place(h, prev)
    return False


def restore_running(request: PlanRequest, result: HeuristicResult,
                    deadline: float | None = None) -> HeuristicResult:
    """`result` with running jobs that it stops or moves kept where they run when that
    raises the levels (additive objectives). A greedy pass that lets running jobs take
    their turn may place many small jobs of a tenant first and leave no quota or GPUs for
    its running gang, worth more to its class than all of them (M: a 64-GPU gang worth 256
    of class 100, its tenant at its limit), or move a running job off GPUs a job of its
    own class could have had elsewhere (M: 24 class-1000 migrations, 0.5 each). For each
    such preemptible running whole-GPU job, highest class first, the stopped ones first,
    then the largest loss against staying: the jobs on its GPUs (of any class: one of a
    higher class must find a place as good elsewhere), and while its quota limit binds
    jobs of its class or lower using that quota (its own tenant's first, the least value
    per GPU first, at most RESTORE_OUT jobs in all), are taken out, it is kept, and they
    are put back where they fit; kept when the guaranteed usage served does not drop and
    the highest class that changes gains (`rises`), else undone. At most RESTORE_TRIES
    jobs, until `deadline`. `result` itself when nothing changes."""
    pol = request.policy
    if (not lexicographic_levels(request) or not pol.allow_preemption
            or pol.objective in ("fairness", "priority_fifo")):
        return result
    g = placer_of(request, result)
    st = g.state
    moved = [i for i in g.infos if i.current and i.preemptible and i.shape == "whole"
             and g.current_ok(i) and not same_placement(st.placed.get(i.name) or [],
                                                         i.current)]
    if not moved:
        return result
    moved.sort(key=lambda i: (-i.job.priority, i.name in st.placed,
                              g.term(i, st.placed.get(i.name)) - g.term(i, i.current),
                              i.name))
    done = False
    for h in moved[:RESTORE_TRIES]:
        if deadline is not None and time.monotonic() > deadline:
            break
        if _restore_one(g, h):
            done = True
    return g.result() if done else result


def _try_home(g: Greedy, r: JobInfo) -> bool:
    """Put placed running job `r` back on the GPUs it runs on now, which the jobs on them
    (of `r`'s class or lower, none that must stay) leave for where they fit, `r`'s GPUs
    in the plan included; kept when no less guaranteed usage is served and the classes
    rise (`rises`: `r` no longer pays its migration cost), else undone."""
    st = g.state
    cur = list(r.current or [])
    names = _occupants(g, [st.gid_of[(p.node, p.gpu)] for p in cur]) - {r.name}
    occupants = [g.by_name[n] for n in sorted(names)]
    if any(_stays(g, o) or o.job.priority > r.job.priority for o in occupants):
        return False
    return _exchange(g, r, occupants, lambda: cur if st.conflicts(r, cur) is None else None,
                     f"its GPUs went back to {r.name}, which runs there")


def return_running(request: PlanRequest, result: HeuristicResult,
                   deadline: float | None = None) -> HeuristicResult:
    """`result` with placed running jobs of any shape (whole GPUs, shares, MIG slices)
    that it moves put back where they run (additive objectives; `_try_home`), highest
    class first, then the largest: a move pays the migration cost, which the other
    exchanges' moves can make needless. Unlike `restore_running` (whole-GPU jobs, the
    stopped ones first, occupants of any class and quota room made), only occupants of
    the job's class or lower give way, and they only go back where they fit (M, a round of
    the exchanges: class 100 +1.0, 1,172.4 -> 1,173.4). At most HOME_TRIES tries, until
    `deadline`. `result` itself when nothing changes."""
    if (not lexicographic_levels(request)
            or request.policy.objective in ("fairness", "priority_fifo")
            or request.policy.migration_cost <= 0):
        return result
    g = placer_of(request, result)
    st = g.state
    cands = sorted((i for i in g.infos if i.current and not _stays(g, i)
                    and st.placed.get(i.name)
                    and not same_placement(st.placed[i.name], i.current)),
                   key=lambda i: (-i.job.priority, -i.size, i.name))
    done = False
    for i in cands[:HOME_TRIES]:
        if deadline is not None and time.monotonic() > deadline:
            break
        done = _try_home(g, i) or done
    return g.result() if done else result


def improve_levels(request: PlanRequest, result: HeuristicResult,
                   deadline: float | None = None) -> HeuristicResult:
    """`result` after `raise_classes`, `upgrade_classes`, `refill_classes`,
    `restore_running` and `return_running` (each until `deadline`; restore_running, the
    costliest, after the first three: on M it takes 0.3 of the 0.5 CPU s, and the order
    gives the same levels or better), then
    `restore_displaced`; `result` itself unless that ranks higher by
    `models.objective.level_key` (each step's own test works on the jobs it moves: this
    one checks the whole plan)."""
    out = result
    for step in (raise_classes, upgrade_classes, refill_classes, restore_running,
                 return_running):
        out = step(request, out, deadline)
    out = restore_displaced(request, out)
    if out is result or level_key(request, out.placements) <= level_key(
            request, result.placements):
        return result
    return out


def settle_levels(request: PlanRequest, result: HeuristicResult,
                  deadline: float | None = None) -> HeuristicResult:
    """`result` after `reclaim_nodes` (until `deadline`, a `time.monotonic()` instant: it
    only raises the guarantees served), then `restore_displaced`, untimed: every plan
    must pass the validator's `priority` rule (module doc)."""
    return restore_displaced(request, reclaim_nodes(request, result, deadline))
