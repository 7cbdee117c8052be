"""Co-location interference (contract 5.2) for the heuristics: what a shared placement is
worth given the jobs already on its GPU.

A shared job of class a beside jobs of classes b1, b2, ... runs at the product of the
speeds s(a, b_i) (`models.rules.colocation_factor`, the rule's one home). Placing job j
on GPU g therefore changes the objective by

    gain(j, g) = value(j) * F_j(residents of g)
               + sum_{k on g} value(k) * F_k(residents of g) * (s(class k, class j) - 1),

its own factored value plus what it does to the residents. A job without a class, or a
request without pairs, has no effect on anyone, and `gain` is then its plain value: the
heuristics keep their v1 behaviour exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from models import PlanRequest
from models.instance import ClusterState, JobInfo
from models.rules import colocation_factor, interference_table

#: value_of(job, model): a job's per-job objective value on a model (factor 1).
ValueOf = Callable[[JobInfo, str], float]


class Colocation:
    """The interference pairs of one request and the classes of its shared jobs."""

    def __init__(self, request: PlanRequest, infos: Iterable[JobInfo]) -> None:
        self.table = interference_table(request.interference)
        relevant = {c for pair in self.table for c in pair}
        #: shared job name -> its class, for classes some pair names
        self.cls: dict[str, str] = {}
        if self.table:
            for info in infos:
                c = info.job.colocation_class
                if info.shape == "share" and c is not None and c in relevant:
                    self.cls[info.name] = c

    @property
    def active(self) -> bool:
        """Whether any placement's value can depend on its co-residents."""
        return bool(self.cls)

    def factor(self, name: str, residents: Iterable[str]) -> float:
        """The factor of job `name` beside the jobs `residents` (itself skipped)."""
        mine = self.cls.get(name)
        if mine is None:
            return 1.0
        return colocation_factor(mine, (self.cls.get(o) for o in residents if o != name),
                                 self.table)

    def factor_now(self, state: ClusterState, info: JobInfo) -> float:
        """The factor of placed job `info` where `state` has it now (1 if not shared)."""
        if info.name not in self.cls:
            return 1.0
        pl = state.placed.get(info.name)
        if not pl or pl[0].fraction is None:
            return 1.0
        g = state.gpus[state.gid_of[(pl[0].node, pl[0].gpu)]]
        return self.factor(info.name, g.share_jobs)

    def gain(self, state: ClusterState, info: JobInfo, gid: int, value_of: ValueOf,
             by_name: Mapping[str, JobInfo]) -> float:
        """The objective's change if `info` joins GPU `gid` as it is now (module doc)."""
        g = state.gpus[gid]
        plain = value_of(info, g.model)
        mine = self.cls.get(info.name)
        if mine is None:
            return plain
        residents = list(g.share_jobs)
        out = plain * self.factor(info.name, residents)
        for other in residents:
            theirs = self.cls.get(other)
            s = self.table.get((theirs, mine), 1.0) if theirs is not None else 1.0
            if s != 1.0:
                k = by_name[other]
                out += value_of(k, g.model) * self.factor(other, residents) * (s - 1.0)
        return out
