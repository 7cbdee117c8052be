"""What a plan reports about quotas and priority classes (contract 5.3 / 5.4): the
`stats.quota` table, the `stats.levels` list and the reasons of the jobs the levels left
out. solver/build.py calls `level_stats` and `level_reasons` for requests with levels.

- `stats.quota`: tenant -> key (model or "*") -> `{"usage", "guaranteed", "limit"}` for
  every key the tenant guarantees or limits (guaranteed 0 and limit null when not given);
  a usage above the limit can only come from non-preemptible running jobs kept in place.
- `stats.levels`: `[{"level": "quota", "value": guaranteed usage served}, {"level":
  "priority <p>", "priority": p, "value": the class's objective}, ...]`, highest first;
  `add_level_bounds` gives each level its `bound` when the time left allows: a proven
  upper bound of that level's value in the lexicographic optimum (solver/level_bound.py),
  so a level whose value meets its bound, below levels that meet theirs, is optimal;
  `level_gap` is how far a value is below its bound.
- Reasons: a new job left out with `insufficient_capacity` becomes `lower_priority` when
  it would not fit beside the higher-class jobs and the jobs that count toward a
  guarantee alone (they took its capacity), and `quota_limit` when it would fit beside the
  plan's jobs but a quota limit of its tenant or an ancestor is reached (requests of more
  than `REFINE_MAX_JOBS` jobs keep `insufficient_capacity`: the test replays the placer per
  class, seconds at 20,000 jobs). A stopped running
  job whose GPUs now serve another tenant's guarantee or a higher class says so in its
  `preempted` detail ("reclaimed by tenant ..." / "preempted by ... of class ...").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from heuristics.greedy import Greedy
from models import Job, Placement, Plan, PlanRequest
from models.cache import beside
from models.instance import ClusterState, JobInfo, compile_jobs
from models.objective import gpu_models_of, level_values, quota_usage_of
from models.reasons import INSUFFICIENT
from models.rules import QuotaKey, quota_keys, quota_usage
from solver.level_bound import level_bounds

Reason = tuple[str, str]

#: Above this many jobs the unplaced new jobs keep their reasons (module doc).
REFINE_MAX_JOBS = 5000


def level_stats(request: PlanRequest, placements: Mapping[str, Sequence[Placement]]
                ) -> dict[str, object]:
    """`stats.quota` (with quotas) and `stats.levels` (module doc)."""
    out: dict[str, object] = {}
    quotas = request.cluster.quotas
    usage = quota_usage_of(request, placements, beside(request, "gpu_models", gpu_models_of))
    if quotas:
        out["quota"] = {
            t: {k: {"usage": round(usage.get((t, k), 0.0), 9),
                    "guaranteed": q.guaranteed.get(k, 0.0), "limit": q.limit.get(k)}
                for k in sorted(set(q.guaranteed) | set(q.limit))}
            for t, q in quotas.items()}
    levels: list[dict[str, object]] = []
    for name, value in level_values(request, placements, usage):
        item: dict[str, object] = {"level": name, "value": round(value, 9)}
        if name.startswith("priority "):
            item["priority"] = int(name.split(" ", 1)[1])
        levels.append(item)
    out["levels"] = levels
    return out


def level_gap(value: float, bound: float, empty: float) -> float:
    """How far a level's `value` is below its `bound`, relative to the range between the
    bound and `empty`, the level's value with none of its jobs placed (0 for the quota
    level, minus the preemption costs of its running jobs for a class level;
    `level_values(request, {})`): max(0, bound - value) / max(1, bound - empty, |bound|).
    A class's value includes its costs and may be negative or near 0, where a gap
    relative to the bound or the value says nothing; for a level without running jobs
    (empty 0) and a bound of at least 1 it is the usual (bound - value) / bound."""
    return max(0.0, bound - value) / max(1.0, bound - empty, abs(bound))


#: the least time (s) worth starting the level bounds with
LEVEL_BOUND_MIN_S = 0.05


def add_level_bounds(request: PlanRequest, plan: Plan, seconds: float) -> None:
    """Give each item of `plan.stats.levels` its `bound` (module doc), within `seconds`;
    a level whose LP does not finish in time keeps none. A bound below the value by float
    noise only (1e-6 relative) is raised to it."""
    levels = getattr(plan.stats, "levels", None)
    if not isinstance(levels, list) or not levels or seconds < LEVEL_BOUND_MIN_S:
        return
    placements = {a.job: a.placements for a in plan.assignments}
    for item, b in zip(levels, level_bounds(request, placements, seconds), strict=False):
        if b is None:
            continue
        v = float(item["value"])
        if v - 1e-6 * (1.0 + abs(v)) <= b < v:
            b = v
        item["bound"] = round(b, 9)


class _Guarantees:
    """Which quota keys with a guarantee a job of a tenant on a model counts toward
    (`quota_keys` with guaranteed > 0), looked up once per (tenant, model) pair."""

    def __init__(self, request: PlanRequest) -> None:
        self.quotas = request.cluster.quotas
        self.catalog = request.cluster.catalog()
        self._keys: dict[tuple[str, str], list[tuple[QuotaKey, float]]] = {}

    def keys(self, tenant: str, model: str) -> list[tuple[QuotaKey, float]]:
        """(key, guaranteed) of each key of `quota_keys(quotas, tenant, model)` with a
        positive guarantee, in its order."""
        pair = (tenant, model)
        hit = self._keys.get(pair)
        if hit is None:
            quotas = self.quotas
            hit = self._keys[pair] = [
                ((t, k), quotas[t].guaranteed[k]) for t, k in quota_keys(quotas, tenant, model)
                if quotas[t].guaranteed.get(k, 0.0) > 0]
        return hit

    def served_by(self, job: Job, model: str, usage: Mapping[QuotaKey, float] | None = None
                  ) -> bool:
        """Whether `job` on `model` counts toward some guarantee (with `usage`: whether
        taking it out, its `quota_usage` there, would serve less guaranteed usage)."""
        keys = self.keys(job.tenant, model)
        if not keys or usage is None:
            return bool(keys)
        size = quota_usage(job, self.catalog[model])
        return any(usage.get(key, 0.0) - size < g - 1e-9 for key, g in keys)


def level_reasons(request: PlanRequest, placements: Mapping[str, Sequence[Placement]],
                  reasons: Mapping[str, Reason]) -> dict[str, Reason]:
    """The refined reasons of the unplaced jobs (module doc); the others as given."""
    out = dict(reasons)
    models = beside(request, "gpu_models", gpu_models_of)
    infos = compile_jobs(request)
    by_name = {i.name: i for i in infos}
    placed_model = {n: models[(p[0].node, p[0].gpu)] for n, p in placements.items() if p}
    usage = quota_usage_of(request, placements, models)
    guarantees = _Guarantees(request)
    occupants: dict[tuple[str, int], list[str]] | None = None
    # the plan's state, for the refinement only (L: 0.2 CPU s to build, unused beyond it)
    full = Greedy(request, infos) if len(infos) <= REFINE_MAX_JOBS else None
    for name, pls in placements.items():
        if pls and full is not None:
            full.state.place(by_name[name], list(pls))
    #: priority -> a placer over the jobs that outrank a job of that class
    protected: dict[int, Greedy] = {}
    for info in infos:
        job = info.job
        if info.name in placed_model:
            continue
        if info.current:
            if occupants is None:
                occupants = {}
                for name, pls in placements.items():
                    for p in pls:
                        occupants.setdefault((p.node, p.gpu), []).append(name)
            _preempted_detail(info, by_name, occupants, placed_model, usage, guarantees, out)
            continue
        if full is None or out.get(info.name, INSUFFICIENT)[0] != INSUFFICIENT[0]:
            continue
        key = job.priority
        if key not in protected:
            state = ClusterState(request)
            state.quotas = {}  # capacity alone: limits are `quota_limit`'s business
            for name, model in placed_model.items():
                other = by_name[name].job
                if other.priority > key or guarantees.served_by(other, model):
                    state.place(by_name[name], list(placements[name]))
            protected[key] = Greedy(request, infos, state)
        if protected[key].find(info) is None:
            out[info.name] = ("lower_priority", "higher priority classes or other tenants' "
                              "guarantees hold the capacity it could use")
        elif request.cluster.quotas and any(
                not full.state.quota_fits(info, m) for m in info.values) and all(
                not full.state.quota_fits(info, m) or full.find(info, [m]) is None
                for m in info.values):
            out[info.name] = ("quota_limit", f"tenant {job.tenant} (or an ancestor) has "
                              "reached a quota limit on the models with room for it")
    return out


def _preempted_detail(info: JobInfo, infos: Mapping[str, JobInfo],
                      occupants: Mapping[tuple[str, int], list[str]],
                      placed_model: Mapping[str, str], usage: Mapping[QuotaKey, float],
                      guarantees: _Guarantees, out: dict[str, Reason]) -> None:
    """Name the reclaiming tenant or the higher class that took a stopped job's GPUs."""
    job = info.job
    others = sorted({o for p in job.current or [] for o in occupants.get((p.node, p.gpu), [])})
    for other in others:
        o = infos[other].job
        model = placed_model[other]
        if o.tenant != job.tenant and guarantees.served_by(o, model, usage):
            out[info.name] = ("preempted", f"reclaimed by tenant {o.tenant} for its "
                              f"guaranteed quota (job {other})")
            return
        if o.priority > job.priority:
            out[info.name] = ("preempted", f"preempted by {other} of the higher priority "
                              f"class {o.priority}")
            return
