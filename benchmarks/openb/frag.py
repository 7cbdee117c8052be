"""FGD's node fragmentation against the "typical pods" of a workload, vectorised.

Definitions (Weng et al., "Beware of Fragmentation", ATC'23, section 3, as implemented in
hkust-adsl/kubernetes-scheduler-simulator `pkg/utils/frag.go`):

- typical pods: the distinct shapes (CPU milli, GPU milli per GPU, #GPUs, GPU type spec as
  the trace writes it) of the ORIGINAL pods, CPU-only pods included, sorted by frequency
  (equal frequencies: the larger shape first, comparing CPU, GPU milli, #GPUs, then the
  spec text, as the simulator's reversed sort does) and taken until they cover 95% of the
  pods; their frequencies renormalised to sum to 1 (weights w_t). The spec is keyed on
  its text: `V100M16|V100M32|V100M32` and `V100M16|V100M32` are two shapes there;
- the fragment of node n for shape t, F_t(n) = all free GPU milli of n when t cannot run
  on n (type not allowed, too little free CPU, fewer than #GPUs GPUs with >= its milli free,
  or t asks no GPU at all), else the free milli of the GPUs that have less free than t
  needs per GPU;
- node fragmentation F(n) = sum_t w_t F_t(n); cluster fragmentation = sum_n F(n).
  FGD places each pod where F grows least.

gpuplan's rule adds a second measure that FGD lacks, `TypicalShapes.stranded`: the free GPU
milli a node cannot sell because its free CPU will run out first, at the workload's own CPU
intensity (CPU milli the original GPU pods request per GPU milli, `cpu_per_milli`):
`max(0, free GPU milli - free CPU milli / cpu_per_milli)`. F only sees the shapes that no
longer fit today; a node whose CPU is drained faster than its GPUs strands GPUs tomorrow.

`TypicalShapes.frag(cpu_free, gpu_free, model_id)` evaluates F for a batch of (real or
hypothetical) node states at once, as one dot product (gpuplan's rule uses it).
`TypicalShapes.frag_peer` evaluates the same F bit for bit as the paper's simulator does, for
the `fgd` baseline: FGD's integer score `int(100 sigmoid(delta / 1000))` sits exactly on a
boundary when a placement leaves F unchanged (delta 0 gives 50, the smallest negative
rounding error 49), so the last bit of F decides between nodes. The simulator's float64
order is:

- the weights are `(count / N) / (covered / N)` (N = all original pods, covered = the pods
  of the typical shapes), not `count / covered`;
- F is not one sum: each shape's amount `w_t x milli` goes to one of seven *fragment
  classes* (lack of both CPU and GPU, lack of GPU, satisfied, lack of CPU, CPU-only shape
  satisfied, CPU-only shape lacking CPU, GPU type not allowed; a satisfied shape puts the
  milli of its too-small GPUs into "lack of GPU" and the rest into "satisfied"); each class
  adds its amounts in shape order, and F adds the classes in that order, "satisfied" left
  out. A CPU-only pod that moves a shape from "lack of GPU" to "lack of both" leaves F
  unchanged in exact arithmetic, yet changes its float64 value by an ulp or so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from benchmarks.openb.loader import OpenbPods, parse_spec

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: share of the original pods the typical shapes cover (the paper's popularity threshold).
COVERAGE = 0.95


@dataclass(frozen=True)
class TypicalShapes:
    """Typical pod shapes as arrays over shapes t (GPU shapes have num > 0)."""

    cpu: IntArray
    milli: IntArray
    num: IntArray
    allowed: BoolArray  # (shapes, models)
    weight: FloatArray
    levels: IntArray  # distinct per-GPU milli of the GPU shapes
    level_of: IntArray  # shape -> index into levels (0 for CPU-only shapes)
    #: CPU milli the workload's GPU pods request per GPU milli (0: no GPU pods)
    cpu_per_milli: float = 0.0
    #: the weights as the paper's simulator rounds them (`frag_peer`); default `weight`
    weight_peer: FloatArray | None = None

    def __len__(self) -> int:
        return len(self.cpu)

    def frag(self, cpu_free: IntArray, gpu_free: IntArray, model_id: IntArray) -> FloatArray:
        """F(n) for a batch of node states: cpu_free (S,), gpu_free (S, G), model_id (S,)."""
        free = np.maximum(gpu_free, 0)
        total = free.sum(axis=1).astype(np.float64)
        g = gpu_free[:, :, None]
        lv = self.levels[None, None, :]
        ge = (g >= lv).sum(axis=1)  # (S, L) GPUs with at least that level free
        lt = np.where(g < lv, free[:, :, None], 0).sum(axis=1)  # (S, L) free milli below it
        fits = (
            self.allowed[:, model_id].T
            & (cpu_free[:, None] >= self.cpu[None, :])
            & (ge[:, self.level_of] >= self.num[None, :])
            & (self.num[None, :] > 0)
        )
        per_shape = np.where(fits, lt[:, self.level_of], total[:, None])
        return per_shape @ self.weight

    def frag_peer(self, cpu_free: IntArray, gpu_free: IntArray, model_id: IntArray) -> FloatArray:
        """F(n) as the paper's simulator computes it in float64 (module docstring): per
        fragment class, the amounts added in shape order; then the classes in their order."""
        free = np.maximum(gpu_free, 0)
        total = free.sum(axis=1).astype(np.float64)[:, None]
        g = gpu_free[:, :, None]
        lv = self.levels[None, None, :]
        ge = (g >= lv).sum(axis=1)
        lt = np.where(g < lv, free[:, :, None], 0).sum(axis=1)[:, self.level_of]
        w = self.weight if self.weight_peer is None else self.weight_peer
        gpu_shape = np.broadcast_to(self.num[None, :] > 0, (len(total), len(self)))
        access = self.allowed[:, model_id].T | ~gpu_shape  # CPU-only shapes skip the type test
        gpu_ok = ge[:, self.level_of] >= self.num[None, :]
        cpu_ok = cpu_free[:, None] >= self.cpu[None, :]
        typed = gpu_shape & access
        satisfied = typed & gpu_ok & cpu_ok
        classes = [  # (shapes in the class, their amount) in the simulator's class order
            (typed & ~gpu_ok & ~cpu_ok, total),  # lack both
            (typed & ~gpu_ok & cpu_ok, total),  # lack GPU (satisfied ones add below)
            (typed & gpu_ok & ~cpu_ok, total),  # lack CPU
            (~gpu_shape & cpu_ok, total),  # CPU-only shape, satisfied
            (~gpu_shape & ~cpu_ok, total),  # CPU-only shape, lacking CPU
            (gpu_shape & ~access, total),  # GPU type not allowed
        ]
        out = np.zeros(len(total))
        for k, (member, amount) in enumerate(classes):
            part = np.where(member, w[None, :] * amount, 0.0)
            if k == 1:
                part = np.where(satisfied, w[None, :] * lt, part)
            # add.accumulate adds left to right, as the simulator's loop over shapes
            out = out + np.add.accumulate(part, axis=1)[:, -1]
        return out

    def stranded(self, cpu_free: IntArray, gpu_free: IntArray) -> FloatArray:
        """Free GPU milli beyond what the free CPU can feed at the workload's CPU intensity,
        for a batch of node states: cpu_free (S,), gpu_free (S, G)."""
        free = np.maximum(gpu_free, 0).sum(axis=1).astype(np.float64)
        if self.cpu_per_milli <= 0:
            return np.zeros_like(free)
        return np.maximum(0.0, free - cpu_free / self.cpu_per_milli)


def typical_shapes(pods: OpenbPods, models: list[str], coverage: float = COVERAGE) -> TypicalShapes:
    """The typical shapes of `pods` (the original workload) against `models`."""
    keys = [
        (int(pods.cpu_milli[i]), int(pods.gpu_milli[i]), int(pods.num_gpu[i]), pods.spec_label(i))
        for i in range(len(pods))
    ]
    counts = Counter(keys)
    # most frequent first; equal counts: the larger shape first (the simulator sorts its
    # list with `sort.Reverse` of "fewer pods, then smaller shape")
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, c in ranked:
        if covered >= coverage * len(pods):
            break
        chosen.append((key, c))
        covered += c
    weight = np.array([c for _, c in chosen], dtype=np.float64) / covered
    n_pods = float(len(pods))
    weight_peer = (np.array([c for _, c in chosen], dtype=np.float64) / n_pods) / (covered / n_pods)
    cpu = np.array([k[0] for k, _ in chosen], dtype=np.int64)
    milli = np.array([k[1] for k, _ in chosen], dtype=np.int64)
    num = np.array([k[2] for k, _ in chosen], dtype=np.int64)
    allowed = np.array([[not k[3] or m in parse_spec(k[3]) for m in models] for k, _ in chosen],
                       dtype=bool)
    gpu_levels = sorted({int(m) for m, n in zip(milli, num, strict=True) if n > 0}) or [1]
    levels = np.array(gpu_levels, dtype=np.int64)
    level_of = np.array([gpu_levels.index(int(m)) if n > 0 else 0
                         for m, n in zip(milli, num, strict=True)], dtype=np.int64)
    gpu_pods = pods.num_gpu > 0
    gpu_milli = int((pods.gpu_milli[gpu_pods] * pods.num_gpu[gpu_pods]).sum())
    cpu_per_milli = float(pods.cpu_milli[gpu_pods].sum()) / gpu_milli if gpu_milli else 0.0
    return TypicalShapes(cpu, milli, num, allowed, weight, levels, level_of, cpu_per_milli,
                         weight_peer)
