"""BestFit ties on two hand-made nodes: node by score, then tie rank, then its tightest GPU."""

from __future__ import annotations

import numpy as np

from benchmarks.openb.loader import OpenbNodes
from benchmarks.openb.policies import (
    BestFitPolicy,
    DotProdPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
)
from benchmarks.openb.state import ClusterState, PodReq

ANY = np.ones(1, dtype=bool)


def _pod(name: str, milli: int, cpu: int = 1000) -> PodReq:
    return PodReq(name, cpu, 1, 1, milli, ANY)


def _state(tie_rank: list[int]) -> ClusterState:
    nodes = OpenbNodes(["n0", "n1"], np.array([32000, 32000]), np.array([10**6, 10**6]),
                       np.array([2, 2]), ["T4", "T4"])
    state = ClusterState(nodes, tie_rank=np.array(tie_rank))
    # n0 free [900, 700], n1 free [1000, 600]: the same totals, CPU and so the same score
    state.place(0, [0], _pod("f0", 100, cpu=500))
    state.place(0, [1], _pod("f1", 300, cpu=500))
    state.place(1, [1], _pod("f2", 400, cpu=1000))
    return state


def test_scores_tie_and_the_node_of_lower_rank_wins_before_the_tightest_gpu() -> None:
    pod = _pod("p", 500)
    # the tightest GPU of the cluster is n1's GPU 1 (600 -> 100); n0 ranks first, so the
    # pod goes to n0, on n0's tightest GPU (700 -> 200), not on n1
    assert BestFitPolicy().choose(_state([0, 1]), pod, np.random.default_rng(0)) == (0, [1])
    # with the ranks swapped the same rule picks n1 and its tightest GPU
    assert BestFitPolicy().choose(_state([1, 0]), pod, np.random.default_rng(0)) == (1, [1])


def test_a_better_integer_score_beats_the_tie_rank() -> None:
    state = _state([0, 1])
    state.place(1, [0], _pod("g", 900, cpu=8000))  # n1: 1700 milli used, 9000 CPU milli
    # n1 leaves far less free after the pod: a higher BestFit score despite rank 1
    assert BestFitPolicy().choose(state, _pod("p", 100), np.random.default_rng(0)) == (1, [0])


def test_equal_gpus_inside_the_node_go_to_the_lowest_index() -> None:
    nodes = OpenbNodes(["n0"], np.array([32000]), np.array([10**6]), np.array([4]), ["T4"])
    state = ClusterState(nodes)
    state.place(0, [0], _pod("a", 200))
    state.place(0, [2], _pod("b", 400))
    state.place(0, [3], _pod("c", 400))
    # free [800, 1000, 600, 600]: GPUs 2 and 3 are the tightest fit for 300; 2 wins
    assert BestFitPolicy().choose(state, _pod("p", 300), np.random.default_rng(0)) == (0, [2])


def test_gpupacking_prefers_shared_gpus_then_used_nodes_then_empty_ones() -> None:
    nodes = OpenbNodes(["n0", "n1", "n2"], np.array([32000] * 3), np.array([10**6] * 3),
                       np.array([2, 2, 2]), ["T4"] * 3)
    state = ClusterState(nodes)
    state.place(1, [0], _pod("a", 400))   # n1 free [600, 1000]
    state.place(2, [1], _pod("b", 900))   # n2 free [1000, 100]
    policy = GpuPackingPolicy()
    rng = np.random.default_rng(0)
    # shared 300: n1's GPU 0 (600 free) scores 100 - 60 // 10 = 94; n2 would need its
    # fully free GPU (49) and n0 is empty (31)
    assert policy.choose(state, _pod("s", 300), rng) == (1, [0])
    # one whole GPU: used nodes n1 and n2 tie at 49 above empty n0 (31); n1 ranks first
    whole = PodReq("w", 1000, 1, 1, 1000, ANY)
    assert policy.choose(state, whole, rng) == (1, [1])
    # a CPU-only pod scores 0 everywhere: the tie rank decides
    assert policy.choose(state, PodReq("c", 1000, 1, 0, 0, ANY), rng) == (0, [])


def test_gpuclustering_puts_pods_of_one_kind_together() -> None:
    nodes = OpenbNodes(["n0", "n1", "n2"], np.array([32000] * 3), np.array([10**6] * 3),
                       np.array([4, 4, 4]), ["T4"] * 3)
    state = ClusterState(nodes, tie_rank=np.array([2, 1, 0]))  # n2 first on ties
    policy = GpuClusteringPolicy()
    rng = np.random.default_rng(0)

    def place(pod: PodReq) -> tuple[int, list[int]]:
        choice = policy.choose(state, pod, rng)
        assert choice is not None
        state.place(*choice, pod)
        return choice

    # score: 25 (8000 - free milli) // 8000 + 75 / 50 / 25 / 0 (see the policy)
    # empty cluster: every node scores 25 + 12; the tie rank picks n2
    assert place(_pod("s1", 500)) == (2, [0])
    # a whole-GPU pod: n2 hosts only shared pods (0 + 14), the empty nodes score 37;
    # n1 ranks before n0
    assert place(PodReq("w1", 1000, 1, 1, 1000, ANY)) == (1, [0])
    # another shared pod joins n2 (75 + 14 = 89), on its tightest GPU
    assert place(_pod("s2", 300)) == (2, [0])
    # a 2-GPU pod: n1 hosts a 1-GPU pod (another kind: 0 + 15), n0 is empty (37)
    assert place(PodReq("w2", 1000, 1, 2, 1000, ANY)) == (0, [0, 1])


def test_dotprod_prefers_the_node_least_aligned_with_the_request() -> None:
    nodes = OpenbNodes(["n0", "n1"], np.array([64000, 64000]), np.array([10**6] * 2),
                       np.array([2, 2]), ["T4"] * 2)
    state = ClusterState(nodes)
    state.place(1, [], PodReq("cpu", 48000, 1, 0, 0, ANY))  # n1: 16 CPUs free
    pod = PodReq("w", 8000, 1, 1, 1000, ANY)
    # n0: (64/128)(8/128) + (2/8)(1/8) = 0.0625 -> int(100 (1 - 0.03125)) = 96
    # n1: (16/128)(8/128) + (2/8)(1/8) = 0.0390625 -> int(98.05) = 98: n1 despite rank
    assert DotProdPolicy().choose(state, pod, np.random.default_rng(0)) == (1, [0])
