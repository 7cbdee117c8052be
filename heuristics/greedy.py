"""Value-density-ordered best fit over the contract's whole domain.

`plan_greedy(request)` keeps running jobs where they are (non-preemptible ones always,
preemptible ones when their current placement is still consistent), then places the other
jobs one at a time in the order of the policy objective:

- `throughput`, `jct`, `makespan`: each GPU model gets a price, the duals of the pooled
  market of the pending whole-GPU and shared jobs (heuristics/prices.py); the running
  jobs whose current model is still their best net of those prices stay
  (`Greedy.keep_priced`), then decreasing value density net of the price of the job's
  best model, ties by name (with priority levels, plain value density, ties by value
  then name);
- `priority_fifo`: the strict `(weight desc, submitted_at asc, name)` order, each job
  placed when it fits beside the jobs before it (so no priority inversion);
- `fairness`: round-robin over tenants, always serving the tenant with the lowest current
  share `placed value / D_k` next (its densest job first).

Each job goes to the eligible model where its value is highest, net of the model's price
for whole-GPU and shared jobs when prices are set (ties: where it is relatively fastest
against the other jobs, i.e. the largest speed over the model's median speed): a job goes
where its advantage over the other jobs is highest, not simply where it is fastest (on
the generated M instance, ranking by value alone left the greedy 8.5% below the LP bound,
nearly all of it in which jobs went to which model). A running job stays unless moving
gains more than the migration cost, net of the prices too. Then it goes to the tightest
place: the node with the fewest free GPUs of that model that
still holds a single-node gang; few nodes for multi-node gangs, inside one domain of each
required topology level (v1's `same_domain` is the level "domain"; the tightest domain
that holds the gang first) and over few domains of the preferred level (one that holds it
alone first, else the largest first; a placement whose topology cost eats its whole value
is not made); the fullest shared GPU with room for a share (a free GPU on the tightest
node otherwise); for MIG the instance position that keeps the largest instance creatable
beside it (existing free instances first, none created when `allow_mig_reconfiguration` is
false). Unhealthy GPUs and cordoned nodes take no new placement. Host CPU/memory is
checked per node, pro rata for gangs. A job left unplaced gets its static reason
(`models.reasons`, the same as the solver's) or `insufficient_capacity`.

Elastic gangs (contract 5.1) take, on each model, the allowed size with the best value per
GPU that fits (ties: the larger size), so that capacity goes first to where it earns the
most per GPU and to as many jobs as possible (in the policy's order, priority_fifo
included: a size that fits is always tried before the job is left out). Growing a placed
elastic gang to a larger allowed size is an item of its own, worth its marginal value per
extra GPU (AFS's rule; a running job's migration cost counted): in the value-density
order, a growth whose rate beats the density of the next job is made before that job is
placed (`Greedy.place_sequence`), and once every job had its turn `grow_elastic` hands
the GPUs still free to the gangs, best rate first. A non-preemptible running job keeps
its size; with priority_fifo growth waits until every job had its turn.
false). A shared job with a co-location class (contract 5.2) goes instead where it adds
the most value, its own factor and its effect on the jobs already there included
(heuristics/colocation.py; among the first `AWARE_SCAN` shared GPUs with room, the
tightest one where it loses nothing, else the best, a free GPU when every shared one would
lose value, nowhere when the best place adds none). Unhealthy GPUs and cordoned nodes take
no new placement. Host CPU/memory is checked per node, pro rata for gangs. A job left
unplaced gets its static reason (`models.reasons`, the same as the solver's) or
`insufficient_capacity`.
"""

from __future__ import annotations

import bisect
import heapq
import random
import statistics
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise, repeat
from operator import itemgetter
from typing import Any, ClassVar

from heuristics.colocation import Colocation
from heuristics.prices import PriceRows, model_prices
from heuristics.result import HeuristicResult
from models import Instance, Placement, PlanRequest
from models.capacity import DOMAIN, HOST, Topology
from models.instance import (
    ClusterState,
    JobInfo,
    JobKind,
    MigOption,
    compile_jobs,
    mig_geometry,
    mig_placement,
    per_request,
)
from models.objective import (
    evaluate,
    level_key,
    objective_value_of,
    same_placement,
    tenant_demands,
)
from models.reasons import INSUFFICIENT, StaticReasons
from models.rules import (
    HOST_TOL,
    QuotaKey,
    costed_level,
    fits,
    lexicographic_levels,
    memory_fits,
    preferred_level,
    priority_key,
    profile_covers,
    quota_chain,
    quota_usage,
    required_levels,
    topology_cost,
)

#: Without a deadline, both greedy variants run up to this many jobs.
BOTH_VARIANTS_UP_TO = 5000
#: Up to this many jobs, the pass without model prices runs too (when time allows): on a
#: few dozen jobs the pooled prices are coarse and now and then mislead (S seed 1: 51.2
#: priced, 58.8 unpriced, bound 62.3), and a pass costs milliseconds there.
UNPRICED_TOO_UP_TO = 500
#: How often (in jobs) the deadline is checked.
_DEADLINE_EVERY = 64
#: How often (in jobs tried) a sequence grouped by fit keys checks the deadline
#: (`Greedy._place_groups`): each job it tries is a search of the occupancy, where most of
#: the `_DEADLINE_EVERY` jobs between two checks of `_run_sequence` are skipped.
_TRIED_EVERY = 16
#: The reason of a job a pass cut at its deadline did not reach.
TIME_LIMIT = ("time_limit", "the heuristic ran out of time")
#: Shared GPUs with room that a classed shared job compares, at most (the scan stops
#: earlier at the first one where it loses nothing).
AWARE_SCAN = 16


_Signature = tuple[frozenset[Instance], frozenset[Instance]]
#: `Greedy._fit_key_of` of a job without a fit key.
_NO_FIT_KEY = (-1,)


@dataclass
class _MigOrder:
    """`Greedy._mig_order`'s sorted signatures of one model for one job's profiles: the
    sort keys and the (signature, options) entries side by side, the signatures seen
    so far, and how far the state's log was read."""

    keys: list[tuple[tuple[int, ...], tuple[tuple[tuple[str, int], ...], ...]]] = field(
        default_factory=list)
    entries: list[tuple[_Signature, tuple[MigOption, ...]]] = field(default_factory=list)
    seen: set[_Signature] = field(default_factory=set)
    cursor: int = 0


def typical_speeds(infos: Sequence[JobInfo]) -> dict[str, float]:
    """Per model, the median over `infos` of value / size / weight: what the placer ranks
    a job's models against (`Greedy.ranked_models`)."""
    speeds: dict[str, list[float]] = {}
    for info in infos:
        for m, v in info.values.items():
            speeds.setdefault(m, []).append(v / info.size / info.job.weight)
    return {m: statistics.median(v) for m, v in speeds.items() if v}


class Greedy:
    """The best-fit placer; also used by local search and decomposition to repair."""

    def __init__(self, request: PlanRequest, infos: list[JobInfo] | None = None,
                 state: ClusterState | None = None) -> None:
        self.request = request
        self.infos = infos if infos is not None else compile_jobs(request)
        self.by_name = {i.name: i for i in self.infos}
        self.state = state if state is not None else ClusterState(request)
        self.coloc = Colocation(request, self.infos)
        self.geometry = mig_geometry(request)
        self._static: StaticReasons | None = None
        self._sig_keys: dict[tuple[frozenset[Instance], frozenset[Instance]],
                             tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]] = {}
        self.reasons: dict[str, tuple[str, str]] = {}
        #: extra value of placing a job (the preemption cost a running job saves)
        self.bonus: dict[str, float] = {}
        self._typical = self._typical_speeds()
        self._ranked: dict[str, list[str]] = {}
        #: `_rank_models` by (id of the values, id of the objective values, size, weight,
        #: shape): those values (the ids' owners) and the ranking, shared by the jobs of a
        #: kind
        self._kind_ranked: dict[tuple[int, int, float, float, str],
                                tuple[dict[str, float], dict[str, float], list[str]]] = {}
        #: per model, the price of a GPU that whole-GPU and shared jobs are ranked net of
        #: (`use_prices`; empty: ranked by their value alone)
        self.prices: dict[str, float] = {}
        #: whether `find` tries only the models where a job earns its price (`affordable`)
        self.affordable_only = False
        #: the jobs' rows of the last pricing (`_priced_order`), kept while this placer is
        #: (a planning session carries it from plan to plan: solver/warm.py)
        self.price_rows = PriceRows()
        self._domain_nodes: dict[str | None, list[int]] = {}
        for n in self.state.nodes:
            self._domain_nodes.setdefault(n.domain, []).append(n.idx)
        self._topology: Topology | None = None
        self._groups: dict[tuple[str, ...], list[tuple[tuple[str, ...], list[int]]]] = {}
        self._mig_orders: dict[tuple[str, tuple[str, ...]], _MigOrder] = {}
        #: per job, its `fit_key` without the running and priced parts (`_fit_key_of`),
        #: and the number of each demand
        self._fit_keys: dict[str, tuple[int]] = {}
        #: `has_elastic` of the job list it was asked of (that list, its length)
        self._elastic: tuple[list[JobInfo], int, bool] | None = None
        self._key_ids: dict[tuple[object, ...], tuple[int]] = {}
        #: per job kind, the number of what `find` asks of its jobs alike (`_fit_key_of`)
        self._kind_demands: dict[JobKind, int] = {}
        self._kind_ids: dict[tuple[object, ...], int] = {}
        self._guarantees: dict[tuple[str, bool], list[tuple[QuotaKey, float]]] = {}
        #: `_earning` at the current prices, by (id of the objective values, bonus, size):
        #: the values themselves (the id's owner) and the models
        self._earnings: dict[tuple[int, float, float],
                             tuple[dict[str, float], tuple[str, ...]]] = {}

    # ------------------------------------------------------------ topology
    @property
    def topology(self) -> Topology:
        """The domains of the cluster's nodes at every topology level (built once)."""
        if self._topology is None:
            self._topology = Topology(self.request.cluster)
        return self._topology

    def topology_cost(self, info: JobInfo, placements: Iterable[Placement]) -> float:
        """What `placements` of `info` pay at its preferred level (`models.rules`)."""
        if preferred_level(info.job) is None:
            return 0.0
        return topology_cost(info.job, {p.node for p in placements}, self.topology,
                             self.request.policy.topology_cost)

    # ------------------------------------------------------------ reasons
    def why_unplaced(self, info: JobInfo) -> tuple[str, str]:
        """(reason code, detail) for a job that could not be placed now: its static reason
        (`models.reasons`), else no valued model or no room."""
        if self._static is None:
            self._static = StaticReasons.of(self.request)
        why = self._static.reason(info.job)
        if why is not None:
            return why
        if not info.values:
            return ("no_eligible_gpu", "its speed is 0 on every eligible model the cluster has")
        return INSUFFICIENT

    # ------------------------------------------------------------ ranking
    def _typical_speeds(self) -> dict[str, float]:
        """Per model, the median over the jobs of value / size / weight (`typical_speeds`),
        computed once per request for the jobs the first placer had (the request's
        compiled jobs, which later placers share): a pass over every job, 0.04-0.08 s of
        CPU on L, and a solve builds several placers."""
        infos, speeds = per_request(self.request, "typical_speeds",
                                    lambda r: (self.infos, typical_speeds(self.infos)))
        return speeds if infos is self.infos else typical_speeds(self.infos)

    def ranked_models(self, info: JobInfo) -> list[str]:
        """Eligible models, highest value (net of the model prices, `use_prices`) first;
        ties: the cheaper model (the less contended), then relative speed, then name
        (computed once per job kind: the jobs of a kind share their value dicts, and a
        pass with quotas ranks most of 13,000 jobs at L). The list is shared: read it
        only."""
        hit = self._ranked.get(info.name)
        if hit is None:
            values, obj = info.values, info.obj_values
            key = (id(values), id(obj), info.size, info.job.weight, info.shape)
            kind = self._kind_ranked.get(key)
            if kind is not None and kind[0] is values and kind[1] is obj:
                hit = kind[2]
            else:
                hit = self._rank_models(info)
                self._kind_ranked[key] = (values, obj, hit)
            self._ranked[info.name] = hit
        return hit

    def _rank_models(self, info: JobInfo) -> list[str]:
        prices = self.prices if info.shape != "mig" else {}

        def key(m: str) -> tuple[float, float, float, str]:
            rel = info.values[m] / info.size / info.job.weight / max(
                self._typical.get(m, 1.0), 1e-9)
            price = prices.get(m, 0.0)
            return (-round(info.obj_values[m] - price * info.size, 9), price, -rel, m)
        return sorted(info.values, key=key)

    def use_prices(self, prices: dict[str, float]) -> None:
        """Rank the models of whole-GPU and shared jobs by their value net of `prices`
        (per GPU, heuristics/prices.py) from now on: a job goes first where its advantage
        over the other jobs is highest, not where it is fastest."""
        if prices != self.prices:
            self.prices = dict(prices)
            self._ranked.clear()
            self._kind_ranked.clear()
            self._earnings.clear()

    def price_pending(self) -> None:
        """Price the jobs this placer has not placed, as a priced pass would
        (`_priced_order`), for the rows it keeps (`price_rows`): a planning session
        calls it on a placer made between plans (solver/warm.py), whose next pass then
        prices from those rows. The prices are not used. Their fit keys (`fit_key`) are
        made too, which the pass groups them by (L: 0.06 s of CPU off the next plan)."""
        pending = [i for i in self.infos if i.name not in self.state.placed and not i.pinned]
        model_prices(pending, self.state.model_free, self.bonus, self.price_rows)
        keys = self._fit_keys
        for info in pending:
            if info.name not in keys:
                keys[info.name] = self._fit_key_of(info)

    def price_of(self, info: JobInfo, placements: Sequence[Placement],
                 model: str | None = None) -> float:
        """What `placements` of `info` cost at the model prices (`use_prices`; 0 for a MIG
        job or without prices). `model`: the placements' model, when known."""
        if not self.prices or info.shape == "mig":
            return 0.0
        if model is None:
            model = self.state.model_of(placements)
        return self.prices.get(model, 0.0) * (
            len(placements) if info.shape == "whole" else info.size)

    def keep_priced(self, infos: Iterable[JobInfo]) -> int:
        """Keep where they run the running jobs of `infos` whose current model is still
        their best at the model prices (`use_prices`; moving elsewhere would not gain its
        migration cost) and that earn their price there, best net density first: the
        running jobs the pooled LP keeps. Returns how many were kept."""
        mig = self.request.policy.migration_cost
        prices = self.prices
        cands = []
        # a job's best net value, once per objective values (a compiled kind's), bonus
        # and size
        bests: dict[tuple[int, float, float], float] = {}
        model_of = self.state.model_of
        for info in infos:
            cur = info.current
            if not cur or info.shape == "mig" or info.elastic:
                continue
            # the value tests first, then whether its placement is consistent
            # (`current_gids`): most fail the first
            model = model_of(cur)
            values = info.obj_values
            if model not in values:
                continue
            b = self.bonus.get(info.name, 0.0)
            here = values[model] + b - self.price_of(info, cur, model)
            key = (id(values), b, info.size)
            best = bests.get(key)
            if best is None:
                best = bests[key] = max(v + b - prices.get(m, 0.0) * info.size
                                        for m, v in values.items())
            if here > 0 and here >= best - mig - 1e-9:
                gids = self.current_gids(info)
                if gids is not None:
                    cands.append((-here / info.size, info.name, info, gids))
        _sort_by_name_last(cands, 1, (0,))
        return sum(self.keep_all([c[2] for c in cands], [c[3] for c in cands]))

    def net_density(self, info: JobInfo) -> float:
        """`info`'s best value per GPU equivalent net of the model prices (`use_prices`),
        with its bonus: how far ahead of the marginal job it is on its best model."""
        b = self.bonus.get(info.name, 0.0)
        if not self.prices or info.shape == "mig" or not info.obj_values:
            return (info.best_value + b) / info.size
        return max((v + b) / info.size - self.prices.get(m, 0.0)
                   for m, v in info.obj_values.items())

    def value_on(self, info: JobInfo, model: str, n: int | None = None) -> float:
        """The policy per-job value of `info` on `model` (grandfathered models included);
        an elastic gang on n GPUs (None: its nominal size)."""
        if info.elastic and n is not None:
            v = info.size_obj_values[n].get(model) if n in info.size_obj_values else None
            if v is None:
                v = objective_value_of(info.job, model, self.state.catalog,
                                       self.request.policy.objective, n)
            return v
        v = info.obj_values.get(model)
        if v is None:
            v = objective_value_of(info.job, model, self.state.catalog,
                                   self.request.policy.objective)
        return v

    def value_at(self, info: JobInfo, placements: Sequence[Placement]) -> float:
        """The policy per-job value of `info` placed as `placements` (model and size)."""
        return self.value_on(info, self.state.model_of(placements), len(placements))

    def size_order(self, info: JobInfo, model: str) -> list[int]:
        """An elastic gang's allowed sizes on `model`, best value per GPU first (ties: the
        larger size); `[gpus]` for any other whole-GPU job."""
        if not info.elastic:
            return [info.gpus]
        return sorted(info.sizes, key=lambda n: (-self.value_on(info, model, n) / n, -n))

    # ------------------------------------------------------------ running jobs
    def current_ok(self, info: JobInfo) -> bool:
        """Whether a running job's current placement is consistent with its demand."""
        return self.current_gids(info) is not None

    def current_gids(self, info: JobInfo) -> list[int] | None:
        """The GPUs (`ClusterState.gpus` indexes) of a running job's current placement
        when it is consistent with its demand (`current_ok`), else None."""
        cur = info.current
        if not cur:
            return None
        st = self.state
        gpus, gid_of = st.gpus, st.gid_of
        gids = [gid_of[(p.node, p.gpu)] for p in cur]
        model = gpus[gids[0]].model
        for gid in gids:
            if gpus[gid].model != model:
                return None
        if info.shape == "whole":
            nodes = {p.node for p in cur}
            if info.job.single_node and len(nodes) > 1:
                return None
            if info.job.same_domain and len(
                    {st.nodes[st.node_of[n]].domain for n in nodes}) > 1:
                return None
            return gids if all(p.mig is None and p.fraction is None for p in cur) else None
        if info.shape == "share":
            return gids if cur[0].fraction is not None else None
        p = cur[0]
        if p.mig is None:
            return None
        prof = st.catalog[model].profile(p.mig.profile)
        return gids if prof is not None and profile_covers(info.job, prof) else None

    def try_keep(self, info: JobInfo) -> bool:
        """Keep a running job exactly where it runs, if that is still possible."""
        return self.keep_all([info])[0]

    def keep_running(self, *, preemptible: bool = True,
                     among: Iterable[JobInfo] | None = None) -> list[JobInfo]:
        """Keep non-preemptible running jobs, then (if `preemptible`) the preemptible ones,
        densest first; returns the running jobs that could not be kept. `among`: only
        those jobs (default: every job)."""
        failed: list[JobInfo] = []
        running = [i for i in (self.infos if among is None else among) if i.current]
        fixed = [i for i in running if not i.preemptible]
        for info, kept in zip(fixed, self.keep_all(fixed), strict=True):
            if not kept:
                self.reasons[info.name] = (
                    "infeasible_constraints",
                    "a non-preemptible running job whose current placement conflicts")
                failed.append(info)
        if preemptible:
            rest = sorted((i for i in running if i.preemptible),
                          key=lambda i: (-i.density, i.name))
            failed.extend(info for info, kept in zip(rest, self.keep_all(rest), strict=True)
                          if not kept)
        return failed

    def keep_all(self, infos: Sequence[JobInfo],
                 gids: Sequence[list[int] | None] | None = None) -> list[bool]:
        """`try_keep` each of `infos` in order, in bulk (`ClusterState.keep_many`): per
        job whether it stays where it runs. `gids`: their `current_gids` when known."""
        if gids is None:
            gids = [self.current_gids(info) for info in infos]
        kept = self.state.keep_many(infos, gids)
        if self.reasons:
            for info, ok in zip(infos, kept, strict=True):
                if ok:
                    self.reasons.pop(info.name, None)
        return kept

    def keep_cut_running(self) -> None:
        """After a pass cut at its deadline: keep every running job it did not reach
        (reason `time_limit`) where it runs, when that is still free. A conflict check
        each, no search: a cut pass then stops only the running jobs it displaced, not
        every one it never looked at (L cut early: 27,829 instead of -3,697)."""
        for info in self.infos:
            if (info.current and info.name not in self.state.placed
                    and self.reasons.get(info.name, ("",))[0] == "time_limit"):
                self.try_keep(info)

    def rebase(self, request: PlanRequest, infos: list[JobInfo],
               changed: Iterable[str], nodes_changed: bool) -> None:
        """Make this placer, with the occupancy it holds, the placer of `request`: the
        next state of a planning session, whose jobs `infos` are compiled against the same
        catalog, objective and quotas (solver/warm.py). The occupancy (`state`) must have
        been brought to `request` by the caller (jobs that left or changed taken out,
        nodes added or refreshed). `changed`: the jobs whose JobInfo changed or that left
        (their cached ranking goes); `nodes_changed`: nodes joined or changed, so the
        topology caches go. The reasons and bonuses of the last pass are cleared; the
        typical speeds that break ranking ties are kept from the first state."""
        self.request = request
        self.infos = infos
        self.by_name = {i.name: i for i in infos}
        self.state.request = request
        self.coloc = Colocation(request, infos)
        self.geometry = mig_geometry(request)
        self._static = None
        self.reasons = {}
        self.bonus = {}
        for name in changed:
            self._ranked.pop(name, None)
            self._fit_keys.pop(name, None)
        self._kind_demands.clear()   # (numbered by content: the numbers stay)
        self._kind_ranked.clear()
        self._guarantees.clear()
        if nodes_changed:
            self._domain_nodes = {}
            for n in self.state.nodes:
                self._domain_nodes.setdefault(n.domain, []).append(n.idx)
            self._topology = None
            self._groups = {}

    def fit_key(self, info: JobInfo) -> tuple[object, ...] | None:
        """What `find` asks of a pending job (shape, sizes, GPU and host demands, eligible
        models with their MIG profiles, topology requirements; under quotas the tenant
        and what a placement counts against them):
        jobs with equal keys fit in the same states, so once one finds no place the others
        find none until capacity is freed (`place_sequence`). None for the jobs whose
        place also depends on their values: running jobs (kept or moved by value), gangs
        with a preferred topology level (its cost) and shared jobs with a co-location
        class (the value they add). Equal keys are one object, a number (`_fit_key_of`):
        a pass asks the key of every pending job, and a dict hashes it each time. Under
        `affordable_only` a job's key also names the models where it earns its price."""
        if info.current:
            return None
        key = self._fit_keys.get(info.name)
        if key is None:
            key = self._fit_keys[info.name] = self._fit_key_of(info)
        if key is _NO_FIT_KEY:
            return None
        if not self.affordable_only or not self.prices or info.shape == "mig":
            return key
        return (key[0], self._earning(info))

    def demand_key(self, info: JobInfo) -> tuple[int] | None:
        """What `find` asks of `info` (`fit_key`, running or not, without the models where
        it earns its price): None for a gang with a preferred topology level or a shared
        job with a co-location class."""
        key = self._fit_keys.get(info.name)
        if key is None:
            key = self._fit_keys[info.name] = self._fit_key_of(info)
        return None if key is _NO_FIT_KEY else key

    def _fit_key_of(self, info: JobInfo) -> tuple[int]:
        """`fit_key` of a job that is not running, kept per job (until it changes:
        `rebase`): `_NO_FIT_KEY` for a shared job with a co-location class or a gang with
        a preferred topology level, else the number of its demand (module doc of
        `fit_key`) among this placer's."""
        job = info.job
        if info.name in self.coloc.cls or preferred_level(job):
            return _NO_FIT_KEY
        # what the jobs of its kind share (shape, nominal size, share, GPU memory, models
        # and their MIG profiles), numbered once per kind
        kind = self._kind_demands.get(info.kind)
        if kind is None:
            shared = (info.shape, info.gpus, info.share, info.gpu_mem,
                      tuple(sorted((m, tuple(info.profiles.get(m, ()))) for m in info.values)))
            kind = self._kind_ids.get(shared)
            if kind is None:
                kind = self._kind_ids[shared] = len(self._kind_ids)
            self._kind_demands[info.kind] = kind
        quotas = bool(self.state.quotas)
        # an elastic gang's sizes (its host demand is pro rata of its nominal size); under
        # quotas the tenant, and what a MIG job counts against them (`quota_usage`:
        # covering profiles alone leave its compute slices open)
        demand = (kind, tuple(info.sizes) if info.size_values else None, info.cpu,
                  info.host_mem, job.single_node, required_levels(job),
                  job.tenant if quotas else None,
                  (job.mig_profile, job.mig.compute_slices if job.mig is not None else None)
                  if quotas and info.shape == "mig" else None)
        key = self._key_ids.get(demand)
        if key is None:
            key = self._key_ids[demand] = (len(self._key_ids),)
        return key

    def _earning(self, info: JobInfo) -> tuple[str, ...]:
        """The models where `info` earns its price (`affordable`), by name: once per
        objective values (one dict per compiled kind: models/instance.py), bonus and size
        at the current prices (a pass asks it of every pending job, twice)."""
        b, size, values = self.bonus.get(info.name, 0.0), info.size, info.obj_values
        key = (id(values), b, size)
        hit = self._earnings.get(key)
        if hit is not None and hit[0] is values:
            return hit[1]
        out = tuple(sorted(m for m, v in values.items()
                           if v + b - self.prices.get(m, 0.0) * size >= -1e-9))
        self._earnings[key] = (values, out)
        return out

    def priced_out(self, info: JobInfo) -> bool:
        """Whether some eligible model of `info` was left out of `affordable`."""
        return bool(self.prices) and info.shape != "mig" and \
            len(self._earning(info)) < len(info.obj_values)

    def affordable(self, info: JobInfo) -> list[str]:
        """`ranked_models` where `info` earns the model's price (`use_prices`; its value
        with its bonus at least the price of its GPUs): a pass over these first keeps a
        job off a model where the pooled LP would not put it, until every job had its
        turn there (`place_pending`). Every ranked model for a MIG job or without prices."""
        ranked = self.ranked_models(info)
        if not self.prices or info.shape == "mig":
            return ranked
        b = self.bonus.get(info.name, 0.0)
        return [m for m in ranked
                if info.obj_values[m] + b - self.prices.get(m, 0.0) * info.size >= -1e-9]

    def guarantees(self, tenant: str, own: bool) -> list[tuple[QuotaKey, float]]:
        """The quota keys with a guarantee that a job of `tenant` counts for (with `own`,
        of `tenant` itself only), each with its guarantee (once per placer)."""
        hit = self._guarantees.get((tenant, own))
        if hit is None:
            quotas = self.state.quotas
            tenants = [tenant] if own else quota_chain(quotas, tenant)
            hit = self._guarantees[(tenant, own)] = [
                ((t, k), gk) for t in tenants if t in quotas
                for k, gk in quotas[t].guaranteed.items()]
        return hit

    # ------------------------------------------------------------ finding places
    def find(self, info: JobInfo, models: Iterable[str] | None = None) -> list[Placement] | None:
        """The best-fit placements for `info` in the current state (None if none fits)."""
        finder = self._FINDERS[info.shape]
        quotas = bool(self.state.quotas)
        if models is None:
            models = self.affordable(info) if self.affordable_only else self.ranked_models(info)
        for m in models:
            if quotas and not self.state.quota_fits(
                    info, m, min(info.sizes) if info.elastic else None):
                continue
            found = finder(self, info, m)
            if found is not None:
                return found
        return None

    def place(self, info: JobInfo, models: Iterable[str] | None = None) -> bool:
        """Place `info` at its best fit (or keep it if running and possible)."""
        if info.name in self.state.placed:
            return True
        cur = info.current
        gids = self.current_gids(info) if cur else None   # (`current_ok`)
        if cur and gids is not None and self.state.conflicts(info, cur) is None:
            # Keep it unless moving elsewhere is worth more than the migration cost.
            stay = self.value_at(info, cur) - self.topology_cost(info, cur) \
                - self.price_of(info, cur)
            if models is not None:
                models = list(models)
            if not info.preemptible or stay >= self._move_bound(info, models) - 1e-9:
                return self.keep_all([info], [gids])[0]   # no move can be worth it: no search
            found = self.find(info, models)
            move = (self.value_at(info, found) - self.request.policy.migration_cost
                    - self.topology_cost(info, found) - self.price_of(info, found)
                    ) if found else float("-inf")
            if stay >= move - 1e-9:
                return self.keep_all([info], [gids])[0]
        else:
            found = self.find(info, models)
        if found is None:
            return False
        cost = 0.0 if info.current else self.topology_cost(info, found)
        if cost > 0 and self.value_on(info, self.state.model_of(found)) - cost <= 1e-9:
            return False  # its topology cost eats its whole value
        self.state.place(info, found)
        self.reasons.pop(info.name, None)
        return True

    def _move_bound(self, info: JobInfo, models: list[str] | None) -> float:
        """At least what moving running job `info` to a place `find(info, models)` finds
        is worth in `place`: its highest value there (any allowed size) less the
        migration cost, the topology cost and the price being >= 0 (unbounded with model
        prices, unless it is a MIG job, which pays none)."""
        if self.prices and info.shape != "mig":
            return float("inf")
        if models is None:   # `find` tries eligible models only
            top = info.best_value
        else:
            sizes: Iterable[int | None] = info.sizes if info.elastic else (None,)
            top = max((self.value_on(info, m, n) for m in models for n in sizes),
                      default=float("-inf"))
        return top - self.request.policy.migration_cost

    def _find_whole(self, info: JobInfo, model: str) -> list[Placement] | None:
        """A whole-GPU gang's best fit on `model`; an elastic gang at the first size of
        `size_order` that fits."""
        for k in self.size_order(info, model):
            found = self.find_gang(info, model, k)
            if found is not None:
                return found
        return None

    def find_gang(self, info: JobInfo, model: str, k: int) -> list[Placement] | None:
        """The best fit of gang `info` on k GPUs of `model` (k: `gpus`, or an allowed size
        of an elastic gang); host requests pro rata, k / gpus of the job's. A gang that may
        span nodes stays in one domain of each required topology level and, with a costed
        preferred level, spans as few of its domains as it can."""
        st = self.state
        if st.model_free.get(model, 0) < k:
            return None
        if st.quotas and not st.quota_fits(info, model, k):
            return None   # k GPUs would break a quota limit (contract 5.3)
        part = k / info.gpus
        for ni in st.nodes_with_free(model, k):
            if st.nodes[ni].host_fits(info.cpu * part, info.host_mem * part):
                return self._take(ni, model, k)
        if info.job.single_node or k == 1:
            return None
        levels = required_levels(info.job)
        pref = costed_level(info.job, self.topology, self.request.policy.topology_cost) \
            if info.job.topology is not None else None
        if levels or pref is not None:
            for nodes in self.required_groups(model, k, levels):
                found = self._spread_few(info, model, nodes, pref, k)
                if found is not None:
                    return found
            return None
        return self._spread(info, model, self._all_nodes(model), k)

    def _all_nodes(self, model: str) -> list[int]:
        """The nodes with free GPUs of `model`, most free first."""
        nodes: list[int] = []
        buckets = self.state.buckets.get(model, [])
        for c in range(len(buckets) - 1, 0, -1):
            nodes.extend(buckets[c])
        return nodes

    def required_groups(self, model: str, k: int, levels: tuple[str, ...]) -> list[list[int]]:
        """The node sets a multi-node gang of `k` GPUs of `model` may use under required
        topology `levels`: one per domain (of all the levels at once) with >= k free GPUs,
        the tightest first (all nodes when none is required; none at "host", since one
        node was tried first)."""
        st = self.state
        if not levels:
            return [self._all_nodes(model)]
        if HOST in levels:
            return []
        if levels == (DOMAIN,):
            # the occupancy keeps free counts per v1 domain: the same groups, unscanned
            domains = sorted((c, d) for (d, m), c in st.domain_free.items()
                             if m == model and c >= k and d is not None)
            return [self._domain_nodes.get(d, []) for _, d in domains]
        scored = []
        for key, nodes in self._level_groups(levels):
            free = sum(st.free_count(ni, model) for ni in nodes)
            if free >= k:
                scored.append((free, key, nodes))
        scored.sort(key=lambda x: (x[0], x[1]))
        return [nodes for _, _, nodes in scored]

    def _level_groups(self, levels: tuple[str, ...]) -> list[tuple[tuple[str, ...], list[int]]]:
        """The nodes grouped by their domains at every level of `levels` (cached); a node
        without a v1 topology domain holds a same_domain gang only alone, so it is left out
        when "domain" is required."""
        hit = self._groups.get(levels)
        if hit is None:
            groups: dict[tuple[str, ...], list[int]] = {}
            for n in self.state.nodes:
                if DOMAIN in levels and n.domain is None:
                    continue
                key = tuple(self.topology.domain(n.name, lv) for lv in levels)
                groups.setdefault(key, []).append(n.idx)
            hit = self._groups[levels] = list(groups.items())
        return hit

    def _spread_few(self, info: JobInfo, model: str, nodes: list[int],
                    pref: str | None, k: int) -> list[Placement] | None:
        """A multi-node gang of k GPUs over `nodes`, in as few domains of level `pref` as it can:
        in one that holds it alone (the tightest first), else over the largest first."""
        if pref is None:
            return self._spread(info, model, nodes, k)
        st = self.state
        by_dom: dict[str, list[int]] = {}
        for ni in nodes:
            if st.free_count(ni, model) > 0:
                by_dom.setdefault(self.topology.domain(st.nodes[ni].name, pref), []).append(ni)
        free = {d: sum(st.free_count(ni, model) for ni in ns) for d, ns in by_dom.items()}
        for d in sorted((d for d in by_dom if free[d] >= k),
                        key=lambda d: (free[d], d)):
            found = self._spread(info, model, by_dom[d], k)
            if found is not None:
                return found
        order = sorted(by_dom, key=lambda d: (-free[d], d))
        rank = {ni: r for r, d in enumerate(order) for ni in by_dom[d]}
        return self._spread(info, model, list(rank), k, rank)

    def _spread(self, info: JobInfo, model: str, nodes: Iterable[int],
                k: int, rank: dict[int, int] | None = None) -> list[Placement] | None:
        """A multi-node gang of k GPUs over few nodes: largest free first, best fit for the rest
        (with `rank`, nodes of a lower rank first, best fit within the current rank)."""
        st = self.state
        cands: list[tuple[int, int]] = []
        g = info.gpus
        for ni in nodes:
            free = st.free_count(ni, model)
            if free <= 0:
                continue
            room = st.nodes[ni].host_room(info.cpu / g, info.host_mem / g)
            use = min(free, room)
            if use > 0:
                cands.append((use, ni))
        if sum(u for u, _ in cands) < k:
            return None
        if rank is None:
            cands.sort(key=lambda x: (-x[0], x[1]))
        else:
            cands.sort(key=lambda x: (rank[x[1]], -x[0], x[1]))
        out: list[Placement] = []
        remaining = k
        i = 0
        while remaining > 0:
            fits = [c for c in cands[i:] if c[0] >= remaining]
            if fits:
                use, ni = min(fits, key=lambda x: (x[0], x[1]) if rank is None
                              else (rank[x[1]], x[0], x[1]))
                out.extend(self._take(ni, model, remaining))
                remaining = 0
            else:
                use, ni = cands[i]
                out.extend(self._take(ni, model, use))
                remaining -= use
                i += 1
        return out

    def _take(self, ni: int, model: str, k: int) -> list[Placement]:
        st = self.state
        gids = sorted(st.free_gpus[ni][model], key=lambda gid: st.gpus[gid].index)[:k]
        name = st.nodes[ni].name
        return [Placement(node=name, gpu=st.gpus[gid].index) for gid in gids]

    def _find_share(self, info: JobInfo, model: str) -> list[Placement] | None:
        st = self.state
        if info.name in self.coloc.cls:
            return self._find_share_aware(info, model)
        for gid in st.shared_candidates(model, info.share):
            g = st.gpus[gid]
            if st.share_fits(g, info.share, info.gpu_mem) and st.nodes[g.node].host_fits(
                    info.cpu, info.host_mem):
                return [Placement(node=st.nodes[g.node].name, gpu=g.index,
                                  fraction=info.share)]
        return self._free_share(info, model)

    def _free_share(self, info: JobInfo, model: str) -> list[Placement] | None:
        """A free GPU of `model` on the tightest node, for a share (None if none)."""
        st = self.state
        if not memory_fits(info.gpu_mem, st.catalog[model].memory_gib):
            return None
        for ni in st.nodes_with_free(model, 1):
            if st.nodes[ni].host_fits(info.cpu, info.host_mem):
                gid = min(st.free_gpus[ni][model], key=lambda x: -st.gpus[x].index)
                return [Placement(node=st.nodes[ni].name, gpu=st.gpus[gid].index,
                                  fraction=info.share)]
        return None

    def _find_share_aware(self, info: JobInfo, model: str) -> list[Placement] | None:
        """The shared GPU where classed job `info` adds the most value (class doc)."""
        st = self.state
        plain = self.value_on(info, model)
        best: int | None = None
        best_gain = float("-inf")
        for n, gid in enumerate(st.shared_candidates(model, info.share)):
            if n >= AWARE_SCAN:
                break
            g = st.gpus[gid]
            if not (st.share_fits(g, info.share, info.gpu_mem)
                    and st.nodes[g.node].host_fits(info.cpu, info.host_mem)):
                continue
            gain = self.coloc.gain(st, info, gid, self.value_on, self.by_name)
            if gain > best_gain + 1e-12:
                best, best_gain = gid, gain
            if gain >= plain - 1e-12 and gain >= best_gain:
                break  # loses nothing here: the tightest such GPU, as best fit
        if best_gain < plain - 1e-12:
            fresh = self._free_share(info, model)
            if fresh is not None:
                return fresh
        if best is None or best_gain <= 1e-12:
            return None
        g = st.gpus[best]
        return [Placement(node=st.nodes[g.node].name, gpu=g.index, fraction=info.share)]

    def _find_mig(self, info: JobInfo, model: str) -> list[Placement] | None:
        st = self.state
        profiles = tuple(info.profiles.get(model, ()))
        if not profiles:
            return None
        groups = st.mig_index.get(model, {})
        for sig, opts in self._mig_order(model, profiles):
            gids = groups.get(sig)
            if not gids:
                continue
            for gid in sorted(gids) if len(gids) < 64 else gids:
                g = st.gpus[gid]
                if st.nodes[g.node].host_fits(info.cpu, info.host_mem):
                    return [mig_placement(st.nodes[g.node].name, g.index, opts[0].inst)]
        return None

    def _mig_order(self, model: str, profiles: tuple[str, ...]
                   ) -> list[tuple[tuple[frozenset[Instance], frozenset[Instance]],
                                   tuple[MigOption, ...]]]:
        """The MIG layout signatures of `model` that can host one of `profiles`, best
        first (the best option's score, then `_sig_order`), each with its options; it
        may list signatures whose groups are empty now (the caller skips them). Kept
        sorted as the state's groups appear (`ClusterState.mig_sig_log`): scoring and
        sorting every group per MIG job took most of a greedy pass on L and XL."""
        order = self._mig_orders.get((model, profiles))
        if order is None:
            order = self._mig_orders[(model, profiles)] = _MigOrder()
        log = self.state.mig_sig_log.get(model, [])
        if order.cursor < len(log):
            for sig in log[order.cursor:]:
                if sig in order.seen:
                    continue
                order.seen.add(sig)
                # a signature's score is a pure function of it
                opts = self.geometry.options(model, sig[0], sig[1], profiles)
                if opts:
                    key = (opts[0].score, self._sig_order(sig))
                    k = bisect.bisect(order.keys, key)
                    order.keys.insert(k, key)
                    order.entries.insert(k, (sig, opts))
            order.cursor = len(log)
        return order.entries

    def _sig_order(self, sig: tuple[frozenset[Instance], frozenset[Instance]]
                   ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
        """The tie-break key of a MIG layout signature: its used and free instances in
        `Instance` order, as plain tuples (cached: comparing them is cheap)."""
        key = self._sig_keys.get(sig)
        if key is None:
            key = (tuple(sorted((i.profile, i.start) for i in sig[0])),
                   tuple(sorted((i.profile, i.start) for i in sig[1])))
            self._sig_keys[sig] = key
        return key

    _FINDERS: ClassVar[dict[str, Callable[[Greedy, JobInfo, str], list[Placement] | None]]] = {
        "whole": _find_whole,
        "share": _find_share,
        "mig": _find_mig,
    }

    # ------------------------------------------------------------ elastic gangs
    def net_value(self, info: JobInfo, placements: Sequence[Placement]) -> float:
        """The value of `info` placed as `placements`, minus the migration cost when it
        runs elsewhere now (any change of its GPU set, size included) and the topology cost
        it pays at its preferred level."""
        moved = bool(info.current) and not same_placement(placements, info.current or [])
        return self.value_at(info, placements) - self.topology_cost(info, placements) - (
            self.request.policy.migration_cost if moved else 0.0)

    def term(self, info: JobInfo, placements: Sequence[Placement] | None) -> float:
        """`info`'s term of the objective placed as `placements` (`net_value`), or left
        out (None or empty): the preemption cost when it runs now, else nothing."""
        if placements:
            return self.net_value(info, placements)
        return -self.request.policy.preemption_cost if info.current else 0.0

    def grow_gain(self, info: JobInfo) -> tuple[float, int] | None:
        """The best growth of placed elastic gang `info` on its model: (net value gained
        per extra GPU, size) over its larger allowed sizes (a running job pays its
        migration cost when it leaves its current GPUs); None when no size pays."""
        pl = self.state.placed.get(info.name)
        if not pl or not info.elastic or info.pinned:
            return None
        model = self.state.model_of(pl)
        now = self.net_value(info, pl)
        cost = self.request.policy.migration_cost if info.current else 0.0
        best: tuple[float, int] | None = None
        for n in info.sizes:
            if n <= len(pl):
                continue
            gain = (self.value_on(info, model, n) - cost - now) / (n - len(pl))
            if gain > 1e-9 and (best is None or gain > best[0]):
                best = (gain, n)
        return best

    def grow(self, info: JobInfo) -> bool:
        """Re-place placed elastic gang `info` at a larger size on its model when that
        earns more net of migration costs (the best rate per extra GPU first); True when
        it grew, else it stays where it was."""
        pl = self.state.placed.get(info.name)
        if not pl or self.grow_gain(info) is None:
            return False
        model = self.state.model_of(pl)
        now = self.net_value(info, pl)
        rate = {n: (self.value_on(info, model, n) - now) / (n - len(pl))
                for n in info.sizes if n > len(pl)}
        self.state.remove(info)
        for n in sorted((n for n, r in rate.items() if r > 1e-9),
                        key=lambda n: (-rate[n], n)):
            found = self.find_gang(info, model, n)
            if found is not None and self.net_value(info, found) > now + 1e-9:
                self.state.place(info, found)
                return True
        self.state.place(info, list(pl))
        return False

    def has_elastic(self) -> bool:
        """Whether an elastic gang is among the jobs (asked once per job list)."""
        hit = self._elastic
        if hit is None or hit[0] is not self.infos or hit[1] != len(self.infos):
            hit = self._elastic = (self.infos, len(self.infos),
                                   any(i.elastic for i in self.infos))
        return hit[2]

    def place_sequence(self, seq: Sequence[JobInfo], *, interleave: bool = True,
                       stop: Callable[[int], bool] | None = None,
                       known: NoPlace | None = None) -> list[JobInfo]:
        """Place the jobs of `seq` in order (`place`); with `interleave` and elastic gangs
        in the request, first make every growth of a placed elastic gang whose rate per
        extra GPU beats the next job's value density (module doc). `stop(n)` (before the
        n-th job) ends the sequence early. `known`: what found no place earlier in the
        pass, whose jobs are not searched for (`NoPlace.hopeless`; forgotten when a gang
        grows). Returns the jobs of `seq` placed."""
        heap: list[tuple[float, str]] = []
        grows = interleave and self.has_elastic()
        if grows:
            heap = self._growth_heap()
        placed: list[JobInfo] = []
        # fit keys (`fit_key`) that found no place, with the first such job's reason: the
        # state only fills up meanwhile, except when a gang grows elsewhere (it frees its
        # old GPUs). Equal keys have equal static reasons but for their details' wording,
        # so only the reason of no static one is shared.
        full: dict[tuple[object, ...], tuple[str, str]] = {}
        for n, info in enumerate(seq):
            if stop is not None and stop(n):
                break
            if grows:
                bonus = self.bonus.get(info.name, 0.0)
                density = info.density + bonus / info.size
                while heap and -heap[0][0] > density + 1e-12:
                    if self._grow_top(heap):
                        full.clear()
                        if known is not None:
                            known.clear()
            key = self.fit_key(info)
            why = full.get(key) if key is not None else None
            if why is not None:
                self.reasons[info.name] = why if why == INSUFFICIENT else \
                    self.why_unplaced(info)
                continue
            if known is not None and known.hopeless(info):
                # as a search that finds no place would end
                self.reasons[info.name] = self.why_unplaced(info)
                if key is not None:
                    full[key] = self.reasons[info.name]
                continue
            if self.place(info):
                placed.append(info)
                if grows and info.elastic:
                    gain = self.grow_gain(info)
                    if gain is not None:
                        heapq.heappush(heap, (-gain[0], info.name))
            else:
                self.reasons[info.name] = self.why_unplaced(info)
                if key is not None:
                    full[key] = self.reasons[info.name]
        return placed

    def place_grouped(self, entries: Sequence[tuple[Any, ...]],
                      deadline: float | None = None,
                      known: NoPlace | None = None) -> bool:
        """`place_sequence` without growth over the jobs of `entries`, in the order of the
        entries (tuples ending with the job's name and the job, unsorted), without
        sorting them all or visiting the jobs whose fit key already found no place
        (`_place_groups`); with model prices (`use_prices`) twice, as `place_pending`
        runs a priced sequence: each job where it earns its model's price
        (`affordable_only`), then the jobs priced out of some model, anywhere. Past
        `deadline` the jobs not reached get the reason `time_limit`. `known` (without
        prices): what found no place earlier in the pass, whose jobs are not searched for
        (`NoPlace.hopeless`). Whether it was cut there."""
        if not self.prices:
            lists = self._fit_groups(entries)
            ended = () if known is None else \
                {k for k, lst in enumerate(lists.values()) if known.hopeless(lst[0][-1])}
            return self._place_groups(list(lists.values()), deadline, ended=ended)
        self.affordable_only = True
        try:
            lists = self._fit_groups(entries)
            if self._place_groups(list(lists.values()), deadline):
                return True  # cut: the second sequence would stop before its first job
        finally:
            self.affordable_only = False
        # the second sequence: the jobs left that some eligible model priced out
        # (`priced_out`), by their keys without the models where they earn the price (no
        # job has the reason `time_limit`: the first one was not cut)
        placed = self.state.placed
        again: dict[object, list[tuple[Any, ...]]] = {}
        for key, lst in lists.items():
            if not isinstance(key, tuple):   # a job without a fit key
                info = lst[0][-1]
                if info.name not in placed and self.priced_out(info):
                    again[key] = lst
                continue
            if len(key) == 1:
                continue  # a MIG job's: no price
            earning = len(key[1])   # `priced_out`: the models where it earns are known
            rest = [e for e in lst if earning < len(e[-1].obj_values)
                    and e[-1].name not in placed]
            if rest:
                base = (key[0],)
                if base in again:
                    again[base].extend(rest)
                else:
                    again[base] = rest
        return self._place_groups(list(again.values()), deadline, again=True)

    def _fit_groups(self, entries: Iterable[tuple[Any, ...]]
                    ) -> dict[object, list[tuple[Any, ...]]]:
        """The entries of `place_grouped` by their jobs' fit keys (`fit_key`), in their
        order; a job without a key alone, under its entry's position."""
        groups: dict[object, list[tuple[Any, ...]]] = {}
        fit_key = self.fit_key
        for n, e in enumerate(entries):
            key = fit_key(e[-1])
            if key is None:
                groups[n] = [e]
                continue
            lst = groups.get(key)
            if lst is None:
                lst = groups[key] = []
            lst.append(e)
        return groups

    def _place_groups(self, lists: list[list[tuple[Any, ...]]], deadline: float | None,
                      again: bool = False, ended: Collection[int] = ()) -> bool:
        """Place the jobs of `lists` (entries of `place_grouped` of equal fit keys, or of
        a job without one; left as they are) in the order of the entries: each list a
        heap of its jobs not tried yet (most lists end after a job or two, so sorting
        them would be wasted), the lists merged by a heap of their next jobs. A job whose
        place is not found ends its list (without growth the occupancy only fills up, so
        its key finds no place for the rest of the sequence), which leaves the heap; the
        jobs left in the lists that ended take their reasons in bulk, as
        `place_sequence` gives them. So the jobs tried, their order and the states they
        are tried in are `place_sequence`'s: at 20,000 jobs, 13,000 pending of which a
        few dozen find a place, a pass tries some hundreds of jobs instead of looking at
        each. Past `deadline` (checked every `_TRIED_EVERY` jobs tried) the jobs not
        reached get the reason `time_limit`, as `_run_sequence` gives it. `again`: the
        second sequence of `place_grouped`, whose jobs have their reasons from the first
        (equal fit keys have the same reason or each its own static one: `fit_key`).
        `ended`: the lists (by position) known to find no place, whose first job ends
        them unsearched. Whether it was cut."""
        heappop, heapreplace = heapq.heappop, heapq.heapreplace
        left = [list(lst) for lst in lists]   # per list, its jobs not tried yet
        for lst in left:
            if len(lst) > 1:
                heapq.heapify(lst)
        heap = [(lst[0], k) for k, lst in enumerate(left)]
        heapq.heapify(heap)
        done: list[tuple[int, JobInfo]] = []   # a list that ended, the job that did
        cut = False
        tried = 0
        while heap:
            entry, k = heap[0]
            if deadline is not None and tried % _TRIED_EVERY == 0 and \
                    time.monotonic() > deadline:
                cut = True
                break
            tried += 1
            info = entry[-1]
            lst = left[k]
            heappop(lst)
            if k not in ended and self.place(info):
                if lst:
                    heapreplace(heap, (lst[0], k))
                else:
                    heappop(heap)
            else:
                heappop(heap)
                done.append((k, info))
        # the reasons once the places are made (no place depends on them; the first
        # reason asked builds the request's static reasons, at L 0.015 s of CPU)
        reasons = self.reasons
        for _, info in done:
            reasons[info.name] = self.why_unplaced(info)
        # the rest of an ended list: skipped by `place_sequence` with its first reason
        # (the reason of no static one, shared; else each job's own), up to where a cut
        # stopped the sequence (the heap's next job, `entry`); in a second sequence
        # (`again`) each job has that reason from the first one already
        for k, info in done if not again else ():
            why = reasons[info.name]
            rest = left[k] if not cut else [e for e in left[k] if e < entry]
            if why == INSUFFICIENT:
                reasons.update(zip(map(itemgetter(-2), rest), repeat(why)))
            else:
                for e in rest:
                    reasons[e[-2]] = self.why_unplaced(e[-1])
        if cut:
            placed = self.state.placed
            for lst in left:
                for e in lst:
                    name = e[-1].name
                    if name not in placed and name not in reasons:
                        reasons[name] = TIME_LIMIT
        return cut

    def _growth_heap(self) -> list[tuple[float, str]]:
        """(-rate, name) of every placed elastic gang that may grow, as a heap."""
        heap: list[tuple[float, str]] = []
        for info in self.infos:
            if info.elastic and info.name in self.state.placed:
                gain = self.grow_gain(info)
                if gain is not None:
                    heap.append((-gain[0], info.name))
        heapq.heapify(heap)
        return heap

    def _grow_top(self, heap: list[tuple[float, str]]) -> bool:
        """Grow the gang at the top of `heap`; it goes back with its next rate when it
        grew (and may grow again). True when it grew."""
        _, name = heapq.heappop(heap)
        info = self.by_name[name]
        if not self.grow(info):
            return False
        gain = self.grow_gain(info)
        if gain is not None:
            heapq.heappush(heap, (-gain[0], name))
        return True

    def grow_elastic(self, deadline: float | None = None) -> int:
        """Hand free GPUs to the placed elastic gangs, the largest net gain per extra GPU
        first (module doc): a heap of gangs by their `grow_gain` rate; a gang that grew
        goes back with its next rate, one that could not grow leaves. Returns how many
        growths were made."""
        heap = self._growth_heap()
        grown = 0
        while heap:
            if deadline is not None and grown % 16 == 0 and time.monotonic() > deadline:
                break
            grown += self._grow_top(heap)
        return grown

    # ------------------------------------------------------------ orders
    def density_key(self, i: JobInfo) -> tuple[float, float, str]:
        """The sort key of `density_order`: decreasing value density (with any bonus),
        then value, then name."""
        b = self.bonus.get(i.name, 0.0)
        v = i.best_value
        return (-(v + b) / i.size, -v - b, i.name)

    def density_order(self, infos: Iterable[JobInfo]) -> list[JobInfo]:
        """Decreasing value density (with any bonus), then value, then name."""
        return sorted(infos, key=self.density_key)

    def result(self) -> HeuristicResult:
        """The current state as a HeuristicResult, with a reason for every unplaced job."""
        placements = {n: list(p) for n, p in self.state.placed.items()}
        reasons: dict[str, tuple[str, str]] = {}
        for info in self.infos:
            if info.name in placements:
                continue
            reasons[info.name] = self.reasons.get(info.name) or self.why_unplaced(info)
        return HeuristicResult(placements=placements, reasons=reasons)


def guarantee_models(g: Greedy, info: JobInfo, own: bool = False,
                     within: bool = False) -> list[str]:
    """The eligible models (best first) where one more placement of `info` raises the
    guaranteed usage served: a quota key of its tenant or an ancestor (with `own`, of its
    tenant itself) there is below its guarantee (with `within`, by at least the job's
    size)."""
    quotas = g.state.quotas
    used = g.state.quota_used
    if not any(used.get(key, 0.0) < gk - HOST_TOL
               for key, gk in g.guarantees(info.job.tenant, own)):
        return []  # nothing below its guarantee: skip ranking the models
    out = []
    for m in g.ranked_models(info):
        need = quota_usage(info.job, g.state.catalog[m]) if within else 0.0
        for t, k in g.state.quota_keys(info.job.tenant, m):
            if own and t != info.job.tenant:
                continue
            have, g_k = used.get((t, k), 0.0), quotas[t].guaranteed.get(k, 0.0)
            if have < g_k - HOST_TOL and (not within or fits(need, g_k, have)):
                out.append(m)
                break
    return out


class NoPlace:
    """What a greedy pass knows finds no place, until a gang grows (it frees its old
    GPUs; `clear`): meanwhile the occupancy, the hosts' use and the quota usage only grow
    (no pinned job is pending, so no quota's fixed part grows either), and `find` asks a
    job nothing its demand key (`Greedy.demand_key`: the tenant is in it under quotas,
    the priority class is not and needs not be) does not hold, so once a job of a key
    found no place on some models, no job of that key finds one there later in the pass;
    and a running job whose `place` failed cannot stay later either (what conflicts with
    its placement stays)."""

    def __init__(self, g: Greedy) -> None:
        self.g = g
        #: per demand key, the models where a job of it found no place
        self.models: dict[tuple[int], set[str]] = {}
        #: the demand keys that found no place on any model of theirs
        self.full: set[tuple[int]] = set()
        #: the running jobs whose `place` failed
        self.stuck: set[str] = set()

    def hopeless(self, info: JobInfo) -> bool:
        """Whether `place(info)` is known to fail (on any of its models)."""
        return self.hopeless_as(info, self.g.demand_key(info))

    def hopeless_as(self, info: JobInfo, key: tuple[int] | None) -> bool:
        """`hopeless` of `info`, whose demand key is `key`."""
        return key is not None and key in self.full and self._cannot_stay(info)

    def _cannot_stay(self, info: JobInfo) -> bool:
        """Whether `info` is not running, or its `place` failed already."""
        return not info.current or info.name in self.stuck

    def place(self, info: JobInfo, models: list[str]) -> bool:
        """`Greedy.place(info, models)`, not searching the models known to hold no place
        for `info` (`find` tries the others in the same order, so it finds the same
        place) nor at all when it is known to fail; what fails is noted."""
        key = self.g.demand_key(info)
        if key is None:
            return self.g.place(info, models)
        tried = self.models.get(key)
        if tried:
            models = [m for m in models if m not in tried]
            if not models and self._cannot_stay(info):
                return False
        if self.g.place(info, models):
            return True
        if tried is None:
            tried = self.models[key] = set()
        tried.update(models)
        if len(tried) == len(info.values):
            self.full.add(key)
        if info.current:
            self.stuck.add(info.name)
        return False

    def clear(self) -> None:
        """Forget it all (a gang grew)."""
        self.models.clear()
        self.full.clear()
        self.stuck.clear()


#: The sweeps of the quota guarantee phase (`_run_levels`), as `guarantee_models`' `own`
#: and `within`.
_GUARANTEE_SWEEPS = ((True, True), (True, False), (False, False))


def _run_levels(g: Greedy, pending: list[JobInfo], deadline: float | None) -> None:
    """Contract 5.3 / 5.4 in level order: first the jobs that raise the guaranteed usage
    served (on the models where they do, classes from the highest down): those that fit
    within their own tenant's guarantee, those below it, then those below an ancestor's
    only (so that a tenant does not overshoot its guarantee or fill its parent's, or reach
    a shared limit, before its siblings have their own); then every class from the
    highest down in its objective's order (`pending` is in that order within a class).

    Both phases skip the searches whose answer is known (`NoPlace`), so the jobs tried,
    their order and the states they are tried in are the unskipped pass's: at L with
    quotas 8,700 of the 12,000 pending jobs found no place in each of the three sweeps,
    each after a search."""
    # Stable: keeps the order within a class; running jobs that must move stay first.
    must_move = not g.request.policy.allow_preemption
    pending = sorted(pending, key=lambda i: (0 if must_move and i.current else 1,
                                             -i.job.priority))
    known = NoPlace(g)
    if g.state.quotas and _guarantee_phase(g, pending, deadline, known):
        return
    rest = [i for i in pending if i.name not in g.state.placed]
    if g.request.policy.objective == "fairness":
        for p in sorted({i.job.priority for i in rest}, reverse=True):
            _run_fairness(g, [i for i in rest if i.job.priority == p], deadline, known)
    elif g.has_elastic():
        # growths in between (`place_sequence`): a gang that grows frees its old GPUs
        g.place_sequence(rest, stop=_stopper(g, rest, deadline), known=known)
    else:
        # no growth: grouped by fit keys, in the order of `rest` (`Greedy.place_grouped`)
        g.place_grouped([(k, i.name, i) for k, i in enumerate(rest)], deadline, known=known)


def _guarantee_phase(g: Greedy, pending: list[JobInfo], deadline: float | None,
                     known: NoPlace) -> bool:
    """The quota guarantee phase of `_run_levels`: `_GUARANTEE_SWEEPS` over the jobs of
    `pending` not placed yet, each placed on the models where it raises the guaranteed
    usage served (`guarantee_models`), when it fits there, through `known` (which learns
    what fails). Within a sweep the models `guarantee_models` gives a job only shrink for
    its demand key (`Greedy.demand_key`: the same tenant, models and usage per model, and
    the usage served only grows), so once they are none, they are none for the rest of
    the key's jobs. Past `deadline` (read at the first job, then every `_DEADLINE_EVERY`
    jobs: a pass that starts late stops before its first search) the jobs not placed get
    the reason `time_limit`. Whether it was cut."""
    stop = _stopper(g, pending, deadline)
    placed = g.state.placed
    n = 0
    # the jobs of the last sweep not placed in it, with their demand keys
    left: list[tuple[JobInfo, tuple[int] | None]] = []
    for sweep, (own, within) in enumerate(_GUARANTEE_SWEEPS):
        served: set[tuple[int]] = set()   # the demand keys with no model left to raise
        jobs = ((i, g.demand_key(i)) for i in pending) if sweep == 0 else left
        left = []
        for info, key in jobs:
            if info.name in placed:
                continue
            if stop(n):
                return True
            n += 1
            if key is not None and (key in served or known.hopeless_as(info, key)):
                left.append((info, key))
                continue   # no model to raise, or no place
            models = guarantee_models(g, info, own, within)
            if not models:
                if key is not None:
                    served.add(key)
            elif known.place(info, models):
                continue
            left.append((info, key))
    return False


def fifo_key(info: JobInfo) -> tuple[float, float, str]:
    """The strict priority order (models.rules.priority_key) of a compiled job."""
    return priority_key(info.job)


def _run_sequence(g: Greedy, seq: Sequence[JobInfo], deadline: float | None,
                  interleave: bool = True) -> None:
    """Place `seq` in order (growing elastic gangs in between when `interleave`); past
    `deadline` the jobs left get the reason `time_limit`."""
    g.place_sequence(seq, interleave=interleave, stop=_stopper(g, seq, deadline))


def _stopper(g: Greedy, seq: Sequence[JobInfo], deadline: float | None
             ) -> Callable[[int], bool]:
    """stop(n), asked before the `n`-th job of `seq`: past `deadline` (read every
    `_DEADLINE_EVERY` jobs), the jobs of `seq` neither placed nor given a reason get the
    reason `time_limit`, and it answers True."""
    def stop(n: int) -> bool:
        if deadline is not None and n % _DEADLINE_EVERY == 0 and time.monotonic() > deadline:
            for rest in seq:
                if rest.name not in g.state.placed and rest.name not in g.reasons:
                    g.reasons[rest.name] = TIME_LIMIT
            return True
        return False
    return stop


def _run_fairness(g: Greedy, pending: list[JobInfo], deadline: float | None,
                  known: NoPlace | None = None) -> None:
    """Place `pending` round-robin over tenants (module doc); past `deadline` (read every
    `_DEADLINE_EVERY` jobs) the job reached gets the reason `time_limit` and its tenant's
    turn ends. A job known to find no place is not searched for (`known`, which this adds
    to: no gang grows meanwhile)."""
    if known is None:
        known = NoPlace(g)
    demands = tenant_demands(g.request)
    placed_value: dict[str, float] = {}
    for info in g.infos:
        pl = g.state.placed.get(info.name)
        if pl:
            m = g.state.model_of(pl)
            placed_value[info.job.tenant] = placed_value.get(info.job.tenant, 0.0) + \
                info.values.get(m, 0.0)
    queues: dict[str, list[JobInfo]] = {}
    for info in g.density_order(pending):
        queues.setdefault(info.job.tenant, []).append(info)
    heap = [(placed_value.get(t, 0.0) / demands.get(t, 1.0), t, 0) for t in sorted(queues)]
    heapq.heapify(heap)
    n = 0
    while heap:
        _, t, pos = heapq.heappop(heap)
        q = queues[t]
        if pos >= len(q):
            continue
        info = q[pos]
        n += 1
        if deadline is not None and n % _DEADLINE_EVERY == 0 and time.monotonic() > deadline:
            g.reasons.setdefault(info.name, TIME_LIMIT)
            continue
        if not known.hopeless(info) and known.place(info, g.ranked_models(info)):
            m = g.state.model_of(g.state.placed[info.name])
            placed_value[t] = placed_value.get(t, 0.0) + info.values.get(m, 0.0)
        else:
            g.reasons[info.name] = g.why_unplaced(info)
        heapq.heappush(heap, (placed_value.get(t, 0.0) / demands.get(t, 1.0), t, pos + 1))


def plan_greedy(
    request: PlanRequest,
    *,
    order: Sequence[str] | None = None,
    seed: int | None = None,
    deadline: float | None = None,
    keep_running: bool | None = None,
) -> HeuristicResult:
    """Best-fit placement of every job of `request` in the policy objective's order.

    `order` (job names) overrides the order of the jobs that are not kept in place;
    `seed` perturbs ties randomly (for restarts); `deadline` is a `time.monotonic()`
    instant after which the remaining jobs are left out with reason `time_limit`.
    With `keep_running` false, preemptible running jobs are not kept up front but take
    their turn in the order (valued with the preemption cost they save), keeping their
    placement when it is still free then, moving otherwise (ignored when
    `allow_preemption` is false). By default (None) both are run, the second only when
    time allows (up to 5,000 jobs without a deadline), and the better plan by
    `models.objective.evaluate` is returned; up to `UNPRICED_TOO_UP_TO` jobs a pass
    without model prices (`_priced_order`) competes too, when time allows.
    """
    if keep_running is not None:
        return _greedy_once(request, order, seed, deadline, keep_running)
    start = time.monotonic()
    best = _greedy_once(request, order, seed, deadline, False)
    spent = time.monotonic() - start
    room = (len(request.jobs) <= BOTH_VARIANTS_UP_TO if deadline is None
            else time.monotonic() + 1.5 * spent < deadline)
    if room:
        best = _better(request, best, _greedy_once(request, order, seed, deadline, True))
    if (order is None and len(request.jobs) <= UNPRICED_TOO_UP_TO
            and (deadline is None or time.monotonic() + 1.5 * spent < deadline)):
        best = _better(request, best,
                       _greedy_once(request, order, seed, deadline, False, priced=False))
    return best


def _better(request: PlanRequest, a: HeuristicResult, b: HeuristicResult
            ) -> HeuristicResult:
    """The better plan of `a` and `b` (priority levels, objective, throughput; `a` on
    ties)."""
    ea, eb = evaluate(request, a.placements), evaluate(request, b.placements)
    if ((*level_key(request, b.placements), eb.objective_value, eb.throughput)
            > (*level_key(request, a.placements), ea.objective_value, ea.throughput)):
        return b
    return a


def _priced_order(g: Greedy, pending: list[JobInfo], noise: dict[str, float] | None,
                  priced: bool) -> list[JobInfo]:
    """`pending` in the order of a priced pass (heuristics/prices.py) for a
    throughput-like objective without priority levels: the model prices are set from the
    GPUs still free, the running jobs the prices keep stay (`Greedy.keep_priced`), and
    the rest go in decreasing value density net of the price of their best model (plain
    value density for the other objectives or without `priced`); each density times its
    job's `noise` factor when given (a seeded restart)."""
    if noise is None and not _prices_apply(g.request, priced):
        return g.density_order(pending)
    keyed = _priced_entries(g, pending, noise, priced)
    _sort_by_name_last(keyed, 2, (1, 0))
    return [k[3] for k in keyed]


def _prices_apply(request: PlanRequest, priced: bool) -> bool:
    """Whether a pass orders by the density net of model prices (`_priced_order`)."""
    return priced and request.policy.objective != "fairness" \
        and not lexicographic_levels(request)


def _priced_entries(g: Greedy, pending: list[JobInfo], noise: dict[str, float] | None,
                    priced: bool) -> list[tuple[float, float, str, JobInfo]]:
    """The jobs of `pending` that `_priced_order` orders (the running jobs the prices
    keep are placed meanwhile), unsorted, each as its sort key: (key, -size, name, job);
    without prices and `noise`, `Greedy.density_order`'s key."""
    request = g.request
    rows: dict[str, tuple[JobInfo, float, int, bool]] = {}
    per_row: list[float] = []
    if _prices_apply(request, priced):
        g.use_prices(model_prices(pending, g.state.model_free, g.bonus, g.price_rows))
        g.keep_priced(pending)
        pending = [i for i in pending if i.name not in g.state.placed]
        # the net densities of this very pricing's jobs, once per row (heuristics/prices.py)
        if g.prices:
            rows, per_row = g.price_rows.jobs, g.price_rows.row_densities(g.prices)
    elif noise is None:
        density = g.density_key
        return [(*density(i), i) for i in pending]
    factor = noise or {}
    rounded: dict[int, float] = {}    # without noise, a row's sort key (once per row)
    keyed = []
    for i in pending:
        hit = rows.get(i.name)
        if hit is not None and hit[3] and not i.size_values:
            if noise is None:
                key = rounded.get(hit[2])
                if key is None:
                    key = rounded[hit[2]] = -round(per_row[hit[2]], 9)
            else:
                key = -round(per_row[hit[2]] * factor.get(i.name, 1.0), 9)
        else:
            key = -round(g.net_density(i) * factor.get(i.name, 1.0), 9)
        keyed.append((key, -i.size, i.name, i))
    return keyed


def _sort_by_name_last(entries: list[Any], name: int, keys: tuple[int, ...]) -> None:
    """Sort `entries` (tuples) by their fields `reversed(keys)` then their unique `name`
    field. When they come in name order (a request's jobs usually do), one stable sort
    per field, the last first, gives that order without comparing tuples and names
    (13,000 jobs of L: a fifth of the time)."""
    if all(a[name] < b[name] for a, b in pairwise(entries)):
        for k in keys:
            entries.sort(key=itemgetter(k))
    else:
        entries.sort(key=itemgetter(*reversed(keys), name))


def _groups_apply(g: Greedy, failed: list[JobInfo], seed: int | None,
                  interleave: bool) -> bool:
    """Whether `place_pending` runs its sequence grouped by fit keys
    (`Greedy.place_grouped`): one plain sequence (no priority levels, not the
    round-robin of fairness), no running job to move first (preemption forbidden) and no
    growth of elastic gangs in between (a gang that grows elsewhere frees its GPUs, and
    the growths are made at each job's turn)."""
    request = g.request
    policy = request.policy
    if lexicographic_levels(request) or (policy.objective == "fairness" and seed is None):
        return False
    if failed and not policy.allow_preemption:
        return False
    return not (interleave and g.has_elastic())


def _cut_before_start(request: PlanRequest, seed: int | None, deadline: float | None
                      ) -> bool:
    """Whether a pass whose running jobs are settled is already past `deadline` and first
    runs the plain sequence (`_run_sequence`) or the quota guarantee phase
    (`_guarantee_phase`), which then stop before their first job and leave every job they
    did not reach with the reason `time_limit`, whatever their order: L cut at once spent
    0.05-0.1 s of CPU ordering 13,000 jobs it never placed."""
    if deadline is None or time.monotonic() <= deadline:
        return False
    if lexicographic_levels(request):
        # with priority levels fairness is a round-robin in every class (`_run_levels`)
        return bool(request.cluster.quotas) or request.policy.objective != "fairness"
    return not (request.policy.objective == "fairness" and seed is None)


def _greedy_once(request: PlanRequest, order: Sequence[str] | None, seed: int | None,
                 deadline: float | None, keep_running: bool, priced: bool = True
                 ) -> HeuristicResult:
    """One greedy pass (see `plan_greedy`)."""
    g = Greedy(request)
    keep_all = keeps_all_running(request, keep_running)
    # Keep running jobs: all of them first unless they take their turn in the order.
    failed = g.keep_running(preemptible=keep_all)
    return place_pending(g, failed, order=order, seed=seed, deadline=deadline,
                         keep_all=keep_all, priced=priced)


def keeps_all_running(request: PlanRequest, keep_running: bool) -> bool:
    """Whether a pass keeps every running job up front (`plan_greedy`'s `keep_running`;
    priority_fifo gives the preemptible ones their turn in the order, unless preemption
    is not allowed)."""
    policy = request.policy
    return (keep_running and policy.objective != "priority_fifo") \
        or not policy.allow_preemption


def place_pending(g: Greedy, failed: list[JobInfo], *, order: Sequence[str] | None,
                  seed: int | None, deadline: float | None, keep_all: bool,
                  priced: bool = True) -> HeuristicResult:
    """The rest of a greedy pass once the running jobs were kept (`failed`: those that
    could not be; `keep_all`: `keeps_all_running`): the other jobs placed in the policy's
    order, then the growth of elastic gangs (see `plan_greedy`; `priced`: with model
    prices, `_priced_order`). A planning session calls it on a placer carried from its
    last plan (solver/warm.py)."""
    request = g.request
    policy = request.policy
    fifo = policy.objective == "priority_fifo"
    if not keep_all and not fifo:
        bonus = policy.preemption_cost if policy.objective != "fairness" else 0.0
        for info in g.infos:
            if info.current and info.preemptible:
                g.bonus[info.name] = bonus
    pending = [i for i in g.infos if i.name not in g.state.placed
               and not i.pinned]
    if order is not None:
        rank = {n: k for k, n in enumerate(order)}
        pending.sort(key=lambda i: (rank.get(i.name, len(rank)), i.name))
        # Running jobs that could not stay move first when preemption is forbidden.
        if not policy.allow_preemption:
            pending.sort(key=lambda i: 0 if i.current else 1)
        _run_sequence(g, pending, deadline, interleave=not fifo)
        g.keep_cut_running()
        g.grow_elastic(deadline)
        return g.result()
    interleave = not fifo and policy.objective != "fairness"
    # the sequence as unsorted entries for `Greedy.place_grouped`, when it serves
    entries: list[tuple[Any, ...]] | None = None
    grouped = _groups_apply(g, failed, seed, interleave)
    if _cut_before_start(request, seed, deadline):
        pass   # the sequence stops before its first job: ordering them would be wasted
    elif fifo and seed is None:
        if grouped:
            entries = [(*fifo_key(i), i) for i in pending]
        else:
            pending.sort(key=fifo_key)
    else:
        noise = None
        if seed is not None:
            rng = random.Random(seed)
            noise = {i.name: rng.uniform(0.9, 1.1) for i in pending}
        if grouped:
            entries = _priced_entries(g, pending, noise, priced and not fifo)
        else:
            pending = _priced_order(g, pending, noise, priced and not fifo)
    if entries is not None:
        # as below, by fit keys; uncut, no job has the reason `time_limit`, and without
        # elastic gangs none grows
        if g.place_grouped(entries, deadline):
            g.keep_cut_running()
        if g.has_elastic():
            g.grow_elastic(deadline)
        return g.result()
    if not policy.allow_preemption:
        moved = {i.name for i in failed}
        pending.sort(key=lambda i: 0 if i.name in moved else 1)
    if lexicographic_levels(request):
        _run_levels(g, pending, deadline)
    elif policy.objective == "fairness" and seed is None:
        movers = [i for i in pending if i.current]
        _run_sequence(g, movers, deadline, interleave=False)
        _run_fairness(g, [i for i in pending if not i.current], deadline)
    else:
        if g.prices:
            # first each job where it earns its model's price, then the rest anywhere
            g.affordable_only = True
            _run_sequence(g, pending, deadline, interleave=interleave)
            g.affordable_only = False
            pending = [i for i in pending if i.name not in g.state.placed
                       and g.reasons.get(i.name, ("",))[0] != "time_limit"
                       and g.priced_out(i)]
        _run_sequence(g, pending, deadline, interleave=interleave)
    g.keep_cut_running()
    g.grow_elastic(deadline)
    return g.result()
