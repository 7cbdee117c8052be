"""Repacking one GPU model for one priority class (contract 5.4's class levels): the
exchange of many jobs at once that the one-node exchanges of heuristics/levels.py miss.

Why one node at a time is not enough. A running gang may be moved off its node because a
new, larger gang of its class holds that node; sending the gang home needs the larger
gang somewhere else, which needs other nodes cleared, whose small jobs then go where the
larger gang's GPUs were and, for the few that are left, to another model. Each step alone
loses value; the whole chain gains (M, seed 0: an 8-GPU class-1000 gang back home on H200
saves its migration cost and its H100 penalty, +2.72, while the few 1-GPU jobs of its class
that lose least on H100 go there, about -0.3 each).

`repack_classes(request, result, deadline)`, for each class p from the highest down and
each running class-p whole-GPU job r that the plan has away from its GPUs and that would
gain back on the model m it runs on (at most REPACK_TRIES a class, the largest gain
first; M, seed 0: 3 in class 1000, 0.01-0.03 s each), one repack:

1. Take out every whole-GPU job of class p or lower on m's whole GPUs (not MIG ones, none
   that must stay where it runs: `heuristics.levels.may_move`), and r when the plan has
   it on another model. (All such jobs at once, or every class-p job worth more on m,
   pushed too many small jobs to other models: M, class 1000 -8.6 and -16.9.)
2. Put the running class-p jobs back on the GPUs they run on where those are free (the
   largest first: no migration cost), then the other class-p jobs on m, the largest first
   and within a size those that lose most off m first (so that the jobs left for other
   models are the ones that lose least there), then the class-p jobs that found no room
   on m on any model (`Greedy.place`), then the lower-class jobs (their own running GPUs
   when free, else anywhere), highest class first.
3. Keep the result when no less guaranteed usage is served and the classes rise
   lexicographically on the jobs taken out (`heuristics.levels.rises`); else undo.

Lower-class jobs that find no room are left out (`lower_priority`); a kept repack never
lowers a higher level, so the levels rise and the loop ends. Every answer then passes
`heuristics.levels.restore_displaced`, and is returned only when it ranks higher by
`models.objective.level_key`.

After a class's repacks, `_swaps` exchanges the GPUs of two of its 1-GPU jobs on two
models when both fit the other's GPU and the class gains (a job that loses little off a
model for one that gains more there; the one-node exchanges clear a node for a job and
put the occupants back by best fit, which seldom lands them on the GPU it left): for each
pair of models, the jobs on each that would gain most on the other are paired in that
order while the estimated gain is positive (M, seed 0: class 1000 +0.03, class 100
+3.0; 0.05 s).
"""

from __future__ import annotations

import time

from heuristics.greedy import Greedy
from heuristics.levels import keep_or_undo, may_move, placer_of, restore_displaced, rises
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.instance import JobInfo
from models.objective import level_key, same_placement
from models.rules import guaranteed_served, lexicographic_levels, priority_classes

#: repacks tried per class at most (module doc)
REPACK_TRIES = 8


def _gain_on(g: Greedy, info: JobInfo, model: str) -> float:
    """What placed whole-GPU job `info` would gain on `model` at its size, against its
    term now (a running job counted at home when it runs on `model`)."""
    pl = g.state.placed[info.name]
    cost = 0.0 if info.current and g.state.model_of(info.current) == model else (
        g.request.policy.migration_cost if info.current else 0.0)
    return g.value_on(info, model, len(pl)) - cost - g.term(info, pl)


def _tries(g: Greedy, p: int) -> list[tuple[str, list[JobInfo]]]:
    """The repacks to try for class p (module doc), at most REPACK_TRIES, the largest
    gain first: (model, [job]) for each placed running class-p whole-GPU job that may
    move and would gain back on the model it runs on now (the plan has it on another
    model, or elsewhere on that one: then the job is among those taken out anyway)."""
    st = g.state
    out: list[tuple[float, str, str, bool]] = []
    for i in g.infos:
        pl = st.placed.get(i.name)
        if (i.job.priority != p or i.shape != "whole" or not pl or not i.current
                or same_placement(pl, i.current) or not may_move(g, i)):
            continue
        model = st.model_of(i.current)
        gain = _gain_on(g, i, model)
        if gain > 1e-9:
            out.append((-gain, i.name, model, st.model_of(pl) != model))
    out.sort()
    return [(m, [g.by_name[n]] if off else []) for _, n, m, off in out[:REPACK_TRIES]]


def _inside(g: Greedy, p: int, model: str) -> list[JobInfo]:
    """The whole-GPU jobs of class p or lower on `model`'s whole GPUs that may move."""
    st = g.state
    names: set[str] = set()
    for gpu in st.gpus:
        if gpu.model == model and gpu.usable and not gpu.mig and gpu.whole_job:
            names.add(gpu.whole_job)
    return [g.by_name[n] for n in sorted(names)
            if g.by_name[n].job.priority <= p and may_move(g, g.by_name[n])]


def _home(g: Greedy, i: JobInfo) -> bool:
    """Put running job `i` on the GPUs it runs on when they are free and its quota lets
    it. True when placed."""
    st = g.state
    cur = list(i.current or [])
    if not cur or not g.current_ok(i) or st.conflicts(i, cur) is not None:
        return False
    if st.quotas and not st.quota_fits(i, st.model_of(cur)):
        return False
    st.place(i, cur)
    return True


def _loss_off(g: Greedy, i: JobInfo, model: str) -> float:
    """What whole-GPU job `i` loses per GPU on its next-best model against `model`."""
    here = g.value_on(i, model, i.gpus)
    other = max((g.value_on(i, m, i.gpus) for m in i.values if m != model), default=0.0)
    return (here - other) / max(1, i.gpus)


def _refill(g: Greedy, p: int, model: str, jobs: list[JobInfo]) -> None:
    """Step 2 of the module doc: put `jobs` (taken out) back for class p on `model`."""
    st = g.state
    mine = [i for i in jobs if i.job.priority == p]
    for i in sorted((i for i in mine if i.current and st.model_of(i.current) == model),
                    key=lambda i: (-i.gpus, i.name)):
        _home(g, i)
    rest = sorted((i for i in mine if i.name not in st.placed),
                  key=lambda i: (-i.gpus, -_loss_off(g, i, model), i.name))
    for i in rest:
        found = g.find(i, [model])
        if found is not None:
            st.place(i, found)
    for i in rest:
        g.place(i)
    lower = sorted((i for i in jobs if i.job.priority < p),
                   key=lambda i: (-i.job.priority, -i.gpus, i.name))
    for i in lower:
        if not _home(g, i):
            g.place(i)


def _repack(g: Greedy, p: int, model: str, extra: list[JobInfo]) -> bool:
    """Repack `model` for class p with the jobs `extra` from other models (module doc);
    True when kept."""
    st = g.state
    jobs = {i.name: i for i in (*_inside(g, p, model), *extra)}
    if not jobs:
        return False
    before = guaranteed_served(st.quotas, st.quota_used)
    old: dict[str, list[Placement]] = {n: st.remove(i) or [] for n, i in jobs.items()}
    _refill(g, p, model, list(jobs.values()))
    return keep_or_undo(g, old, before, f"its GPUs went to class {p} jobs repacked on {model}")


def _delta_to(g: Greedy, i: JobInfo, model: str) -> float:
    """What placed 1-GPU job `i` would gain on a GPU of `model` (paying the migration
    cost when it runs now), against its term now: the estimate `_swaps` pairs jobs by."""
    cost = g.request.policy.migration_cost if i.current else 0.0
    return g.value_on(i, model, 1) - cost - g.term(i, g.state.placed[i.name])


def _usable(g: Greedy, pl: list[Placement]) -> bool:
    """Whether every GPU of `pl` may take a job that does not run there now (a running
    job may be kept on a GPU that is no longer usable, as on a node not schedulable)."""
    st = g.state
    return all(st.gpus[st.gid_of[(q.node, q.gpu)]].usable for q in pl)


def _swap(g: Greedy, a: JobInfo, b: JobInfo) -> bool:
    """Exchange the GPUs of placed 1-GPU jobs `a` and `b` of one class (on two models);
    kept when each fits the other's GPU (usable, `ClusterState.conflicts`: host, quota
    limits), no less guaranteed usage is served and the class rises (`rises`), else undone. True
    when kept."""
    st = g.state
    pa, pb = st.placed[a.name], st.placed[b.name]
    if (st.model_of(pb) not in a.values or st.model_of(pa) not in b.values
            or not _usable(g, pb) or not _usable(g, pa)):
        return False
    delta = g.term(a, pb) - g.term(a, pa) + g.term(b, pa) - g.term(b, pb)
    if not rises({a.job.priority: delta}):
        return False
    before = guaranteed_served(st.quotas, st.quota_used)
    st.remove(a)
    st.remove(b)
    if st.conflicts(a, pb) is None:
        st.place(a, pb)
        if st.conflicts(b, pa) is None:
            st.place(b, pa)
            if guaranteed_served(st.quotas, st.quota_used) >= before - 1e-9 * max(1.0, before):
                return True
            st.remove(b)
        st.remove(a)
    st.place(a, pa)
    st.place(b, pb)
    return False


def _swaps(g: Greedy, p: int, deadline: float | None) -> bool:
    """Swaps of class-p 1-GPU jobs between two models (module doc): for each ordered pair
    of models, the jobs on each that would gain most on the other, paired in that order
    while the pair's estimated gain is positive, each swap tried (`_swap`). True when one
    was kept."""
    st = g.state
    on: dict[str, list[JobInfo]] = {}
    for i in g.infos:
        pl = st.placed.get(i.name)
        if (i.job.priority == p and i.shape == "whole" and pl and len(pl) == 1
                and not i.elastic and may_move(g, i)):
            on.setdefault(st.model_of(pl), []).append(i)
    done = False
    models = sorted(on)
    for x, ma in enumerate(models):
        for mb in models[x + 1:]:
            if deadline is not None and time.monotonic() > deadline:
                return done
            la = sorted((i for i in on[ma] if mb in i.values),
                        key=lambda i: (-_delta_to(g, i, mb), i.name))
            lb = sorted((i for i in on[mb] if ma in i.values),
                        key=lambda i: (-_delta_to(g, i, ma), i.name))
            for a, b in zip(la, lb, strict=False):
                if _delta_to(g, a, mb) + _delta_to(g, b, ma) <= 1e-9:
                    break
                done = _swap(g, a, b) or done
    return done


def repack_classes(request: PlanRequest, result: HeuristicResult,
                   deadline: float | None = None) -> HeuristicResult:
    """`result` with models repacked class by class (module doc; additive objectives),
    until `deadline` (a `time.monotonic()` instant), then `restore_displaced`; `result`
    itself unless that ranks higher by `models.objective.level_key`."""
    if (not lexicographic_levels(request)
            or request.policy.objective in ("fairness", "priority_fifo")):
        return result
    g = placer_of(request, result)
    done = False
    for p in priority_classes(request.jobs):
        for model, extra in _tries(g, p):
            if deadline is not None and time.monotonic() > deadline:
                break
            done = _repack(g, p, model, extra) or done
        done = _swaps(g, p, deadline) or done
    if not done:
        return result
    out = restore_displaced(request, g.result())
    if level_key(request, out.placements) <= level_key(request, result.placements):
        return result
    return out
