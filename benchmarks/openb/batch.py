"""Batch mode: the same inflated pods placed all at once by `solver.plan`, for comparison.

The GPU pods become one PlanRequest (`loader.to_request`, policy.solver "auto" and a time
limit of our choice) and `solver.plan` returns a validated Plan. CPU-only pods are outside
the GPU plan (see `loader`): they are placed afterwards, best fit on the CPU and memory the
plan leaves, and never change the allocation. Allocation = placed GPU milli / capacity, the
same y as the online curve at its end (x = 130%).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from benchmarks.openb.loader import MILLI, OpenbNodes, OpenbPods, to_request
from models import Plan, PlanRequest, Policy


@dataclass
class BatchResult:
    """One batch plan of one arrival set."""

    seed: int
    allocation: float
    unplaced_gpu_pods: int
    cpu_only_unplaced: int
    status: str
    solver: str
    wall_s: float
    plan: Plan
    request: PlanRequest


def placed_milli(request: PlanRequest, plan: Plan) -> int:
    """GPU milli placed by `plan` (whole GPUs 1000 each, shares their fraction)."""
    jobs = {j.name: j for j in request.jobs}
    total = 0
    for a in plan.assignments:
        job = jobs[a.job]
        if job.gpu_share is not None:
            total += round(job.gpu_share * MILLI)
        else:
            total += MILLI * len(a.placements)
    return total


def run_batch(nodes: OpenbNodes, arrivals: OpenbPods, seed: int,
              time_limit_s: float = 120.0) -> BatchResult:
    """Plan all GPU pods of `arrivals` at once with `solver.plan` (auto)."""
    from solver import plan as solve

    policy = Policy(solver="auto", time_limit_s=time_limit_s, seed=seed)
    request, cpu_only = to_request(nodes, arrivals, policy)
    start = time.perf_counter()
    result = solve(request)
    wall = time.perf_counter() - start
    cpu_left = _place_cpu_only(request, result, arrivals, cpu_only)
    return BatchResult(
        seed=seed,
        allocation=placed_milli(request, result) / nodes.capacity_milli,
        unplaced_gpu_pods=len(result.unplaced),
        cpu_only_unplaced=cpu_left,
        status=str(result.status),
        solver=result.solver,
        wall_s=wall,
        plan=result,
        request=request,
    )


def _place_cpu_only(request: PlanRequest, plan: Plan, pods: OpenbPods, cpu_only: list[int]) -> int:
    """Best-fit the CPU-only pods on the host CPU/memory the plan leaves; the number left out."""
    jobs = {j.name: j for j in request.jobs}
    cpu = {n.name: n.cpu_millicores or 0.0 for n in request.cluster.nodes}
    mem = {n.name: n.memory_gib or 0.0 for n in request.cluster.nodes}
    for a in plan.assignments:
        job = jobs[a.job]
        node = a.placements[0].node
        cpu[node] -= job.cpu_millicores or 0.0
        mem[node] -= job.host_memory_gib or 0.0
    left = 0
    for i in cpu_only:
        need_c, need_m = float(pods.cpu_milli[i]), float(pods.memory_mib[i]) / 1024.0
        fit = [n for n in cpu if cpu[n] >= need_c and mem[n] >= need_m]
        if not fit:
            left += 1
            continue
        best = min(fit, key=lambda n: cpu[n] - need_c)
        cpu[best] -= need_c
        mem[best] -= need_m
    return left
