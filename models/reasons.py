"""Why a job cannot be placed whatever the plan: the static reasons, known before solving.

- `no_eligible_gpu`: no usable GPU of an eligible model (or MIG profile) in the cluster; the
  detail names the models the job accepts and those the cluster has;
- `gang_too_large`: more eligible GPUs than one node / one domain of each required
  topology level (v1's `same_domain` is the level "domain") / the cluster has;
- `infeasible_constraints`: the host CPU / memory request fits no eligible node.

A job without such a reason that stays unplaced lacks capacity (`insufficient_capacity`).
With `allow_mig_reconfiguration` false, a MIG job needs a usable GPU that holds an instance
of a covering profile now. The solver gives these reasons to new jobs before it solves
(`static_reasons`); the heuristics ask `StaticReasons.reason` for any job they could not
place. Both read the cluster through the request's one usable `CapacitySummary`
(`models.capacity.usable_summary`, shared with the compiled jobs), scanned by groups of
nodes that no question tells apart, and memoise by job shape (`static_reasons` first by
the demand of a job, numbered once per compiled kind, and its host request), so the cost
stays linear in jobs + nodes on large requests.
"""

from __future__ import annotations

from typing import cast

from models.capacity import NodeCapacity, Pool, usable_summary
from models.instance import JobKind, compile_jobs, per_request
from models.request import Job, PlanRequest
from models.rules import (
    allowed_sizes,
    host_fits,
    mig_profiles_for,
    model_eligible,
    required_levels,
)

Reason = tuple[str, str]

#: A key `static_reasons` has not asked about yet.
_UNSEEN = object()

#: The reason of a job with an eligible place that other work holds.
INSUFFICIENT = ("insufficient_capacity", "eligible GPUs exist but are taken by other work")


def _signature(job: Job) -> tuple[object, ...]:
    """What the static reason of a job depends on: its demand (`_demand`), whether it
    may span nodes, its host request and its required topology levels (v1's
    `same_domain` among them)."""
    return (_demand(job), job.single_node, job.cpu_millicores, job.host_memory_gib,
            required_levels(job))


def _demand(job: Job) -> tuple[object, ...]:
    """The part of `_signature` that the compiled kind of a job decides (its shape, GPUs,
    eligibility and smallest allowed size; the names of its throughput map and
    `allowed_models` in their order: the same names listed in another order only miss
    the memo)."""
    mig = job.mig
    thr = job.throughput
    allowed = job.allowed_models
    return (job.shape, job.gpus, job.mig_profile,
            None if mig is None else (mig.compute_slices, mig.memory_gib),
            job.gpu_memory_gib, tuple(thr) if thr else (),
            None if allowed is None else tuple(allowed),
            None if job.elastic is None else min(allowed_sizes(job)))


def accepted_models(job: Job) -> str:
    """The models `job` accepts, in words (its throughput map and `allowed_models`, its GPU
    memory or MIG demand)."""
    names: set[str] | None = None
    if job.throughput:
        names = set(job.throughput)
    if job.allowed_models is not None:
        allowed = set(job.allowed_models)
        names = allowed if names is None else names & allowed
    what = "any model" if names is None else (", ".join(sorted(names)) or "no model")
    if job.shape == "mig":
        if job.mig_profile is not None:
            need = f"MIG profile {job.mig_profile}"
        else:
            c, m = (job.mig.compute_slices, job.mig.memory_gib) if job.mig else (0, 0.0)
            need = f"a MIG profile of >= {c} compute slices and {m:g} GiB"
        return f"{what} with {need}"
    if job.gpu_memory_gib is not None:
        return f"{what} with >= {job.gpu_memory_gib:g} GiB"
    return what


def _pools_text(pools: set[Pool]) -> str:
    names = sorted(f"{m} (MIG)" if mig else m for m, mig in pools)
    return ", ".join(names) if names else "no GPU"


class StaticReasons:
    """The static reason of any job of one request (memoised by job shape); `of` gives
    the one instance of a request, shared by every planner phase."""

    def __init__(self, request: PlanRequest) -> None:
        self.catalog = request.cluster.catalog()
        self.capacity = usable_summary(request)
        self.fixed_mig = not request.policy.allow_mig_reconfiguration
        self.present = self.capacity.pools_present()
        self.models = sorted({m for m, _ in self.present})
        self._memo: dict[tuple[object, ...], Reason | None] = {}
        self._nodes_memo: dict[tuple[object, ...], list[tuple[float | None, float | None,
                                                             int]]] = {}
        self._groups: dict[bool, list[NodeCapacity]] = {}

    @classmethod
    def of(cls, request: PlanRequest) -> StaticReasons:
        """The static reasons of `request`, built once per request object (each greedy
        pass, rounding and repair asks for them; building them scans the whole cluster)."""
        return per_request(request, "static_reasons", cls)

    def reason(self, job: Job) -> Reason | None:
        """(reason, detail) when no plan can place `job`, else None."""
        sig = _signature(job)
        if sig not in self._memo:
            self._memo[sig] = self._reason(job)
        return self._memo[sig]

    def _eligible(self, job: Job) -> dict[str, set[str]]:
        """Eligible models present -> the profile names covering a MIG job (empty else)."""
        out: dict[str, set[str]] = {}
        for m in self.models:
            spec = self.catalog[m]
            if model_eligible(job, m, spec):
                out[m] = ({p.name for p in mig_profiles_for(job, spec)}
                          if job.shape == "mig" else set())
        return out

    def _reason(self, job: Job) -> Reason | None:
        mig = job.shape == "mig"
        ok = self._eligible(job)
        g = job.gpus or 1
        # an elastic gang needs its smallest allowed size, and that part of its host
        # request (docs/semantics.md: the request is per `gpus` GPUs, pro rata)
        need = min(allowed_sizes(job)) if job.elastic is not None else g
        whole_multi = job.shape == "whole" and not job.single_node and g > 1
        share = 1.0 / g if whole_multi else need / g if job.elastic is not None else 1.0
        cpu, mem = (job.cpu_millicores or 0.0) * share, (job.host_memory_gib or 0.0) * share
        nodes = self._nodes_with(ok, mig)
        if not nodes:
            return ("no_eligible_gpu", self._no_gpu_detail(job, ok))
        size, need = need, 1
        if job.shape == "whole":
            too_large = self._gang_too_large(job, list(ok))
            if too_large is not None:
                return too_large
            need = 1 if whole_multi else size
        if not any(n >= need and host_fits(cpu, mem, c, m) for c, m, n in nodes):
            return ("infeasible_constraints", "its host CPU / memory request fits no eligible node")
        return None

    def _nodes_with(self, ok: dict[str, set[str]], mig: bool
                    ) -> list[tuple[float | None, float | None, int]]:
        """(host CPU, host memory, the most GPUs of one model it has that can take a job
        eligible on `ok` now) of the nodes with such a GPU, each distinct triple once
        (memoised: many job shapes share `ok`)."""
        by_profile = mig and self.fixed_mig
        key = (mig, tuple(sorted((m, tuple(sorted(p))) for m, p in ok.items())))
        hit = self._nodes_memo.get(key)
        if hit is not None:
            return hit
        out: dict[tuple[float | None, float | None, int], None] = {}
        for s in self._node_groups(by_profile):
            most = 0
            for m, profs in ok.items():
                if by_profile:
                    n = sum(s.profiles.get((m, p), 0) for p in profs)
                else:
                    n = s.gpus.get((m, mig), 0)
                most = max(most, n)
            if most > 0:
                out[(s.cpu, s.mem, most)] = None
        self._nodes_memo[key] = result = list(out)
        return result

    def _node_groups(self, by_profile: bool) -> list[NodeCapacity]:
        """One node of each group of nodes that `_nodes_with` cannot tell apart (the same
        host capacity and counted GPUs per pool, or per MIG profile when `by_profile`):
        its scans are one per group, not one per node."""
        groups = self._groups.get(by_profile)
        if groups is None:
            seen: dict[tuple[object, ...], NodeCapacity] = {}
            for s in self.capacity.nodes:
                counts = s.profiles if by_profile else s.gpus
                seen.setdefault((s.cpu, s.mem, tuple(counts.items())), s)
            groups = self._groups[by_profile] = list(seen.values())
        return groups

    def _gang_too_large(self, job: Job, models: list[str]) -> Reason | None:
        """`gang_too_large` when no node / domain / the cluster has the gang's GPUs of one
        eligible model (whole jobs; an elastic gang's smallest allowed size)."""
        g = min(allowed_sizes(job)) if job.elastic is not None else job.gpus or 1
        cap = self.capacity
        if job.single_node or g == 1:
            best = max(cap.most_on_one_node((m, False)) for m in models)
            if best < g:
                return ("gang_too_large", f"needs {g} GPUs of one model on one node; the "
                                          f"largest eligible node has {best}")
            return None
        for level in required_levels(job):
            best = max(cap.most_in_one(level, (m, False)) for m in models)
            if best < g:
                return ("gang_too_large", f"needs {g} GPUs of one model in one {level}; "
                                          f"at most {best} are eligible")
        best = max(cap.total((m, False)) for m in models)
        if best < g:
            return ("gang_too_large", f"needs {g} GPUs of one model in one cluster; at "
                                      f"most {best} are eligible")
        return None

    def _no_gpu_detail(self, job: Job, ok: dict[str, set[str]]) -> str:
        mig = job.shape == "mig"
        pools = [(m, mig) for m in ok if (m, mig) in self.present]
        if not pools:
            return (f"no GPU in the cluster is of a model it accepts (it accepts "
                    f"{accepted_models(job)}; the cluster has {_pools_text(self.present)})")
        if mig and self.fixed_mig and any(self.capacity.total(p) for p in pools):
            return ("no usable MIG GPU of an eligible model holds an instance of a covering "
                    "profile, and MIG reconfiguration is not allowed")
        return "eligible GPUs exist only on unhealthy GPUs or unschedulable nodes"


def static_reasons(request: PlanRequest) -> dict[str, Reason]:
    """job name -> (reason, detail) for the new jobs that no plan can place (running jobs
    are never given a static reason: they can always be kept)."""
    reasons = StaticReasons.of(request)
    out: dict[str, Reason] = {}
    # One question per demand (`_demand`, numbered once per compiled kind: the jobs of a
    # kind share it) and what else a static reason reads (`_signature`): the host request
    # and, for a gang (a whole-GPU job on more than one GPU, or elastic), whether it may
    # span nodes and its required levels (`StaticReasons._reason` reads neither for a
    # fixed job on one GPU).
    demands: dict[tuple[object, ...], int] = {}
    by_kind: dict[JobKind, tuple[int, bool]] = {}
    seen: dict[tuple[object, ...], object] = {}
    for info in compile_jobs(request):
        if info.current:
            continue
        job = info.job
        hit = by_kind.get(info.kind)
        if hit is None:
            hit = by_kind[info.kind] = (
                demands.setdefault(_demand(job), len(demands)),
                info.shape == "whole" and (info.gpus > 1 or job.elastic is not None))
        d, gang = hit
        key = ((d, info.cpu, info.host_mem, job.single_node, required_levels(job))
               if gang else (d, info.cpu, info.host_mem))
        why = seen.get(key, _UNSEEN)
        if why is _UNSEEN:
            why = seen[key] = reasons.reason(job)
        if why is not None:
            out[info.name] = cast(Reason, why)
    return out
