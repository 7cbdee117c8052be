"""Decomposition for large requests: exact sub-solves on node partitions, then repair.

`solve_decomposed(request, deadline=..., exact=...)`:

1. a heuristic plan first (greedy best fit), so that an answer exists whatever happens;
2. partition: nodes are grouped by GPU model class (the set of models of a node) and each
   class is split POP-style (Narayanan et al., SOSP'21) into random parts of about
   `part_gpus` GPUs, whole topology domains kept together where they fit so that
   `same_domain` gangs stay solvable. Jobs are split proportionally: a running job goes
   with the part of the node it runs on (a job running across parts stays where it is and
   its GPUs are taken out of the sub-problems); a queued job goes to a random part of its
   best eligible model class, drawn with probability proportional to the part's GPUs;
3. each part is an ordinary PlanRequest (its nodes, its jobs, the same policy with the
   part's time budget), solved by `exact(subrequest, budget)` in a pool of 2 processes
   (in this process when the pool cannot be used); a part whose exact solve fails falls
   back to the greedy plan of the part;
4. merge (parts share no node and no job, so the union is consistent), then repair and
   improve with local search (unplaced jobs, gangs larger than a part) until the deadline;
5. the better of the merged-and-improved plan and the heuristic plan (by
   `models.objective.evaluate`) is returned.

`fairness` (a minimum over tenants) and `priority_fifo` (a global order) do not split by
node: for them the heuristic plan improved by local search is returned.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from heuristics.greedy import plan_greedy
from heuristics.local_search import improve, is_consistent
from heuristics.result import HeuristicResult
from models import Job, Node, Placement, PlanRequest
from models.instance import compile_jobs
from models.objective import evaluate

log = logging.getLogger(__name__)

ExactSolver = Callable[[PlanRequest, float], HeuristicResult | None]

#: Target GPUs per sub-problem.
PART_GPUS = 512
#: Worker processes for the sub-solves.
WORKERS = 2
#: Share of the remaining budget given to the sub-solves (the rest repairs and improves).
SUBSOLVE_SHARE = 0.55


def partition_nodes(request: PlanRequest, part_gpus: int, rng: random.Random) -> list[list[int]]:
    """Node indices split into parts of about `part_gpus` GPUs, one model class per part,
    whole topology domains together when a domain fits in a part."""
    by_class: dict[tuple[str, ...], dict[str, list[int]]] = {}
    for ni, node in enumerate(request.cluster.nodes):
        cls = tuple(sorted({g.model for g in node.gpus}))
        dom = node.topology_domain if node.topology_domain is not None else f"(node {ni})"
        by_class.setdefault(cls, {}).setdefault(dom, []).append(ni)
    parts: list[list[int]] = []
    for cls in sorted(by_class):
        domains = by_class[cls]
        units: list[list[int]] = []
        for dom in sorted(domains, key=str):
            nodes = domains[dom]
            gpus = sum(len(request.cluster.nodes[n].gpus) for n in nodes)
            if gpus <= part_gpus:
                units.append(nodes)
            else:
                units.extend([n] for n in nodes)
        rng.shuffle(units)
        total = sum(len(request.cluster.nodes[n].gpus) for u in units for n in u)
        k = max(1, round(total / part_gpus))
        bins: list[list[int]] = [[] for _ in range(k)]
        sizes = [0] * k
        for u in units:
            b = min(range(k), key=lambda i: (sizes[i], i))
            bins[b].extend(u)
            sizes[b] += sum(len(request.cluster.nodes[n].gpus) for n in u)
        parts.extend(b for b in bins if b)
    return parts


def split_request(request: PlanRequest, parts: list[list[int]], rng: random.Random,
                  budget: float) -> tuple[list[PlanRequest], set[str]]:
    """One sub-request per part, and the running jobs that span parts (kept as they are)."""
    nodes = request.cluster.nodes
    part_of: dict[str, int] = {}
    for pi, part in enumerate(parts):
        for ni in part:
            part_of[nodes[ni].name] = pi
    part_gpus = [sum(len(nodes[n].gpus) for n in part) for part in parts]
    models_of_part = [{g.model for n in part for g in nodes[n].gpus} for part in parts]
    jobs_of: list[list[Job]] = [[] for _ in parts]
    spanning: set[str] = set()
    infos = {i.name: i for i in compile_jobs(request)}
    for job in request.jobs:
        if job.current:
            owners = {part_of[p.node] for p in job.current}
            if len(owners) == 1:
                jobs_of[owners.pop()].append(job)
            else:
                spanning.add(job.name)
            continue
        info = infos[job.name]
        if not info.values:
            continue
        best = max(info.values.values())
        good = {m for m, v in info.values.items() if v >= best - 1e-9}
        cands = [pi for pi, ms in enumerate(models_of_part) if ms & good]
        if not cands:
            cands = [pi for pi, ms in enumerate(models_of_part) if ms & set(info.values)]
        if not cands:
            continue
        pick = rng.choices(cands, weights=[part_gpus[pi] for pi in cands])[0]
        jobs_of[pick].append(job)
    reserved = {(p.node, p.gpu) for j in request.jobs if j.name in spanning
                for p in (j.current or [])}
    policy = request.policy.model_copy(update={"time_limit_s": max(0.05, budget)})
    subs = []
    for pi, part in enumerate(parts):
        sub_nodes = [_without(nodes[ni], reserved, request) for ni in part]
        cluster = request.cluster.model_copy(update={"nodes": sub_nodes})
        subs.append(request.model_copy(update={"cluster": cluster, "jobs": jobs_of[pi],
                                               "policy": policy}))
    return subs, spanning


def _without(node: Node, reserved: set[tuple[str, int]], request: PlanRequest) -> Node:
    """`node` without the GPUs of jobs that span parts (and their host share)."""
    if not any((node.name, g.index) in reserved for g in node.gpus):
        return node
    cpu, mem = node.cpu_millicores, node.memory_gib
    for job in request.jobs:
        if not job.current:
            continue
        k = sum(1 for p in job.current if p.node == node.name)
        if k and any((p.node, p.gpu) in reserved for p in job.current):
            part = k / len(job.current) if job.gpus else 1.0
            if cpu is not None:
                cpu = max(0.0, cpu - (job.cpu_millicores or 0.0) * part)
            if mem is not None:
                mem = max(0.0, mem - (job.host_memory_gib or 0.0) * part)
    gpus = [g for g in node.gpus if (node.name, g.index) not in reserved]
    return node.model_copy(update={"gpus": gpus, "cpu_millicores": cpu, "memory_gib": mem})


def _solve_part(exact: ExactSolver, sub: PlanRequest, budget: float) -> HeuristicResult:
    """The exact plan of one part, its greedy plan when the exact solve gives nothing."""
    try:
        res = exact(sub, budget)
    except Exception:  # a failed sub-solve must not sink the whole plan
        log.exception("sub-solve failed; using the greedy plan of the part")
        res = None
    if res is None:
        res = plan_greedy(sub)
    return res


def _run_parts(exact: ExactSolver, subs: list[PlanRequest], budget: float,
               deadline: float) -> list[HeuristicResult | None]:
    """Solve every part, 2 at a time in worker processes (in-process as a fallback)."""
    out: list[HeuristicResult | None] = [None] * len(subs)
    try:
        pickle.dumps(exact)
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=WORKERS, mp_context=ctx) as pool:
            futures: list[Future[HeuristicResult]] = [
                pool.submit(_solve_part, exact, sub, budget) for sub in subs]
            for i, fut in enumerate(futures):
                left = deadline - time.monotonic()
                try:
                    out[i] = fut.result(timeout=max(0.0, left))
                except FutureTimeout:
                    fut.cancel()
                except Exception:
                    log.exception("sub-solve %d failed", i)
            for fut in futures:
                fut.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
        return out
    except (OSError, ValueError, AttributeError, TypeError, pickle.PicklingError) as e:
        log.info("process pool unavailable (%s); solving parts in this process", e)
    for i, sub in enumerate(subs):
        if time.monotonic() >= deadline:
            break
        out[i] = _solve_part(exact, sub, min(budget, deadline - time.monotonic()))
    return out


def _key(request: PlanRequest, result: HeuristicResult) -> tuple[float, float]:
    ev = evaluate(request, result.placements)
    return ev.objective_value, ev.throughput


def solve_decomposed(
    request: PlanRequest,
    *,
    deadline: float,
    exact: ExactSolver,
    seed: int | None = None,
    part_gpus: int = PART_GPUS,
) -> HeuristicResult:
    """The best plan found by exact sub-solves on node partitions, merged, repaired and
    improved until `deadline` (a `time.monotonic()` instant); never worse than the
    greedy plan of `request`."""
    rng = random.Random(seed if seed is not None else 0)
    base = plan_greedy(request, seed=None, deadline=deadline)
    if request.policy.objective in ("fairness", "priority_fifo"):
        return improve(request, base, deadline=deadline, seed=seed)
    remaining = deadline - time.monotonic()
    parts = partition_nodes(request, part_gpus, rng)
    if len(parts) <= 1 or remaining <= 0.5:
        return improve(request, base, deadline=deadline, seed=seed)
    sub_window = remaining * SUBSOLVE_SHARE
    rounds = -(-len(parts) // WORKERS)
    budget = max(0.2, sub_window / rounds - 0.1)
    subs, spanning = split_request(request, parts, rng, budget)
    results = _run_parts(exact, subs, budget, time.monotonic() + sub_window)
    merged = HeuristicResult()
    by_name = {j.name: j for j in request.jobs}
    for name in spanning:
        cur = by_name[name].current
        if cur:
            merged.placements[name] = [Placement.model_validate(p.model_dump()) for p in cur]
    for res in results:
        if res is None:
            continue
        for name, pl in res.placements.items():
            if pl:
                merged.placements[name] = list(pl)
    for sub, res in zip(subs, results, strict=True):
        if res is None:
            for job in sub.jobs:
                if job.current and job.name not in merged.placements:
                    merged.placements[job.name] = list(job.current)
    if not is_consistent(request, merged):
        log.warning("merged sub-plans conflict; keeping the heuristic plan")
        return improve(request, base, deadline=deadline, seed=seed)
    merged = improve(request, merged, deadline=deadline, seed=seed)
    return merged if _key(request, merged) >= _key(request, base) else base
