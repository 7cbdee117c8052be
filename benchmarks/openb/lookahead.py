"""Look-ahead placement: the exact solver (CP-SAT) on small windows of arriving pods.

A semi-online variant: pods are admitted in windows of `k` consecutive arrivals (a short
batching delay, common in practice). For each window we keep, per pod, the `c` best
candidates of the base policy's score against the current state, and CP-SAT places the
window jointly, exactly respecting every capacity (CPU, memory, each GPU's milli, fully
free GPUs for whole-GPU pods, which GPUs the solver picks):

    maximise   sum_{p,c} x[p,c] (BIG * gpu_milli_p + PLACED + score[p,c])
    subject to sum_c x[p,c] <= 1                                  (each pod once)
               sum_{p,c on n} cpu_p x[p,c] <= cpu_free[n]  (and memory)
               sum_{shared p,c on (n,g)} milli_p x[p,c] + 1000 z[p,c,g] <= free[n,g]
               sum_g z[p,c,g] = num_gpu_p x[p,c]                  (whole-GPU pods)

so the window places as much GPU request as possible, then the most placements, then the
best total fragmentation score. Placed pods are committed in arrival order and never
moved; a pod the window left out is retried alone with the base policy (so look-ahead never
fails a pod that still fits).
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from benchmarks.openb.frag import TypicalShapes
from benchmarks.openb.loader import MILLI
from benchmarks.openb.policies import Candidates, Choice, GpuplanPolicy, candidates
from benchmarks.openb.state import ClusterState, PodReq

BIG = 10_000
PLACED = 5_000
SCORE_CLIP = 4_000


class LookaheadPolicy:
    """CP-SAT over windows of `window` pods, `per_pod` candidates each (base: gpuplan)."""

    def __init__(self, shapes: TypicalShapes, window: int = 8, per_pod: int = 6,
                 time_limit_s: float = 0.5) -> None:
        self.base = GpuplanPolicy(shapes)
        self.window = window
        self.per_pod = per_pod
        self.time_limit_s = time_limit_s

    def choose(self, state: ClusterState, pod: PodReq, rng: np.random.Generator) -> Choice | None:
        """A single pod: the base policy."""
        return self.base.choose(state, pod, rng)

    def choose_window(self, state: ClusterState, pods: list[PodReq]) -> list[Choice | None]:
        """Where to put each pod of the window (None = left for the single-pod retry)."""
        cands: list[tuple[Candidates, np.ndarray, np.ndarray]] = []
        for pod in pods:
            cand = candidates(state, pod)
            if not len(cand):
                cands.append((cand, np.zeros(0, dtype=np.int64), np.zeros(0)))
                continue
            score = self.base.score(state, pod, cand)
            top = np.argsort(-score, kind="stable")[: self.per_pod]
            cands.append((cand, top, score[top]))
        model = cp_model.CpModel()
        x: dict[tuple[int, int], cp_model.IntVar] = {}
        z: dict[tuple[int, int, int], cp_model.IntVar] = {}
        cpu: dict[int, list[tuple[int, cp_model.IntVar]]] = {}
        mem: dict[int, list[tuple[int, cp_model.IntVar]]] = {}
        gpu: dict[tuple[int, int], list[tuple[int, cp_model.IntVar]]] = {}
        terms = []
        for p, (pod, (cand, top, score)) in enumerate(zip(pods, cands, strict=True)):
            for k, c in enumerate(top):
                var = model.new_bool_var(f"x{p}_{k}")
                x[p, k] = var
                n = int(cand.node[c])
                cpu.setdefault(n, []).append((pod.cpu, var))
                mem.setdefault(n, []).append((pod.mem, var))
                if pod.shared:
                    g = int(np.flatnonzero(cand.take[c])[0])
                    gpu.setdefault((n, g), []).append((pod.milli, var))
                elif pod.num_gpu:
                    free_gpus = np.flatnonzero(state.gpu_fits(MILLI, state.gpu_free[n]))
                    zs = []
                    for gi in free_gpus:
                        g = int(gi)
                        zv = model.new_bool_var(f"z{p}_{k}_{g}")
                        z[p, k, g] = zv
                        zs.append(zv)
                        gpu.setdefault((n, g), []).append((MILLI, zv))
                    # sum_g z[p,c,g] = num_gpu_p x[p,c]
                    model.add(sum(zs) == pod.num_gpu * var)
                s = int(np.clip(round(float(score[k])), -SCORE_CLIP, SCORE_CLIP))
                terms.append((BIG * pod.gpu_request + PLACED + s) * var)
            # each pod at most once
            model.add_at_most_one(x[p, k] for k in range(len(top)))
        # host CPU and memory of each node
        for n, items in cpu.items():
            model.add(sum(a * v for a, v in items) <= int(state.cpu_free[n]))
        for n, items in mem.items():
            model.add(sum(a * v for a, v in items) <= int(state.mem_free[n]))
        # milli of each GPU
        for (n, g), items in gpu.items():
            model.add(sum(a * v for a, v in items) <= int(state.gpu_free[n, g]))
        model.maximize(sum(terms))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = self.time_limit_s
        solver.parameters.num_workers = 1
        status = solver.solve(model)
        out: list[Choice | None] = [None] * len(pods)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return out
        for (p, k), var in x.items():
            if not solver.value(var):
                continue
            cand, top, _ = cands[p]
            c = int(top[k])
            n = int(cand.node[c])
            if pods[p].shared:
                out[p] = (n, [int(np.flatnonzero(cand.take[c])[0])])
            elif pods[p].num_gpu:
                out[p] = (n, sorted(g for (pp, kk, g), zv in z.items()
                                    if pp == p and kk == k and solver.value(zv)))
            else:
                out[p] = (n, [])
        return out
