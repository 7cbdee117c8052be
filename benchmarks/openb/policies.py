"""Online placement policies: one pod against the current `ClusterState`, vectorised.

Every policy scores all candidate placements of one pod at once: a candidate is a node for
CPU-only and whole-GPU pods (whole GPUs go to the node's first fully free GPUs, by index,
as the paper's `AllocateExclusiveGpuId`), and a (node, GPU) pair for a shared pod. The
registry (`registry.POLICIES`) maps a name to a factory taking the workload's typical shapes.

- `random`: a uniformly random feasible node, then a uniformly random fitting GPU on it
  (the paper's Random; before, every (node, GPU) pair was equally likely).
- `bestfit`: the paper's BestFit, `100 (1 - sum_{CPU,GPU} 0.5 (free - request) / max spec)`
  with the max specs 128 CPUs and 8 GPUs of the trace, truncated to an integer as the
  Kubernetes score is. The node is chosen first (best integer score, then lowest tie
  rank), and only then, inside that node, the fitting GPU with the least free milli
  (lowest index on ties): the scheduler picks a node, its GPU-share plugin a GPU.
- `dotprod`, `gpupacking`, `gpuclustering`: the paper's other baselines, with
  BestFit's GPU choice inside the node (the simulator's default `best`).
- `fgd`: the paper's FGD, `int(100 sigmoid((F_before - F_after) / 1000))` on the node
  fragmentation F of `frag.py`; within a node the best GPU (lowest index on ties).
- `gpuplan`: ours, see `GpuplanPolicy`.
Ties between nodes go to the node of lowest `state.tie_rank`, a random permutation drawn once
per run: the paper's simulator prefixes node names with a random permutation index and its
Kubernetes fork (mental2008/kubernetes v1.20.5-minor, `selectHost`) takes the smallest name
among the best-scoring nodes "for reproducibility"; this fixed preference is what makes ties
pack rather than spread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from benchmarks.openb.frag import TypicalShapes
from benchmarks.openb.loader import MILLI
from benchmarks.openb.state import ClusterState, PodReq

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MAX_SPEC_CPU = 128_000  # the trace's largest node: 128 CPUs
MAX_SPEC_GPU = 8 * MILLI  # and 8 GPUs

Choice = tuple[int, list[int]]
#: a fragmentation function over a batch of node states (cpu_free, gpu_free, model_id)
FragFn = Callable[[IntArray, IntArray, IntArray], FloatArray]


@dataclass
class Candidates:
    """Candidate placements of one pod and the node states they would leave."""

    node: IntArray  # (C,)
    take: BoolArray  # (C, G): GPUs the pod would use
    cpu_after: IntArray  # (C,)
    gpu_after: IntArray  # (C, G)

    def __len__(self) -> int:
        return len(self.node)

    def choice(self, c: int) -> Choice:
        """Candidate `c` as (node id, GPU indices)."""
        return int(self.node[c]), [int(g) for g in np.flatnonzero(self.take[c])]


def candidates(state: ClusterState, pod: PodReq) -> Candidates:
    """Every way to place `pod` now (empty when nothing fits)."""
    nodes = state.feasible(pod)
    free = state.gpu_free[nodes]
    if pod.shared:
        rows, gpus = np.nonzero(state.gpu_fits(pod.milli, free))
        take = np.zeros((len(rows), free.shape[1]), dtype=bool)
        take[np.arange(len(rows)), gpus] = True
        nodes = nodes[rows]
        free = free[rows]
    else:
        whole = state.gpu_fits(MILLI, free)
        take = whole & (np.cumsum(whole, axis=1) <= pod.num_gpu) if pod.num_gpu else (
            np.zeros_like(whole))
    gpu_after = free - np.where(take, pod.milli, 0)
    return Candidates(nodes, take, state.cpu_free[nodes] - pod.cpu, gpu_after)


def pick_max(score: FloatArray | IntArray, cand: Candidates, state: ClusterState) -> int:
    """Index of a best candidate: among the best-scoring nodes the one of lowest tie rank
    (`state.tie_rank`), and on it the first best candidate (lowest GPU index)."""
    best = np.flatnonzero(score == score.max())
    node_rank = state.tie_rank[cand.node[best]]
    return int(best[np.flatnonzero(node_rank == node_rank.min())[0]])


class Policy(Protocol):
    """An online policy: where to put one pod now, or None when it cannot be placed."""

    def choose(self, state: ClusterState, pod: PodReq, rng: np.random.Generator) -> Choice | None:
        ...


class RandomPolicy:
    """The paper's Random: a uniformly random feasible node, then a random fitting GPU on it."""

    def choose(self, state: ClusterState, pod: PodReq, rng: np.random.Generator) -> Choice | None:
        cand = candidates(state, pod)
        if not len(cand):
            return None
        nodes = np.unique(cand.node)
        on_node = np.flatnonzero(cand.node == nodes[int(rng.integers(len(nodes)))])
        return cand.choice(int(on_node[int(rng.integers(len(on_node)))]))


class NodeScorePolicy:
    """A node score, the best node (then lowest tie rank), then the tightest GPU inside it.

    The paper's simulator scores nodes, lets the scheduler pick one, and then its GPU-share
    plugin picks the GPU (`best`: the fitting GPU with the least free milli, lowest index
    on ties; whole GPUs: the first fully free ones). Subclasses give the node score.
    """

    def node_score(self, state: ClusterState, pod: PodReq, cand: Candidates) -> FloatArray:
        """The score of each candidate's node (higher is better)."""
        raise NotImplementedError

    def choose(self, state: ClusterState, pod: PodReq, rng: np.random.Generator) -> Choice | None:
        cand = candidates(state, pod)
        if not len(cand):
            return None
        best = pick_max(self.node_score(state, pod, cand), cand, state)
        if not pod.shared:
            return cand.choice(best)
        # inside the chosen node: the fitting GPU left with the least free milli
        on_node = np.flatnonzero(cand.node == cand.node[best])
        tight = (cand.gpu_after[on_node] * cand.take[on_node]).sum(axis=1)
        return cand.choice(int(on_node[np.argmin(tight)]))


class BestFitPolicy(NodeScorePolicy):
    """The paper's BestFit: `int(100 (1 - sum 0.5 (free - request) / max spec))`."""

    def node_score(self, state: ClusterState, pod: PodReq, cand: Candidates) -> FloatArray:
        gpu_left = np.maximum(state.gpu_free[cand.node], 0).sum(axis=1) - pod.gpu_request
        waste = 0.5 * cand.cpu_after / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
        return np.floor((1.0 - waste) * 100.0)


class DotProdPolicy(NodeScorePolicy):
    """The paper's DotProd baseline (Tetris' alignment), as its runs configure it.

    With the node's free (CPU, GPU milli) and the pod's request (CPU, GPU milli), each
    divided by the max specs (128 CPUs, 8 GPUs), the score is
    `int(100 (1 - (free . request) / 2))`: the node whose free vector aligns least with
    the request wins; BestFit's GPU choice inside it (the runs' `best`, `merge`, `max`).
    """

    def node_score(self, state: ClusterState, pod: PodReq, cand: Candidates) -> FloatArray:
        cpu_left = state.cpu_free[cand.node].astype(np.float64)
        gpu_left = np.maximum(state.gpu_free[cand.node], 0).sum(axis=1).astype(np.float64)
        dot = ((cpu_left / MAX_SPEC_CPU) * (pod.cpu / MAX_SPEC_CPU)
               + (gpu_left / MAX_SPEC_GPU) * (pod.gpu_request / MAX_SPEC_GPU))
        return np.floor(100.0 * (1.0 - dot / 2.0))


class GpuPackingPolicy(NodeScorePolicy):
    """The paper's GpuPacking baseline: shared GPUs first, then used nodes, then empty ones.

    Per node (integer scores, higher first), with the pod's GPUs taken as the fitting
    GPUs of least free milli: a node whose GPUs are all free scores
    `max(33 - #GPUs, #GPUs)`; a used node where the pod needs c fully free GPUs scores
    `max(50 - c, 33)`; else (only already shared GPUs) `max(100 - sum(free % of them) // 10,
    50)`. A CPU-only pod scores 0 everywhere (the tie rank decides).
    """

    def node_score(self, state: ClusterState, pod: PodReq, cand: Candidates) -> FloatArray:
        if pod.num_gpu == 0:
            return np.zeros(len(cand))
        free = state.gpu_free[cand.node]
        num = state.num_gpus[cand.node]
        fully = (free == MILLI).sum(axis=1)
        if pod.shared:
            fit = free >= pod.milli
            tight = np.where(fit, free, MILLI + 1).min(axis=1)
            used_full = (tight == MILLI).astype(np.int64)
            shared = 100 - (tight * 100 // MILLI) // 10
        else:  # whole GPUs only fit on fully free GPUs
            used_full = np.full(len(cand), pod.num_gpu, dtype=np.int64)
            shared = np.zeros(len(cand), dtype=np.int64)
        score = np.where(used_full > 0, np.maximum(50 - used_full, 33), np.maximum(shared, 50))
        empty = fully == num
        return np.where(empty, np.maximum(33 - fully, fully), score).astype(np.float64)


class GpuClusteringPolicy(NodeScorePolicy):
    """The paper's GpuClustering baseline: put GPU pods of one kind together.

    A pod's kind is "shared" or "n whole GPUs"; a node's kinds are those of the GPU pods
    it hosts (this policy records them as it places: a fresh instance per run). Integer
    score `25 (8000 - free GPU milli of the node) // 8000` plus 75 if the node hosts only
    the pod's kind, 50 if that kind among others, 25 if no GPU pod, 0 if only other
    kinds; a CPU-only pod scores 0 everywhere.
    """

    def __init__(self) -> None:
        self.kinds: dict[int, dict[int, int]] = {}  # node -> kind -> pods

    @staticmethod
    def kind(pod: PodReq) -> int:
        """0 for a shared pod, else its number of whole GPUs."""
        return 0 if pod.shared else pod.num_gpu

    def node_score(self, state: ClusterState, pod: PodReq, cand: Candidates) -> FloatArray:
        if pod.num_gpu == 0:
            return np.zeros(len(cand))
        left = np.maximum(state.gpu_free[cand.node], 0).sum(axis=1)
        base = 25 * (MAX_SPEC_GPU - left) // MAX_SPEC_GPU
        mine = self.kind(pod)
        bonus = np.empty(len(cand), dtype=np.int64)
        for c, n in enumerate(cand.node.tolist()):
            kinds = self.kinds.get(n, {})
            if mine in kinds:
                bonus[c] = 75 if len(kinds) == 1 else 50
            else:
                bonus[c] = 25 if not kinds else 0
        return (base + bonus).astype(np.float64)

    def choose(self, state: ClusterState, pod: PodReq, rng: np.random.Generator) -> Choice | None:
        choice = super().choose(state, pod, rng)
        if choice is not None and pod.num_gpu > 0:
            kinds = self.kinds.setdefault(choice[0], {})
            kinds[self.kind(pod)] = kinds.get(self.kind(pod), 0) + 1
        return choice


class FgdPolicy:
    """The paper's FGD: least growth of node fragmentation, integer sigmoid score."""

    #: a score this close to an integer is recomputed with the simulator's float64 order
    BOUNDARY = 1e-7

    def __init__(self, shapes: TypicalShapes) -> None:
        self.shapes = shapes

    def frag_delta(self, frag: FragFn, state: ClusterState, cand: Candidates) -> FloatArray:
        """F_before - F_after of every candidate under the fragmentation function `frag`."""
        nodes, inv = np.unique(cand.node, return_inverse=True)
        before = frag(state.cpu_free[nodes], state.gpu_free[nodes], state.model_id[nodes])[inv]
        after = frag(cand.cpu_after, cand.gpu_after, state.model_id[cand.node])
        return before - after

    def delta(self, state: ClusterState, cand: Candidates) -> FloatArray:
        """F_before - F_after of every candidate (> 0: the placement reduces fragmentation),
        bit for bit as the paper's simulator sums F wherever the integer score depends on it.

        The fast dot product (`TypicalShapes.frag`) and the simulator's class-by-class sum
        (`frag_peer`) differ by a few ulps only, which moves `int(100 sigmoid)` only when the
        score is (nearly) an integer, above all at delta 0 (score 50, or 49 an ulp below).
        Those candidates, and only those, are recomputed with `frag_peer`.
        """
        fast = self.frag_delta(self.shapes.frag, state, cand)
        raw = (1.0 / (1.0 + np.exp(-fast / 1000.0))) * 100.0
        near = np.flatnonzero(np.abs(raw - np.rint(raw)) < self.BOUNDARY)
        if len(near):
            sub = Candidates(cand.node[near], cand.take[near], cand.cpu_after[near],
                             cand.gpu_after[near])
            fast[near] = self.frag_delta(self.shapes.frag_peer, state, sub)
        return fast

    def score(self, state: ClusterState, pod: PodReq, cand: Candidates) -> FloatArray:
        """`int64(sigmoid(delta / 1000) * 100)`, the Kubernetes score FGD returns (the
        simulator's operation order: the sigmoid first, then the product)."""
        return np.floor((1.0 / (1.0 + np.exp(-self.delta(state, cand) / 1000.0))) * 100.0)

    def choose(self, state: ClusterState, pod: PodReq, rng: np.random.Generator) -> Choice | None:
        cand = candidates(state, pod)
        if not len(cand):
            return None
        return cand.choice(pick_max(self.score(state, pod, cand), cand, state))


class GpuplanPolicy(FgdPolicy):
    """gpuplan's rule: FGD's fragmentation plus CPU stranding, near-ties by consolidation.

    - The measure: F_before - F_after (FGD's) plus S_before - S_after, where S is the GPU
      milli a node strands because its CPU runs out first (`TypicalShapes.stranded`, at
      the workload's CPU per GPU milli). At 130% of the GPU request the trace asks ~104%
      of the cluster's CPU, and FGD, which only sees the shapes that stop fitting now,
      leaves ~80 GPUs behind on nodes with no CPU left (seed 42); S counts them in the
      same unit as F (milli), so the two simply add.
    - FGD's integer sigmoid score already treats deltas within ~40 milli as equal and then
      takes a fixed node preference. The delta is bucketed in `band` sigmoid points (about
      `band` x 40 milli near zero), and within the best bucket the fixed node preference
      decides.
    - An earlier version ranked a node already in use above an untouched one inside the
      bucket. On the peer's arrival order that tie-break cost 1.7-1.8 points at 100% on
      `gpuspec33` (typed pods found their models' nodes taken by untyped ones) and was
      neutral on `default`; it is gone (FRAGMENTATION.md, section 4.2).
    """

    band = 2.0

    def delta(self, state: ClusterState, cand: Candidates) -> FloatArray:
        """FGD's delta (one dot product: gpuplan's rule needs no simulator's bits) plus the
        decrease of stranded GPU milli (> 0: the placement helps)."""
        before = self.shapes.stranded(state.cpu_free[cand.node], state.gpu_free[cand.node])
        after = self.shapes.stranded(cand.cpu_after, cand.gpu_after)
        return self.frag_delta(self.shapes.frag, state, cand) + before - after

    def score(self, state: ClusterState, pod: PodReq, cand: Candidates) -> FloatArray:
        sig = 100.0 / (1.0 + np.exp(-self.delta(state, cand) / 1000.0))
        return np.floor(sig / self.band)
