"""LP rounding: a plan built from the aggregated LP relaxation's choice of jobs and models.

The bound LP (solver/bound.py) decides, over pooled capacities, which jobs to place and on
which model; its solution is nearly integral because identical jobs are grouped. Best fit
in value-density order (greedy.py) decides one job at a time and, once the pools fill,
cannot revisit the mix; the LP sees the whole mix at once. On requests without running
jobs the rounded LP plan is often within a fraction of a percent of the bound where
greedy plus CP-SAT stay several percent below it (benchmarks/RESULTS.md).

`plan_lp_round(request, targets)` places, with the greedy's best-fit machinery:
1. the jobs that must keep running (non-preemptible ones; all running jobs when the
   policy forbids preemption);
2. the running gangs spanning nodes that the LP keeps on their model, where they are; then
   the other LP-chosen gangs spanning nodes (largest first) over the fullest nodes, on GPUs no
   running job the LP keeps holds when possible, one domain for `same_domain` gangs: the
   pooled LP does not see racks, and once the running jobs sit where they are, no rack
   may have room left for them; whole free nodes stay for single-node gangs;
3. the LP's running gangs whose target is the model they run on, kept where they are;
4. the other LP-chosen single-node gangs (new, or moving to another model), largest
   first, each on the node where it displaces the fewest GPUs of running jobs the LP
   keeps (best fit among the nodes that displace none);
5. the LP's other running jobs on their model, kept where they are when still free;
6. the other LP-chosen jobs on their target model, largest first, then by value there
   (a running job displaced in steps 2-4 migrates here);
7. every job still unplaced, in value-density order on any model (this also places the
   jobs of fractional LP counts and any target that did not fit).
Elastic gangs (contract 5.1) skip steps 2-4 and go in step 6 at the size the LP gives
them (`sizes`, the LP's allowed-size column) when it fits there, running ones the LP moves
to another model included, by the greedy's size rule otherwise; a running one that the LP
keeps on its model at a smaller size keeps that many of its GPUs before step 2
(heuristics/elastic.py). Step 7 grows placed gangs between the jobs whose density their
growth beats, and the greedy's growth pass then hands them what is still free.
A gang spanning nodes that the LP places and that no domain has room for (in step 2, and
after step 7 in both variants; single-node gangs and nodes then too) takes it from movable
jobs of one domain, which go elsewhere (heuristics/domain_room.py; kept only when the
objective rises).
The "keep_first" variant skips steps 2-4: every running job the LP keeps on its model
stays first, then step 6 places the rest, largest first. The first variant is better on
most generated instances (benchmarks/RESULTS.md), not on all, so the driver tries both.
Every placement goes through the same conflict checks as the greedy, so the plan honours
the whole contract; it is one more starting point for local search and CP-SAT.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from heuristics.domain_room import place_targets_by_eviction
from heuristics.elastic import shrink_to_sizes
from heuristics.greedy import Greedy
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.instance import JobInfo
from models.rules import costed_level, required_levels

#: How often (in jobs) the deadline is checked.
_DEADLINE_EVERY = 64


#: The rounding variants `plan_lp_round` knows (see the module doc).
VARIANTS = ("gangs_first", "keep_first")


class _Clock:
    """The deadline, checked every `_DEADLINE_EVERY` calls of `late`."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.ticks = 0

    def late(self) -> bool:
        """Whether the deadline has passed (looked at every `_DEADLINE_EVERY` calls)."""
        self.ticks += 1
        return (self.deadline is not None and self.ticks % _DEADLINE_EVERY == 0
                and time.monotonic() > self.deadline)

    def expired(self) -> bool:
        """Whether the deadline has passed (looked at now)."""
        return self.deadline is not None and time.monotonic() > self.deadline


def plan_lp_round(request: PlanRequest, targets: Mapping[str, str], *,
                  deadline: float | None = None,
                  variant: str = "gangs_first",
                  sizes: Mapping[str, float] | None = None) -> HeuristicResult:
    """The plan of the LP's `targets` (job name -> model; `sizes`: the LP's size of an
    elastic gang), completed by best fit;
    `variant` "keep_first" skips steps 2-4 (every LP-kept running job stays first).
    Past `deadline` (a `time.monotonic()` instant) no more jobs are placed; the jobs left
    get the reason `time_limit`."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown rounding variant {variant!r}")
    g = Greedy(request)
    clock = _Clock(deadline)
    _keep_required(g)
    st = g.state
    chosen = [g.by_name[n] for n in targets if n in g.by_name]
    staying = [i for i in chosen if i.current and i.preemptible
               and st.model_of(i.current) == targets[i.name]]
    # Running elastic gangs the LP shrinks keep part of their GPUs first (elastic.py).
    shrink_to_sizes(g, staying, sizes)
    if variant == "gangs_first":
        _gangs_first(g, chosen, staying, targets, clock)
    # Step 5: the LP's other running jobs stay on their model.
    for info in sorted(staying, key=lambda i: (-i.density, i.name)):
        if info.name not in st.placed:
            g.try_keep(info)
    # Step 6: the other LP-chosen jobs on their target, largest first, then by value.
    order = sorted(chosen, key=lambda i: (-i.size, -g.value_on(i, targets[i.name]),
                                          i.name))
    for info in order:
        if clock.late():
            break
        model = targets[info.name]
        if info.name not in st.placed and model in info.values and not (
                info.elastic and _place_sized(g, info, model, sizes)):
            g.place(info, [model])
    _complete(g, clock)
    g.keep_cut_running()
    # LP-placed gangs that no domain (or node) has room for now (domain_room.py).
    place_targets_by_eviction(g, targets, sizes, clock.expired)
    # Elastic gangs were placed at their nominal size (on the LP's model) or by the
    # greedy's size rule; free GPUs then go to them by marginal gain (greedy.py).
    g.grow_elastic(deadline)
    return g.result()


def _place_sized(g: Greedy, info: JobInfo, model: str,
                 sizes: Mapping[str, float] | None) -> bool:
    """Place elastic gang `info` on `model` at the size the LP gives it, if it fits there
    now; False otherwise. A running one moves too: the LP's choice of its model and size
    counts its migration cost and frees its GPUs for the jobs the LP puts there, which
    `Greedy.place` (keep it where it runs when that is worth more to the job alone) does
    not see."""
    n = round((sizes or {}).get(info.name, 0))
    if info.pinned or n not in info.sizes:
        return False
    found = g.find_gang(info, model, n)
    if found is None:
        return False
    g.state.place(info, found)
    g.reasons.pop(info.name, None)
    return True


def _keep_required(g: Greedy) -> None:
    """Step 1: the running jobs that must keep running stay (or move first when they
    cannot stay but may not stop); the others are valued with the cost they save."""
    policy = g.request.policy
    keep_all = not policy.allow_preemption
    failed = g.keep_running(preemptible=keep_all)
    if not keep_all and policy.objective != "fairness":
        for info in g.infos:
            if info.current and info.preemptible:
                g.bonus[info.name] = policy.preemption_cost
    for info in failed:
        if info.preemptible:
            g.place(info)


def _gangs_first(g: Greedy, chosen: list[JobInfo], staying: list[JobInfo],
                 targets: Mapping[str, str], clock: _Clock) -> None:
    """Steps 2-4 of the module doc: the gangs before the other jobs."""
    st = g.state
    stay = {i.name for i in staying}
    # Running gangs spanning nodes that the LP keeps stay; other gangs spanning nodes next.
    for info in sorted((i for i in staying if i.shape == "whole"
                        and not i.job.single_node),
                       key=lambda i: (-i.gpus, -i.density, i.name)):
        g.try_keep(info)
    reserved_all = {st.gid_of[(p.node, p.gpu)] for i in staying if i.name not in st.placed
                    for p in i.current or []}
    # the LP's other gangs, largest first, then by value on their target
    movers = sorted((i for i in chosen if i.name not in stay and i.shape == "whole"
                     and i.gpus >= 2 and targets[i.name] in i.values and not i.elastic
                     and not i.pinned),
                    key=lambda i: (-i.gpus, -g.value_on(i, targets[i.name]), i.name))
    for info in (i for i in movers if not i.job.single_node):
        if clock.late():
            break
        if info.name not in st.placed:
            _place_spread(g, info, targets[info.name], reserved_all)
    # those left out take room from movable jobs of one domain (domain_room.py)
    place_targets_by_eviction(g, {i.name: targets[i.name] for i in movers
                                  if not i.job.single_node},
                              late=clock.late, prefer=targets, strict=True)
    # Step 3: the LP's running gangs on their model stay.
    for info in sorted((i for i in staying if i.shape == "whole" and i.gpus >= 2),
                       key=lambda i: (-i.gpus, -i.density, i.name)):
        if info.name not in st.placed:
            g.try_keep(info)
    # Step 4: the other single-node gangs, displacing the fewest kept GPUs.
    reserved = {st.gid_of[(p.node, p.gpu)] for i in staying if i.name not in st.placed
                for p in i.current or []}
    for info in (i for i in movers if i.job.single_node):
        if clock.late():
            break
        _place_gang(g, info, targets[info.name], reserved)


def _complete(g: Greedy, clock: _Clock) -> None:
    """Step 7: every job still unplaced, in value-density order on any model, growing
    the placed elastic gangs in between where a growth earns more per GPU than the next
    job (`Greedy.place_sequence`); past the deadline the rest get the reason
    `time_limit`."""
    st = g.state
    rest = g.density_order(i for i in g.infos if i.name not in st.placed
                           and not i.pinned)
    expired = clock.expired()

    def stop(n: int) -> bool:
        if not (expired or clock.late()):
            return False
        for left in rest[n:]:
            if left.name not in st.placed:
                g.reasons[left.name] = ("time_limit", "the heuristic ran out of time")
        return True

    g.place_sequence(rest, stop=stop)


def _place_gang(g: Greedy, info: JobInfo, model: str, reserved: set[int]) -> bool:
    """Place single-node gang `info` on `model` on the node where it takes the fewest
    `reserved` GPUs (then the fewest free GPUs, best fit, then the fewest unreserved ones
    left over, then node order); False if none fits. The nodes come fewest free GPUs
    first, so the scan stops past the free count of a node that displaces nothing (XL:
    3,187 gangs scanned every node of their model, 60% of the rounding)."""
    st = g.state
    k = info.gpus
    best: tuple[int, int, int, int] | None = None
    buckets = st.buckets.get(model, [])
    for c in range(max(k, 1), len(buckets)):
        # the nodes with c free GPUs of the model (unordered: ties go to the node order)
        if best is not None and best[0] == 0:
            break
        for ni in buckets[c]:
            free_set = st.free_gpus[ni][model]
            clean = c - len(free_set & reserved) if reserved else c
            key = (max(0, k - clean), c, max(0, clean - k), ni)
            # the host check (the costly part) only for a node that would be the new best
            if (best is None or key < best) and st.nodes[ni].host_fits(info.cpu,
                                                                      info.host_mem):
                best = key
    if best is None:
        return False
    # the GPUs are ordered on the chosen node only (ordering them on every node made
    # this quadratic: XL spent most of its rounding here)
    free = sorted(st.free_gpus[best[3]][model],
                  key=lambda gid: (gid in reserved, st.gpus[gid].index))
    return _commit(g, info, [(best[3], free[:k])])


def _place_spread(g: Greedy, info: JobInfo, model: str, reserved: set[int]) -> bool:
    """Place multi-node gang `info` on `model` (one domain of each required topology level,
    v1's `same_domain` being the level "domain"; fewest domains of its preferred level
    first) over the
    nodes with the fewest free GPUs first, GPUs not `reserved` first, so that whole free
    nodes stay for single-node gangs and kept running jobs stay put; False if it does
    not fit. Host CPU/memory is taken pro rata per GPU, as the greedy does."""
    st = g.state
    k = info.gpus
    if st.model_free.get(model, 0) < k:
        return False
    levels = required_levels(info.job)
    if levels:
        options = [[ni for ni in nodes if st.free_count(ni, model)]
                   for nodes in g.required_groups(model, k, levels)[:_SPREAD_DOMAINS]]
    else:
        options = [[ni for bucket in st.buckets.get(model, [])[1:] for ni in sorted(bucket)]]
    pref = costed_level(info.job, g.topology, g.request.policy.topology_cost) \
        if info.job.topology is not None else None
    if pref is not None:
        options = _preferred_options(g, model, k, pref, options)
    best: tuple[int, int, int] | None = None
    best_take: list[tuple[int, list[int]]] = []
    for nodes in options:
        take = _spread_take(g, info, model, sorted(nodes, key=lambda ni: (
            st.free_count(ni, model), ni)), reserved)
        if take is None:
            continue
        displaced = sum(1 for _, gids in take for gid in gids if gid in reserved)
        spans = 0 if pref is None else len(
            g.topology.domains((st.nodes[ni].name for ni, _ in take), pref))
        key = (spans, displaced, len(take))
        if best is None or key < best:
            best, best_take = key, take
    if best is None:
        return False
    return _commit(g, info, best_take)


def _preferred_options(g: Greedy, model: str, k: int, pref: str,
                       options: list[list[int]]) -> list[list[int]]:
    """Before each node set of `options`, its domains of preferred level `pref` that hold
    `k` free GPUs of `model` alone (the tightest few first)."""
    st = g.state
    out: list[list[int]] = []
    for nodes in options:
        by_dom: dict[str, list[int]] = {}
        for ni in nodes:
            by_dom.setdefault(g.topology.domain(st.nodes[ni].name, pref), []).append(ni)
        free = {d: sum(st.free_count(ni, model) for ni in ns) for d, ns in by_dom.items()}
        fit = sorted((d for d in by_dom if free[d] >= k), key=lambda d: (free[d], d))
        out += [by_dom[d] for d in fit[:_SPREAD_DOMAINS]]
        out.append(nodes)
    return out


def _commit(g: Greedy, info: JobInfo, take: list[tuple[int, list[int]]]) -> bool:
    """Place `info` on the GPUs `take` ((node, GPU ids) pairs) if the state's conflict
    checks (the whole contract) allow it."""
    st = g.state
    # built unvalidated: node names and GPU indexes come from the cluster itself
    placements = [Placement.model_construct(node=st.nodes[ni].name, gpu=st.gpus[gid].index)
                  for ni, gids in take
                  for gid in sorted(gids, key=lambda gid: st.gpus[gid].index)]
    if st.conflicts(info, placements) is not None:
        return False
    st.place(info, placements)
    g.reasons.pop(info.name, None)
    return True


#: Domains (fewest free GPUs first) `_place_spread` compares for a same-domain gang.
_SPREAD_DOMAINS = 8


def _spread_take(g: Greedy, info: JobInfo, model: str, nodes: list[int],
                 reserved: set[int]) -> list[tuple[int, list[int]]] | None:
    """GPUs for gang `info` over `nodes` (in order): the free unreserved ones first, then
    reserved ones; None if there are not enough."""
    st = g.state
    k = info.gpus
    per_cpu, per_mem = info.cpu / k, info.host_mem / k
    take: dict[int, list[int]] = {}
    spare: list[tuple[int, list[int]]] = []
    left = k
    for ni in nodes:
        room = st.nodes[ni].host_room(per_cpu, per_mem)
        free = sorted(st.free_gpus[ni][model], key=lambda gid: (gid in reserved,
                                                               st.gpus[gid].index))[:room]
        clean = [gid for gid in free if gid not in reserved][:left]
        if clean:
            take[ni] = clean
            left -= len(clean)
        if len(free) > len(clean):
            spare.append((ni, [gid for gid in free if gid in reserved]))
        if not left:
            break
    for ni, gids in spare:
        if not left:
            break
        extra = gids[:left]
        take.setdefault(ni, []).extend(extra)
        left -= len(extra)
    return None if left else sorted(take.items())
