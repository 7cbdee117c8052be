"""`gpuplan bench exact`: how fast the exact backends prove optimality.

Two measurements (issue [2/7]):
1. median and max wall time of `solver.plan` to a proven optimum (status `optimal`) for
   CP-SAT and the MILP backend (CBC, and HiGHS with `--highs`) on `--count` generated
   small instances (benchmarks/generator.py size S: 32 GPUs, 40 jobs, seeds 0..count-1);
2. on one 128-node (1,024 GPU), 1,000-job instance, the time CP-SAT (through `auto`) needs
   to reach a reported gap of at most 1%, polled by raising the time limit step by step.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.generator import generate, generate_custom
from models import PlanRequest
from solver import plan


@dataclass
class SmallResult:
    """Timings of one backend over the small instances."""

    backend: str
    times: list[float]
    optimal: int
    statuses: dict[str, int]

    def row(self) -> str:
        med = statistics.median(self.times) if self.times else float("nan")
        top = max(self.times) if self.times else float("nan")
        st = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        return (f"| {self.backend} | {len(self.times)} | {self.optimal} | {med:.3f} | "
                f"{top:.3f} | {st} |")


def _with(request: PlanRequest, **policy: object) -> PlanRequest:
    request.policy = request.policy.model_copy(update=policy)
    return request


def small_runs(backend: str, count: int, threads: int, time_limit: float) -> SmallResult:
    """Solve `count` S instances with `backend` ("cp_sat", "cbc" or "highs")."""
    times: list[float] = []
    statuses: dict[str, int] = {}
    for seed in range(count):
        solver = "cp_sat" if backend == "cp_sat" else "milp"
        req = _with(generate("S", seed), solver=solver, threads=threads, seed=seed,
                    time_limit_s=time_limit,
                    milp_backend=backend if backend != "cp_sat" else "cbc")
        t0 = time.perf_counter()
        result = plan(req)
        times.append(time.perf_counter() - t0)
        statuses[result.status] = statuses.get(result.status, 0) + 1
    return SmallResult(backend, times, statuses.get("optimal", 0), statuses)


def time_to_gap(target_gap: float, threads: int, limits: list[float]) -> list[str]:
    """Rows: for each time limit, status, objective, bound and gap on the 1,024-GPU case."""
    rows = []
    for limit in limits:
        req = _with(generate_custom(1024, 1000, seed=0), solver="auto", threads=threads,
                    seed=0, time_limit_s=limit, mip_gap=target_gap)
        t0 = time.perf_counter()
        result = plan(req)
        wall = time.perf_counter() - t0
        gap = "n/a" if result.gap is None else f"{result.gap:.2%}"
        rows.append(f"| {limit:g} | {result.solver} | {result.status} | "
                    f"{result.objective_value:.2f} | {result.best_bound or float('nan'):.2f} |"
                    f" {gap} | {wall:.2f} |")
        if result.gap is not None and result.gap <= target_gap:
            break
    return rows


def exact_command(
    count: Annotated[int, typer.Option(help="Small instances to solve.")] = 50,
    threads: Annotated[int, typer.Option(help="Solver threads.")] = 2,
    highs: Annotated[bool, typer.Option(help="Also run the HiGHS MILP backend.")] = False,
    large: Annotated[bool, typer.Option(help="Also run the 1,024-GPU time-to-1% run.")] = True,
    out: Annotated[Path | None, typer.Option(help="Also write the tables here.")] = None,
) -> None:
    """Time to proven optimality on small instances; time to 1% gap on 1,024 GPUs."""
    backends = ["cp_sat", "cbc"] + (["highs"] if highs else [])
    lines = ["| backend | instances | optimal | median s | max s | statuses |",
             "|---|---|---|---|---|---|"]
    for b in backends:
        lines.append(small_runs(b, count, threads, 60.0).row())
        typer.echo(lines[-1], err=True)
    if large:
        lines += ["", "| time limit s | solver | status | objective | bound | gap | wall s |",
                  "|---|---|---|---|---|---|---|"]
        lines += time_to_gap(0.01, threads, [5, 10, 20, 40, 80])
    text = "\n".join(lines)
    typer.echo(text)
    if out is not None:
        out.write_text(text + "\n")
