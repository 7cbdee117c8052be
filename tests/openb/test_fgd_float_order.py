"""FGD's score decided by the last bit of the fragmentation, as the paper's simulator sums it.

The simulator adds each typical shape's fragment into one of seven classes and then adds
the classes; a CPU-only pod that moves a shape from "lack of GPU" to "lack of both" leaves
F unchanged in exact arithmetic but not in float64, and FGD's integer sigmoid score turns
that ulp into 49 instead of 50. `TypicalShapes.frag_peer` must reproduce those bits.
"""

from __future__ import annotations

import numpy as np

from benchmarks.openb.frag import FloatArray, TypicalShapes, typical_shapes
from benchmarks.openb.loader import OpenbNodes, OpenbPods
from benchmarks.openb.policies import Candidates, FgdPolicy, candidates
from benchmarks.openb.state import ClusterState, PodReq

# (CPU milli, GPU milli per GPU, #GPUs) x count: found by a search for a node state whose
# fragmentation, summed class by class, moves by an ulp when a CPU-only pod arrives
SHAPES = [((1000, 1000, 2), 2), ((3000, 700, 1), 7), ((6000, 1000, 2), 4)]
FREE = [500, 900, 800, 300, 1000, 300, 600, 0]  # GPU milli free on each of 8 GPUs


def _pods(shapes: list[tuple[tuple[int, int, int], int]]) -> OpenbPods:
    rows = [s for s, count in shapes for _ in range(count)]
    return OpenbPods([f"p{i}" for i in range(len(rows))], np.array([r[0] for r in rows]),
                     np.ones(len(rows), dtype=np.int64), np.array([r[2] for r in rows]),
                     np.array([r[1] for r in rows]), [() for _ in rows])


def _reference(ts: TypicalShapes, cpu_free: int, gpu_free: list[int]) -> float:
    """The simulator's order written out plainly: one float per class, shapes in order."""
    weights = ts.weight if ts.weight_peer is None else ts.weight_peer
    classes = {"both": 0.0, "gpu": 0.0, "ok": 0.0, "cpu": 0.0, "xl": 0.0, "xr": 0.0}
    total = float(sum(max(g, 0) for g in gpu_free))
    for t in range(len(ts)):
        w = float(weights[t])
        cpu_ok = cpu_free >= ts.cpu[t]
        if ts.num[t] == 0:
            classes["xl" if cpu_ok else "xr"] += w * total
            continue
        gpu_ok = sum(g >= ts.milli[t] for g in gpu_free) >= ts.num[t]
        if gpu_ok and cpu_ok:
            small = float(sum(g for g in gpu_free if 0 <= g < ts.milli[t]))
            classes["gpu"] += w * small
            classes["ok"] += w * (total - small)
        else:
            key = "cpu" if gpu_ok else ("gpu" if cpu_ok else "both")
            classes[key] += w * total
    out = 0.0
    for key in ("both", "gpu", "cpu", "xl", "xr"):  # "satisfied" left out
        out += classes[key]
    return out


def test_frag_peer_matches_the_class_by_class_sum_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    ts = typical_shapes(_pods([((3000, 300, 1), 5), ((1000, 0, 0), 3), ((6000, 1000, 2), 4),
                               ((2000, 700, 1), 7), ((4000, 1000, 1), 2)]), ["T4"])
    cpu = rng.integers(0, 9, size=200) * 1000
    gpus = rng.integers(0, 11, size=(200, 4)) * 100
    gpus[:20, 3] = -1  # three-GPU nodes (padded slot)
    got = ts.frag_peer(cpu, gpus, np.zeros(200, dtype=np.int64))
    for i in range(200):
        assert got[i] == _reference(ts, int(cpu[i]), [int(g) for g in gpus[i]])
    # the dot product is the same measure, to rounding
    assert np.allclose(ts.frag(cpu, gpus, np.zeros(200, dtype=np.int64)), got, atol=1e-9)


class _DotProductFgd(FgdPolicy):
    """FGD on the one-dot-product F (the harness before): the same measure, other bits."""

    def delta(self, state: ClusterState, cand: Candidates) -> FloatArray:
        return self.frag_delta(self.shapes.frag, state, cand)


class _PeerEverywhereFgd(FgdPolicy):
    """FGD with the simulator's sum on every candidate (what the boundary check saves)."""

    def delta(self, state: ClusterState, cand: Candidates) -> FloatArray:
        return self.frag_delta(self.shapes.frag_peer, state, cand)


def _two_nodes() -> ClusterState:
    # n0 (preferred on ties): 8 CPUs; n1: 64 CPUs; both with the GPUs of FREE
    nodes = OpenbNodes(["n0", "n1"], np.array([8000, 64000]), np.array([10**6, 10**6]),
                       np.array([8, 8]), ["T4", "T4"])
    state = ClusterState(nodes, tie_rank=np.array([0, 1]))
    any_model = np.ones(1, dtype=bool)
    for node in (0, 1):
        for g, free in enumerate(FREE):
            if free < 1000:
                state.place(node, [g], PodReq(f"f{node}{g}", 0, 1, 1, 1000 - free, any_model))
    return state


def test_an_ulp_of_fragmentation_sends_a_cpu_only_pod_to_the_other_node() -> None:
    ts = typical_shapes(_pods(SHAPES), ["T4"])
    state = _two_nodes()
    pod = PodReq("cpu-only", 4000, 1, 0, 0, np.ones(1, dtype=bool))
    # on n0 the 2 x 1000 shape goes from "lack of GPU" to "lack of both" (8 -> 4 CPUs): F is
    # unchanged in exact arithmetic, but the class sums move it by two ulps, below 0
    cpu, gpu, model = state.cpu_free[:1], state.gpu_free[:1], state.model_id[:1]
    delta = ts.frag_peer(cpu, gpu, model)[0] - ts.frag_peer(cpu - 4000, gpu, model)[0]
    assert -1e-12 < delta < 0
    assert ts.frag(cpu, gpu, model)[0] == ts.frag(cpu - 4000, gpu, model)[0]
    # FGD: n0 scores 49, n1 (nothing changes class) 50: the pod goes to n1 as in the
    # simulator; with the single dot product both score 50 and n0 would win the tie
    assert FgdPolicy(ts).choose(state, pod, np.random.default_rng(0)) == (1, [])
    assert _DotProductFgd(ts).choose(state, pod, np.random.default_rng(0)) == (0, [])


def test_boundary_check_gives_the_scores_of_the_simulator_sum_everywhere() -> None:
    ts = typical_shapes(_pods([*SHAPES, ((2000, 0, 0), 3), ((4000, 500, 1), 5)]), ["T4"])
    nodes = OpenbNodes([f"n{i}" for i in range(40)], np.full(40, 12000), np.full(40, 10**6),
                       np.full(40, 8), ["T4"] * 40)
    state = ClusterState(nodes)
    rng = np.random.default_rng(5)
    any_model = np.ones(1, dtype=bool)
    for node in range(40):  # random partial loads, CPU included
        for g in range(8):
            used = int(rng.integers(0, 11)) * 100
            if used:
                state.place(node, [g], PodReq(f"x{node}-{g}", int(rng.integers(0, 2)) * 1000,
                                              1, 1, used, any_model))
    fast, full, dot = FgdPolicy(ts), _PeerEverywhereFgd(ts), _DotProductFgd(ts)
    flipped = 0
    for pod in (PodReq("c", 4000, 1, 0, 0, any_model), PodReq("s", 1000, 1, 1, 300, any_model),
                PodReq("w", 2000, 1, 2, 1000, any_model)):
        cand = candidates(state, pod)
        assert len(cand) > 0
        assert np.array_equal(fast.score(state, pod, cand), full.score(state, pod, cand))
        flipped += int((dot.score(state, pod, cand) != full.score(state, pod, cand)).sum())
    assert flipped > 0  # the case needs the check: the dot product alone scores otherwise
