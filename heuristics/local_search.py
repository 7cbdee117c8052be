"""Local search over a heuristic plan: ruin and recreate while time remains.

`improve(request, result, deadline=...)` loads `result` into a `ClusterState` and repeats:

1. *repair*: try to place every unplaced job (densest first) where it fits now;
2. *ruin*: pick a few nodes at random (of one GPU model; a whole topology domain now and
   then, so that multi-node gangs can form) and take out every job that touches them
   (whole gangs, shares, MIG instances; never a non-preemptible running job);
3. *recreate*: put back the removed jobs together with the best unplaced jobs eligible on
   those models, in one of three orders (value density, value, or density with random
   noise), each at its best fit (a running job first tries its own placement). Taking MIG
   jobs out and putting them back in best-fit order repacks MIG layouts; putting a big gang
   first trades several small jobs for it; a running job that is not put back is preempted
   (only when `allow_preemption` is true) and one put elsewhere is migrated;
4. keep the move when the objective improves (incrementally: per-job values minus
   migration and preemption costs; for `fairness` the minimum tenant share, then
   throughput), undo it otherwise. With co-location interference (contract 5.2) a shared
   job's value carries its factor, and a move re-scores the jobs sharing a GPU with the
   jobs it moved (before and after), so a move's value includes what it does to their
   co-residents; the recreate step places classed shared jobs interference-aware
   (heuristics/colocation.py through the greedy). With quotas or priority classes the
   levels of `models.objective.level_key` come first (recomputed per move), so a move never
   lowers the guaranteed usage served or a higher class; the placer respects quota limits.

Before the loop, and now and then inside it, an *evict-and-place* move targets the
unplaced gangs (whole-GPU jobs of 2+ GPUs) that no node has room for although free GPUs
are scattered over several nodes: for the nodes of an eligible model where the gang lacks
the fewest GPUs, it takes out the few jobs holding them (fewest jobs, then least value),
puts the gang there, and re-places the evicted jobs elsewhere at their best fit (a
running one is thereby migrated, or preempted if nothing fits). Like any move it is kept
only when the objective, migration and preemption costs included, improves. Ruin and
recreate rarely finds this: the evicted jobs are denser than the gang and take back their
own GPUs first.

Elastic gangs (contract 5.1): a job put back by recreate takes the greedy's size (best
value per GPU that fits) and then grows into what is still free (`Greedy.grow`); and now
and then a *resize* move picks a placed elastic gang at random and either grows it to a
larger allowed size on its model, or shrinks it to a smaller one and offers the GPUs it
frees to the densest unplaced jobs of that model. Both are kept only when the objective
improves, like every move (a running gang's resize is a migration).

The result is compared with the input by `models.objective.evaluate` and the better one is
returned, so `improve` never makes a plan worse. For `priority_fifo` only the repair step
runs in the strict priority order (ruin and recreate could create priority inversions),
and so it does for requests with levels of more than `LEVEL_MOVES_MAX_JOBS` jobs (each
move recomputes the levels, which costs a pass over the jobs).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Sequence
from threading import Event

from heuristics.greedy import Greedy, fifo_key
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.instance import ClusterState, JobInfo, compile_jobs
from models.objective import evaluate, level_key, same_placement, tenant_demands
from models.rules import job_value, lexicographic_levels

#: Unplaced jobs offered to one recreate step, at most.
_CANDIDATES = 40
#: Jobs scanned per model for relocations, at most.
_SCAN = 400
#: Nodes ruined per move, at most.
_RUIN_NODES = 3
#: Unplaced gangs an evict-and-place pass tries, densest first, at most.
_ROOM_GANGS = 8
#: Nodes tried per gang by evict-and-place (fewest evictions first), at most.
_ROOM_NODES = 2
#: With quotas or priority classes, moves run up to this many jobs (module doc).
LEVEL_MOVES_MAX_JOBS = 5000


class _Score:
    """Incremental objective: per-job contributions and per-tenant placed values."""

    def __init__(self, g: Greedy) -> None:
        self.g = g
        policy = g.request.policy
        self.mig_cost = policy.migration_cost
        self.pre_cost = policy.preemption_cost
        self.fair = policy.objective == "fairness"
        self.levels = lexicographic_levels(g.request)
        self.demands = tenant_demands(g.request) if self.fair else {}
        self.terms: dict[str, tuple[float, float, float]] = {}
        #: classed shared job -> the GPU it was scored on (co-location, contract 5.2)
        self.gpu_of: dict[str, int] = {}
        self.total = 0.0
        self.total_thr = 0.0
        self.tenant: dict[str, float] = {}
        for info in g.infos:
            self._add(info)

    def _terms(self, info: JobInfo) -> tuple[float, float, float]:
        """(objective term, throughput term, tenant value) of one job now."""
        pl = self.g.state.placed.get(info.name)
        if not pl:
            cost = -self.pre_cost if info.current else 0.0
            return cost, cost, 0.0
        model = self.g.state.model_of(pl)
        cost = 0.0
        if info.current and not same_placement(pl, info.current):
            cost = -self.mig_cost
        if info.job.topology is not None:
            cost -= self.g.topology_cost(info, pl)
        n = len(pl) if info.elastic else None
        thr = info.values.get(model) if n is None else info.size_values.get(n, {}).get(model)
        if thr is None:
            thr = job_value(info.job, model, self.g.state.catalog, n)
        value = self.g.value_on(info, model, n)
        if info.name in self.g.coloc.cls:
            f = self.g.coloc.factor_now(self.g.state, info)
            value, thr = value * f, thr * f
        return value + cost, thr + cost, thr

    def _add(self, info: JobInfo) -> None:
        if info.name in self.g.coloc.cls:
            pl = self.g.state.placed.get(info.name)
            if pl:
                self.gpu_of[info.name] = self.g.state.gid_of[(pl[0].node, pl[0].gpu)]
            else:
                self.gpu_of.pop(info.name, None)
        t = self._terms(info)
        self.terms[info.name] = t
        self.total += t[0]
        self.total_thr += t[1]
        tenant = info.job.tenant
        self.tenant[tenant] = self.tenant.get(tenant, 0.0) + t[2]

    def refresh(self, infos: Sequence[JobInfo]) -> None:
        """Recompute the contributions of `infos` after they changed (and of the classed
        jobs sharing a GPU with them, before or now)."""
        if self.g.coloc.active:
            infos = self._with_co_residents(infos)
        for info in infos:
            old = self.terms.pop(info.name, (0.0, 0.0, 0.0))
            self.total -= old[0]
            self.total_thr -= old[1]
            self.tenant[info.job.tenant] = self.tenant.get(info.job.tenant, 0.0) - old[2]
            self._add(info)

    def _with_co_residents(self, infos: Sequence[JobInfo]) -> list[JobInfo]:
        """`infos` plus the classed shared jobs on the GPUs they were scored on or sit
        on now: their factors may have changed."""
        st = self.g.state
        gids: set[int] = set()
        for info in infos:
            if info.name in self.gpu_of:
                gids.add(self.gpu_of[info.name])
            pl = st.placed.get(info.name)
            if pl and pl[0].fraction is not None:
                gids.add(st.gid_of[(pl[0].node, pl[0].gpu)])
        out = list(infos)
        seen = {i.name for i in infos}
        for gid in sorted(gids):
            for name in st.gpus[gid].share_jobs:
                if name not in seen and name in self.g.coloc.cls:
                    seen.add(name)
                    out.append(self.g.by_name[name])
        return out

    def value(self) -> tuple[float, ...]:
        """(levels..., primary, secondary) objective, larger is better (lexicographic)."""
        levels = level_key(self.g.request, self.g.state.placed) if self.levels else ()
        if self.fair:
            share = min((self.tenant.get(k, 0.0) / d for k, d in self.demands.items()),
                        default=0.0)
            return *levels, round(share, 6), self.total_thr
        return *levels, self.total, 0.0


def better(now: tuple[float, ...], before: tuple[float, ...], tol: float = 1e-9) -> bool:
    """Whether `now` beats `before` lexicographically (ties within `tol`)."""
    for a, b in zip(now, before, strict=True):
        if a > b + tol:
            return True
        if a < b - tol:
            return False
    return False


class _Search:
    """The ruin-and-recreate loop on one state."""

    def __init__(self, request: PlanRequest, result: HeuristicResult, seed: int | None) -> None:
        self.request = request
        infos = compile_jobs(request)
        self.g = Greedy(request, infos, ClusterState(request))
        self.rng = random.Random(seed if seed is not None else 0)
        self.ok = self._load(result)
        self.by_model: dict[str, list[JobInfo]] = {}
        self._prune()
        # Per model, the jobs eligible on it by decreasing value there (relocations).
        self.all_by_model: dict[str, list[JobInfo]] = {}
        for info in infos:
            for m in info.values:
                self.all_by_model.setdefault(m, []).append(info)
        for m, lst in self.all_by_model.items():
            lst.sort(key=functools.partial(_value_key, m))
        self.nodes_by_model: dict[str, list[int]] = {}
        for n in self.g.state.nodes:
            if not n.schedulable:
                continue
            for m in {self.g.state.gpus[gid].model for gid in n.gpus}:
                self.nodes_by_model.setdefault(m, []).append(n.idx)
        self.models = sorted(self.nodes_by_model)
        self.domain_nodes: dict[str | None, list[int]] = {}
        for n in self.g.state.nodes:
            self.domain_nodes.setdefault(n.domain, []).append(n.idx)
        self.has_multi = any(i.shape == "whole" and not i.job.single_node for i in infos)
        self.elastic = [i for i in infos if i.elastic and not i.pinned]

    def _load(self, result: HeuristicResult) -> bool:
        st = self.g.state
        by_name = self.g.by_name
        # Kept running jobs first, so that a move elsewhere cannot block them.
        names = sorted(result.placements, key=lambda n: 0 if by_name[n].current and
                       same_placement(result.placements[n], by_name[n].current or []) else 1)
        for name in names:
            info = by_name.get(name)
            pl = result.placements[name]
            if info is None or not pl or st.conflicts(info, pl) is not None:
                return False
            st.place(info, list(pl))
        self.g.reasons.update(result.reasons)
        return True

    def _prune(self) -> None:
        """Rebuild the per-model lists of unplaced jobs, densest first."""
        self.by_model = {}
        st = self.g.state
        for info in self.g.density_order(i for i in self.g.infos if i.name not in st.placed):
            for m in info.values:
                self.by_model.setdefault(m, []).append(info)

    def repair(self, order: Sequence[JobInfo], stop: Callable[[], bool] | None = None
               ) -> list[JobInfo]:
        """Place the unplaced jobs of `order` that fit now (until `stop()` says so,
        checked every few jobs); returns those placed."""
        placed = []
        for n, info in enumerate(order):
            if stop is not None and n % 16 == 0 and stop():
                break
            if info.name not in self.g.state.placed and self.g.place(info):
                placed.append(info)
        return placed

    def jobs_on(self, nodes: Sequence[int]) -> list[JobInfo]:
        """The removable jobs touching `nodes` (non-preemptible running jobs excluded)."""
        st = self.g.state
        names: set[str] = set()
        for ni in nodes:
            for gid in st.nodes[ni].gpus:
                g = st.gpus[gid]
                if g.whole_job is not None:
                    names.add(g.whole_job)
                names.update(g.share_jobs)
                names.update(g.mig_used.values())
        out = []
        for name in sorted(names):
            info = self.g.by_name[name]
            if info.pinned:
                continue
            out.append(info)
        return out

    def pick_nodes(self) -> tuple[list[int], str]:
        """A few nodes of one model (or a whole domain) to ruin, and that model."""
        model = self.rng.choice(self.models)
        pool = self.nodes_by_model[model]
        if self.has_multi and self.rng.random() < 0.15:
            ni = self.rng.choice(pool)
            dom = self.g.state.nodes[ni].domain
            if dom is not None:
                return list(self.domain_nodes[dom]), model
        k = min(len(pool), self.rng.randint(1, _RUIN_NODES))
        return self.rng.sample(pool, k), model

    def candidates(self, models: set[str], limit: int) -> list[JobInfo]:
        """The densest unplaced jobs eligible on `models`."""
        out: list[JobInfo] = []
        seen: set[str] = set()
        st = self.g.state
        for m in sorted(models):
            n = 0
            for info in self.by_model.get(m, []):
                if info.name in st.placed or info.name in seen:
                    continue
                seen.add(info.name)
                out.append(info)
                n += 1
                if n >= limit:
                    break
        return out

    def relocations(self, models: set[str], limit: int) -> list[JobInfo]:
        """Placed jobs (not non-preemptible running ones) that are worth more on one of
        `models` than where they are, by more than the migration cost; largest gain first."""
        st = self.g.state
        cost = self.request.policy.migration_cost
        gains: list[tuple[float, str, JobInfo]] = []
        for m in sorted(models):
            for info in self.all_by_model.get(m, [])[:_SCAN]:
                pl = st.placed.get(info.name)
                if not pl or info.pinned:
                    continue
                here = self.g.value_at(info, pl)
                gain = info.obj_values[m] - here - (cost if info.current else 0.0)
                if gain > 1e-9:
                    gains.append((-gain, info.name, info))
        gains.sort(key=lambda x: (x[0], x[1]))
        return [i for _, _, i in gains[:limit]]

    def room_gangs(self) -> list[JobInfo]:
        """Unplaced whole-GPU gangs (2+ GPUs) that may be placed, densest first."""
        st = self.g.state
        gangs = [i for i in self.g.infos if i.shape == "whole" and i.gpus >= 2
                 and i.name not in st.placed and not i.pinned]
        return self.g.density_order(gangs)[:_ROOM_GANGS]

    def _evictions(self, info: JobInfo, ni: int, model: str
                   ) -> tuple[int, float, list[JobInfo]] | None:
        """The fewest (then least valuable) removable jobs to take off node `ni` so that
        `info` gets `info.gpus` GPUs of `model` there: (count, value, jobs), or None."""
        st = self.g.state
        gids = [gid for gid in st.nodes[ni].gpus
                if st.gpus[gid].model == model and st.gpus[gid].usable and not st.gpus[gid].mig]
        need = info.gpus - st.free_count(ni, model)
        if len(gids) < info.gpus or need <= 0:
            return None
        held: dict[str, int] = {}
        for gid in gids:
            owner = st.gpus[gid].whole_job
            if owner is None:
                continue  # free, or shared (a shared GPU is not freed here)
            j = self.g.by_name[owner]
            if not j.pinned:
                held[owner] = held.get(owner, 0) + 1
        if sum(held.values()) < need:
            return None
        jobs = [self.g.by_name[n] for n in held]
        best: tuple[int, float, list[JobInfo]] | None = None
        for key in (lambda j: (-held[j.name], j.density, j.name),
                    lambda j: (j.density, -held[j.name], j.name)):
            chosen: list[JobInfo] = []
            freed = 0
            for j in sorted(jobs, key=key):
                chosen.append(j)
                freed += held[j.name]
                if freed >= need:
                    break
            # Drop the ones the others make unnecessary (largest value first).
            for j in sorted(chosen, key=lambda j: (-j.best_value, j.name)):
                if freed - held[j.name] >= need:
                    chosen.remove(j)
                    freed -= held[j.name]
            cand = (len(chosen), sum(st_value(self.g, j) for j in chosen), chosen)
            if best is None or cand[:2] < best[:2]:
                best = cand
        return best

    def make_room(self, info: JobInfo, score: _Score) -> bool:
        """Evict-and-place for unplaced gang `info` (see the module doc); True when kept."""
        st = self.g.state
        if info.name in st.placed:
            return False
        options: list[tuple[int, float, int, str, list[JobInfo]]] = []
        for model in self.g.ranked_models(info):
            for ni in self.nodes_by_model.get(model, []):
                if not st.nodes[ni].host_fits(0.0, 0.0):
                    continue
                ev = self._evictions(info, ni, model)
                if ev is not None:
                    options.append((ev[0], ev[1], ni, model, ev[2]))
        options.sort(key=lambda o: (o[0], o[1], o[2]))
        for _, _, ni, model, evict in options[:_ROOM_NODES]:
            if self._try_room(info, ni, model, evict, score):
                return True
        return False

    def _try_room(self, info: JobInfo, ni: int, model: str, evict: list[JobInfo],
                  score: _Score) -> bool:
        st = self.g.state
        before = score.value()
        old = {j.name: st.remove(j) for j in evict}
        placed_gang = (st.free_count(ni, model) >= info.gpus
                       and st.nodes[ni].host_fits(info.cpu, info.host_mem)
                       and st.quota_fits(info, model))
        if placed_gang:
            st.place(info, self.g._take(ni, model, info.gpus))
            for j in self.g.density_order(evict):
                self.g.place(j)
        if self._keep_or_undo(score, before, evict, old, [*evict, info], placed_gang):
            self.g.reasons.pop(info.name, None)
            return True
        return False

    def _keep_or_undo(self, score: _Score, before: tuple[float, ...],
                      removed: list[JobInfo], old: dict[str, list[Placement] | None],
                      changed: list[JobInfo], possible: bool = True) -> bool:
        """Keep a move when it is `possible` and improves the objective (costs included;
        for fairness the minimum share, then throughput) without stopping a running job
        that may not stop; otherwise put every `changed` job back where `old` had the
        `removed` ones. True when kept."""
        st = self.g.state
        score.refresh(changed)
        now = score.value()
        ok = possible and better(now, before)
        if ok and not self.request.policy.allow_preemption:
            ok = all(info.name in st.placed for info in removed if info.current)
        if ok:
            if any(info.name not in st.placed for info in removed):
                self._prune()
            return True
        for info in changed:
            st.remove(info)
        for info in removed:
            pl = old[info.name]
            if pl:
                st.place(info, pl)
        score.refresh(changed)
        return False

    def room_pass(self, score: _Score, deadline: float) -> int:
        """Evict-and-place for the densest unplaced gangs; returns how many were placed."""
        done = 0
        for info in self.room_gangs():
            if time.monotonic() >= deadline:
                break
            done += self.make_room(info, score)
        return done

    def move(self, score: _Score) -> bool:
        """One ruin-and-recreate move; True when it improved (and was kept)."""
        st = self.g.state
        nodes, _model = self.pick_nodes()
        removed = self.jobs_on(nodes)
        models = {st.gpus[gid].model for ni in nodes for gid in st.nodes[ni].gpus}
        cands = self.candidates(models, _CANDIDATES)
        taken = {i.name for i in removed}
        removed += [i for i in self.relocations(models, _CANDIDATES // 2)
                    if i.name not in taken]
        if not cands and not removed:
            return False
        before = score.value()
        old = {info.name: st.remove(info) for info in removed}
        pool = removed + cands
        mode = self.rng.random()
        if mode < 0.4:
            pool = self.g.density_order(pool)
        elif mode < 0.7:
            pool.sort(key=lambda i: (-i.best_value, i.name))
        else:
            noise = {i.name: self.rng.uniform(0.7, 1.3) for i in pool}
            pool.sort(key=lambda i: (-i.density * noise[i.name], i.name))
        placed_now = [info for info in pool if self.g.place(info)]
        for info in placed_now:
            if info.elastic:
                self.g.grow(info)
        changed = removed + [i for i in placed_now if i.name not in old]
        return self._keep_or_undo(score, before, removed, old, changed)

    def resize(self, score: _Score) -> bool:
        """The grow / shrink move of an elastic gang (module doc); True when kept."""
        st = self.g.state
        placed = [i for i in self.elastic if i.name in st.placed]
        if not placed:
            return False
        info = self.rng.choice(placed)
        pl = st.placed[info.name]
        model = st.model_of(pl)
        grow = self.rng.random() < 0.5
        sizes = [n for n in info.sizes if (n > len(pl) if grow else n < len(pl))]
        if not sizes:
            return False
        before = score.value()
        old = {info.name: st.remove(info)}
        found = self.g.find_gang(info, model, self.rng.choice(sizes))
        if found is None:
            st.place(info, pl)
            return False
        st.place(info, found)
        placed_now: list[JobInfo] = []
        if not grow:
            cands = self.g.density_order(self.candidates({model}, _CANDIDATES))
            placed_now = [c for c in cands if self.g.place(c)]
        return self._keep_or_undo(score, before, [info], old, [info, *placed_now])


def st_value(g: Greedy, info: JobInfo) -> float:
    """The objective value of placed job `info` where it is now (0 when unplaced)."""
    pl = g.state.placed.get(info.name)
    return g.value_on(info, g.state.model_of(pl)) if pl else 0.0


def is_consistent(request: PlanRequest, result: HeuristicResult) -> bool:
    """Whether `result`'s placements can coexist (capacity, MIG layouts, host resources);
    eligibility and the other contract rules are the validator's business."""
    return _Search(request, result, None).ok


def _value_key(model: str, info: JobInfo) -> tuple[float, str]:
    return (-(info.obj_values[model] / info.size), info.name)


def _as_placements(result: HeuristicResult) -> dict[str, list[Placement]]:
    return {n: list(p) for n, p in result.placements.items() if p}


def improve(
    request: PlanRequest,
    result: HeuristicResult,
    *,
    deadline: float,
    seed: int | None = None,
    max_moves: int | None = None,
    cancel: Event | None = None,
) -> HeuristicResult:
    """A plan at least as good as `result` (by `evaluate`), improved until `deadline`
    (a `time.monotonic()` instant), after `max_moves` ruin-and-recreate moves, or once
    `cancel` is set."""
    search = _Search(request, result, seed)
    if not search.ok:
        return result
    g = search.g
    fifo = request.policy.objective == "priority_fifo"
    repair_only = fifo or (lexicographic_levels(request)
                           and len(request.jobs) > LEVEL_MOVES_MAX_JOBS)
    unplaced = [i for i in g.infos if i.name not in g.state.placed
                and not i.pinned]

    def stop() -> bool:
        return time.monotonic() >= deadline or (cancel is not None and cancel.is_set())

    order = sorted(unplaced, key=fifo_key) if fifo else g.density_order(unplaced)
    if lexicographic_levels(request):
        order.sort(key=lambda i: -i.job.priority)  # stable: classes from the highest
    search.repair(order, stop)
    if not repair_only and search.models:  # no schedulable node: nothing to ruin and recreate
        score = _Score(g)
        search.room_pass(score, deadline)
        moves = 0
        while not stop() and (max_moves is None or moves < max_moves):
            if search.elastic and search.rng.random() < 0.25:
                search.resize(score)
            else:
                search.move(score)
            moves += 1
            if moves % 200 == 0:
                search._prune()
            if moves % 100 == 0:
                search.room_pass(score, deadline)
    out = g.result()
    for name, reason in result.reasons.items():
        if name not in out.placements and name in out.reasons and reason[0] != "preempted":
            out.reasons[name] = reason
    before = evaluate(request, _as_placements(result))
    after = evaluate(request, out.placements)
    if lexicographic_levels(request):
        was = level_key(request, _as_placements(result))
        now = level_key(request, out.placements)
        if now != was:
            return out if better(now, was) else result
    if after.objective_value > before.objective_value + 1e-9 or (
            after.objective_value >= before.objective_value - 1e-9
            and after.throughput >= before.throughput - 1e-9):
        return out
    return result
