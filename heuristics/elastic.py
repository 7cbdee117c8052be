"""Elastic gangs (contract 5.1) resized where they run: the moves that free GPUs.

Best fit places a running job where it runs, at the size it runs at, before anything
else; a new gang that needs room then takes the GPUs of other running jobs (which are
preempted) even when shrinking an elastic gang would have made that room at a smaller
loss. The aggregated LP (solver/bound.py) sees this: it prices every allowed size of an
elastic gang, and often keeps a running gang on its model at a smaller size. Here such a
gang keeps `n` of the GPUs it runs on (`keep_resized`), so the rest are free for the jobs
the LP put there:

- the GPUs kept are usable ones (a subset is a new placement: an unschedulable node or an
  unhealthy GPU that the gang may keep whole cannot be part of it) of an eligible model,
  those of its nodes with the most of its GPUs first, so that it spans as
  few nodes (and topology domains) as it can: a subset of a placement that honoured
  `single_node`, `same_domain` and the required topology levels still does, and spans no
  more domains of a preferred level;
- host CPU and memory are requested pro rata (n / gpus of the job's), so they fit where
  the whole gang did;
- the gang is `migrated` (its GPU set changed; contract 5.1) and pays the migration cost,
  which the LP does not see; the plan's objective decides whether it was worth it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from heuristics.greedy import Greedy
from models import Placement
from models.instance import JobInfo


def kept_subset(g: Greedy, info: JobInfo, n: int) -> list[Placement]:
    """`n` of running gang `info`'s current GPUs that are usable (healthy, on a
    schedulable node: a subset is a new placement, not grandfathered), from the nodes
    holding most of them first (ties: node name), each node's GPUs by index; fewer when
    not enough are usable."""
    st = g.state
    by_node: dict[str, list[Placement]] = defaultdict(list)
    for p in info.current or []:
        if st.gpus[st.gid_of[(p.node, p.gpu)]].usable:
            by_node[p.node].append(p)
    out: list[Placement] = []
    for node in sorted(by_node, key=lambda nd: (-len(by_node[nd]), nd)):
        for p in sorted(by_node[node], key=lambda p: p.gpu):
            if len(out) == n:
                return out
            out.append(p)
    return out


def keep_resized(g: Greedy, info: JobInfo, n: int) -> bool:
    """Keep running elastic gang `info` on `n` of its current GPUs (`kept_subset`) when
    `n` is an allowed size below its current one, its current placement is consistent
    and the subset is free now, usable and on a model the job is eligible for (it is a
    new placement, contract 5.1); True when placed."""
    cur = info.current
    if (not cur or not info.elastic or not info.preemptible or n not in info.sizes
            or n >= len(cur) or info.name in g.state.placed or not g.current_ok(info)
            or g.state.model_of(cur) not in info.values):
        return False
    keep = kept_subset(g, info, n)
    if len(keep) < n or g.state.conflicts(info, keep) is not None:
        return False
    g.state.place(info, keep)
    g.reasons.pop(info.name, None)
    return True


def shrink_to_sizes(g: Greedy, infos: Iterable[JobInfo], sizes: Mapping[str, float] | None
                    ) -> int:
    """Keep each running elastic gang of `infos` that `sizes` (job name -> the LP's size)
    shrinks on `n` of its current GPUs (`keep_resized`), largest gangs first; returns
    how many were kept so."""
    if not sizes:
        return 0
    done = 0
    for info in sorted(infos, key=lambda i: (-len(i.current or []), i.name)):
        n = sizes.get(info.name)
        if n is not None and info.elastic and info.current:
            done += keep_resized(g, info, round(n))
    return done
