"""The online loop never oversubscribes a GPU or a host, whatever the policy (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.openb.frag import typical_shapes
from benchmarks.openb.loader import MILLI, OpenbNodes, OpenbPods
from benchmarks.openb.online import run_online
from benchmarks.openb.registry import POLICIES
from benchmarks.openb.state import ClusterState, pod_reqs

MODELS = ["G2", "T4", "V100M16"]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[OpenbNodes, OpenbPods]:
    n = draw(st.integers(1, 5))
    nodes = OpenbNodes(
        names=[f"n{i}" for i in range(n)],
        cpu_milli=np.array(draw(st.lists(st.sampled_from([8000, 16000, 32000]), min_size=n,
                                         max_size=n)), dtype=np.int64),
        memory_mib=np.array(draw(st.lists(st.sampled_from([16384, 65536]), min_size=n,
                                          max_size=n)), dtype=np.int64),
        num_gpus=np.array(draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=n, max_size=n)),
                          dtype=np.int64),
        model=draw(st.lists(st.sampled_from(MODELS), min_size=n, max_size=n)),
    )
    k = draw(st.integers(1, 40))
    kinds = draw(st.lists(st.sampled_from(["cpu", "share", "whole"]), min_size=k, max_size=k))
    num, milli = [], []
    for kind in kinds:
        if kind == "cpu":
            num.append(0)
            milli.append(0)
        elif kind == "share":
            num.append(1)
            milli.append(draw(st.sampled_from([160, 250, 460, 500, 810])))
        else:
            num.append(draw(st.sampled_from([1, 2, 4, 8])))
            milli.append(MILLI)
    specs = draw(st.lists(st.sampled_from([(), ("G2",), ("T4", "V100M16")]), min_size=k,
                          max_size=k))
    pods = OpenbPods(
        names=[f"p{i}" for i in range(k)],
        cpu_milli=np.array(draw(st.lists(st.sampled_from([1000, 4000, 8000]), min_size=k,
                                         max_size=k)), dtype=np.int64),
        memory_mib=np.array(draw(st.lists(st.sampled_from([0, 4096, 30000]), min_size=k,
                                          max_size=k)), dtype=np.int64),
        num_gpu=np.array(num, dtype=np.int64),
        gpu_milli=np.array(milli, dtype=np.int64),
        gpu_spec=specs,
    )
    return nodes, pods


@settings(max_examples=25, deadline=None)
@given(case=clusters(), policy=st.sampled_from(sorted(POLICIES)), seed=st.integers(0, 99))
def test_online_loop_never_oversubscribes(case: tuple[OpenbNodes, OpenbPods], policy: str,
                                          seed: int) -> None:
    nodes, pods = case
    shapes = typical_shapes(pods, nodes.models)
    result, _ = run_online(policy, POLICIES[policy](shapes), nodes, pods, seed,
                           keep_placements=True)
    # recompute every resource from the placements alone
    fresh = ClusterState(nodes)
    reqs = {r.name: r for r in pod_reqs(pods, fresh.models)}
    cpu = np.zeros(len(nodes), dtype=np.int64)
    mem = np.zeros(len(nodes), dtype=np.int64)
    gpu = np.zeros((len(nodes), int(nodes.num_gpus.max())), dtype=np.int64)
    used = 0
    for name, (node, gpus) in result.placements.items():
        pod = reqs[name]
        assert pod.allowed[fresh.model_id[node]]
        assert len(set(gpus)) == len(gpus) == pod.num_gpu
        cpu[node] += pod.cpu
        mem[node] += pod.mem
        for g in gpus:
            assert g < nodes.num_gpus[node]
            gpu[node, g] += pod.milli
        used += pod.gpu_request
    assert (cpu <= nodes.cpu_milli).all()
    assert (mem <= nodes.memory_mib).all()
    assert (gpu <= MILLI).all()
    assert result.failed == len(pods) - len(result.placements)
    assert result.y[-1] == used / nodes.capacity_milli
    assert (np.diff(result.x) >= 0).all()
    assert result.x[-1] == pods.total_gpu_milli.sum() / nodes.capacity_milli


@settings(max_examples=20, deadline=None)
@given(case=clusters(), seed=st.integers(0, 99))
def test_single_pod_policies_fail_only_when_nothing_fits(case: tuple[OpenbNodes, OpenbPods],
                                                         seed: int) -> None:
    nodes, pods = case
    shapes = typical_shapes(pods, nodes.models)
    for name in ("bestfit", "fgd", "gpuplan"):
        policy = POLICIES[name](shapes)
        state = ClusterState(nodes)
        rng = np.random.default_rng(seed)
        for pod in pod_reqs(pods, state.models):
            choice = policy.choose(state, pod, rng)
            assert (choice is None) == (len(state.feasible(pod)) == 0)
            if choice is not None:
                state.place(*choice, pod)
