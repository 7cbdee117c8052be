"""Evict-and-place for gangs: make room in one topology domain (or one node).

A gang that may span nodes but must stay in one domain (a required topology level, v1's
`same_domain` being the level "domain") needs k free GPUs of one model *in one domain*.
The aggregated LP (solver/bound.py) sees domains only through their size, so it places
such a gang whenever some domain is large enough and the model's pool has room; the
rounding (heuristics/lp_round.py) has by then kept running jobs where they run, and those
may hold a few GPUs of every domain large enough (M, seed 0: a 64-GPU gang spanning two
of the three H100 domains of 48 GPUs or more; seed 2: running elastic gangs kept at the
LP's smaller size on two GPUs of each 32-GPU H200 domain). No later step moves them, so
the gang, often the most valuable job of the request (189 and 305 on those instances),
stays out. The local search's evict-and-place works node by node and cannot free a
domain either. A single-node gang is the same problem on one node (the LP's node patterns
let running jobs move between nodes of a model for free): its "domain" is a node here.

`place_by_eviction(g, info, models, n)` does it for one unplaced gang:

1. for each model of `models` and each group of nodes the gang may use there (one per
   domain of its required levels, one node for a single-node gang; a gang spanning nodes
   without a required level fails only when its model lacks free GPUs, which is not a
   domain's fragmentation, and is left alone), count the
   GPUs of the model that are free or held whole by a job that may move (not a
   non-preemptible running one); shared and MIG GPUs stay as they are;
2. where that is at least n, pick the jobs to evict: two orders (most GPUs held in the
   group first; least value per GPU held first), each dropping afterwards the jobs the
   others make unnecessary (most valuable first); the options are tried by the value
   they take out, least first, at most `TRIES` of them;
3. take the evicted jobs out, place the gang (`Greedy.find_gang`, the same checks as
   every placement), put the evicted jobs back at their best fit (largest first; a
   `prefer` model first, e.g. the LP's), and keep the move only when the objective rises:
   the gang's net value, minus what the evicted jobs lose (value on their new model and
   size, migration cost when a running one moves, preemption cost when it stays out,
   topology costs). Otherwise everything goes back where it was.

The rounding calls it twice: in its step 2 (a gang spanning nodes that the LP places and
no domain has room for among the gangs placed so far) with `strict` (every evicted job
back on its LP model: the rest of the rounding still has to place the LP's other jobs,
and a job pushed off its model takes room the LP gave to others, which this move's own
count does not see; M seed 2 without elastic gangs: a 32-GPU gang placed that way pushed
another onto A100, -70), and once every job has had its turn, with the final count,
single-node gangs included (M seed 0 with elastic gangs: an 8-GPU A100 gang, +2 to +10 on
the two roundings).

Only whole-GPU jobs move, so no shared job's co-location factor changes (contract 5.2)
and the change of objective is exact. Not with lexicographic levels (quotas' guaranteed
usage, priority classes): the objective alone does not rank those plans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from heuristics.greedy import Greedy
from models import Placement
from models.instance import JobInfo
from models.rules import lexicographic_levels, required_levels

#: Eviction options tried per gang, least value taken out first.
TRIES = 4


@dataclass
class _Option:
    """A set of jobs to evict from a group of nodes so that a gang fits there."""

    value: float
    gpus: int
    model: str
    jobs: list[JobInfo]


def place_by_eviction(g: Greedy, info: JobInfo, models: Sequence[str], n: int | None = None,
                      prefer: Mapping[str, str] | None = None, strict: bool = False) -> bool:
    """Place unplaced gang `info` (single-node, or spanning nodes with a required level) on
    `n` GPUs (default: its size) of one of `models` by evicting movable whole-GPU jobs
    from one of its domains or nodes (module doc); `prefer`: job name -> the model to put
    an evicted job back on first; with `strict`, every evicted job must go back on that
    model. True when the gang was placed and the objective rose; the state is unchanged
    otherwise."""
    return not lexicographic_levels(g.request) and _place(g, info, models, n, prefer or {},
                                                          strict)


def _place(g: Greedy, info: JobInfo, models: Sequence[str], n: int | None,
           prefer: Mapping[str, str], strict: bool) -> bool:
    """`place_by_eviction` once the request is known to have no lexicographic levels."""
    k = n if n is not None else info.gpus
    if (info.name in g.state.placed or info.shape != "whole"
            or k < 2 or info.pinned
            or not (info.job.single_node or required_levels(info.job))):
        return False
    options = [opt for model in models if model in info.values
               for nodes in _groups(g, info, model)
               for opt in _options(g, model, nodes, k)]
    options.sort(key=lambda o: (o.value, o.gpus, o.model))
    seen: set[tuple[str, ...]] = set()
    tried = 0
    for opt in options:
        key = (opt.model, *sorted(j.name for j in opt.jobs))
        if key in seen:
            continue
        seen.add(key)
        if _try(g, info, opt, k, prefer, strict):
            return True
        tried += 1
        if tried >= TRIES:
            break
    return False


def _groups(g: Greedy, info: JobInfo, model: str) -> list[list[int]]:
    """The node groups gang `info` may use on `model`: one per domain of all its
    required levels at once, one per node for a single-node gang."""
    st = g.state
    levels = ("host",) if info.job.single_node else required_levels(info.job)
    groups: dict[tuple[str, ...], list[int]] = {}
    for node in st.nodes:
        # a node's free-GPU index has a key per model of its usable whole GPUs
        if not node.schedulable or model not in st.free_gpus[node.idx]:
            continue
        if "domain" in levels and node.domain is None:
            continue
        key = tuple(g.topology.domain(node.name, lv) for lv in levels)
        groups.setdefault(key, []).append(node.idx)
    return [groups[key] for key in sorted(groups)]


def _options(g: Greedy, model: str, nodes: list[int], k: int) -> list[_Option]:
    """The eviction options that give `k` GPUs of `model` in the group `nodes` (none when
    it has room already or cannot have it)."""
    st = g.state
    free = 0
    held: dict[str, int] = {}
    for ni in nodes:
        free += st.free_count(ni, model)
        for gid in st.nodes[ni].gpus:
            gpu = st.gpus[gid]
            if gpu.model != model or gpu.mig or not gpu.usable or gpu.whole_job is None:
                continue
            owner = g.by_name[gpu.whole_job]
            if not owner.pinned:
                held[owner.name] = held.get(owner.name, 0) + 1
    need = k - free
    if need <= 0 or sum(held.values()) < need:
        return []
    jobs = [g.by_name[name] for name in held]
    worth = {j.name: _net_now(g, j) for j in jobs}
    out: list[_Option] = []
    orders: list[Callable[[JobInfo], tuple[float, float, str]]] = [
        lambda j: (-held[j.name], worth[j.name], j.name),
        lambda j: (worth[j.name] / held[j.name], -held[j.name], j.name)]
    for order in orders:
        chosen: list[JobInfo] = []
        got = 0
        for j in sorted(jobs, key=order):
            if got >= need:
                break
            chosen.append(j)
            got += held[j.name]
        for j in sorted(chosen, key=lambda j: (-worth[j.name], j.name)):
            if got - held[j.name] >= need:
                chosen.remove(j)
                got -= held[j.name]
        out.append(_Option(sum(worth[j.name] for j in chosen), got, model, chosen))
    return out


def _net_now(g: Greedy, info: JobInfo) -> float:
    """The objective term of `info` as the state has it (`Greedy.term`)."""
    return g.term(info, g.state.placed.get(info.name))


def _try(g: Greedy, info: JobInfo, opt: _Option, k: int, prefer: Mapping[str, str],
         strict: bool) -> bool:
    """Evict `opt.jobs`, place `info` on k GPUs of `opt.model`, put the evicted jobs back
    (with `strict`, each on its `prefer` model); keep it when the objective rose, else
    restore the state. True when kept."""
    st = g.state
    before = sum(_net_now(g, j) for j in opt.jobs) + _net_now(g, info)
    old: dict[str, list[Placement]] = {}
    for j in opt.jobs:
        pl = st.remove(j)
        if pl:
            old[j.name] = pl
    found = g.find_gang(info, opt.model, k)
    if found is not None:
        st.place(info, found)
        for j in sorted(opt.jobs, key=lambda j: (-j.size, -j.best_value, j.name)):
            target = prefer.get(j.name)
            if not (target is not None and target in j.values and g.place(j, [target])):
                g.place(j)
        after = sum(_net_now(g, j) for j in opt.jobs) + _net_now(g, info)
        if after > before + 1e-9 and not (strict and any(
                st.placed.get(j.name) is None
                or st.model_of(st.placed[j.name]) != prefer.get(j.name) for j in opt.jobs)):
            g.reasons.pop(info.name, None)
            for j in opt.jobs:
                if j.name not in st.placed:
                    g.reasons[j.name] = g.why_unplaced(j)
            return True
        for j in (info, *opt.jobs):
            st.remove(j)
    for name, pl in old.items():
        st.place(g.by_name[name], pl)
    return False


def place_targets_by_eviction(g: Greedy, targets: Mapping[str, str],
                              sizes: Mapping[str, float] | None = None,
                              late: Callable[[], bool] | None = None, *,
                              prefer: Mapping[str, str] | None = None,
                              strict: bool = False) -> int:
    """`place_by_eviction` for every gang that `targets` (job name -> the LP's model)
    places and the state has left out, most valuable first, on its target
    model at its LP size (`sizes`, elastic gangs) or its own, evicted jobs back on their
    `prefer` model first (default: `targets`); stops when `late()` says so. Returns how
    many were placed."""
    if lexicographic_levels(g.request):
        return 0
    st = g.state
    gangs = [g.by_name[name] for name in targets if name in g.by_name
             and name not in st.placed]
    gangs = [i for i in gangs if i.shape == "whole"
             and (i.job.single_node or required_levels(i.job))]
    done = 0
    for info in sorted(gangs, key=lambda i: (-g.value_on(i, targets[i.name]), i.name)):
        if late is not None and late():
            break
        n = round(sizes[info.name]) if info.elastic and sizes and info.name in sizes else None
        done += _place(g, info, [targets[info.name]], n,
                       targets if prefer is None else prefer, strict)
    return done
