"""Batch plans of OpenB slices are validator-clean; FGD's fragmentation on hand cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.openb.batch import placed_milli, run_batch
from benchmarks.openb.frag import typical_shapes
from benchmarks.openb.loader import OpenbNodes, OpenbPods, load_nodes, load_pods, parse_spec
from solver.validate import validate_plan

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("seed", [42, 43])
def test_batch_plan_is_validator_clean(seed: int) -> None:
    from benchmarks.openb.inflation import inflate

    nodes = load_nodes(DATA / "nodes_slice.csv")
    pods = inflate(load_pods(DATA / "pods_slice.csv"), nodes.capacity_milli, 1.3, seed)
    result = run_batch(nodes, pods, seed, time_limit_s=5.0)
    assert validate_plan(result.request, result.plan) == []
    assert 0 < result.allocation <= 1.0
    assert result.allocation == placed_milli(result.request, result.plan) / nodes.capacity_milli
    assert {a.job for a in result.plan.assignments} | {u.job for u in result.plan.unplaced} == {
        j.name for j in result.request.jobs}


def _one_shape(cpu: int, milli: int, num: int) -> OpenbPods:
    return OpenbPods(["p"], np.array([cpu]), np.array([0]), np.array([num]), np.array([milli]),
                     [()])


def test_fragment_counts_free_milli_a_shape_cannot_use() -> None:
    nodes = OpenbNodes(["n"], np.array([8000]), np.array([1]), np.array([2]), ["T4"])
    shapes = typical_shapes(_one_shape(2000, 500, 1), nodes.models)
    model = np.array([0])
    # GPUs with 300 and 1000 free: the 500-milli shape fits; only the 300 are a fragment
    assert shapes.frag(np.array([8000]), np.array([[300, 1000]]), model)[0] == 300
    # too little CPU: every free milli is a fragment
    assert shapes.frag(np.array([1000]), np.array([[300, 1000]]), model)[0] == 1300
    # no GPU with 500 free: all of it
    assert shapes.frag(np.array([8000]), np.array([[300, 400]]), model)[0] == 700


def test_fragment_of_whole_and_cpu_only_shapes() -> None:
    nodes = OpenbNodes(["n"], np.array([8000]), np.array([1]), np.array([2]), ["T4"])
    two = typical_shapes(_one_shape(1000, 1000, 2), nodes.models)
    model = np.array([0])
    assert two.frag(np.array([8000]), np.array([[1000, 1000]]), model)[0] == 0
    assert two.frag(np.array([8000]), np.array([[1000, 900]]), model)[0] == 1900
    cpu_only = typical_shapes(_one_shape(1000, 0, 0), nodes.models)
    # a CPU-only typical pod leaves every free GPU milli unused (the paper's XL/XR cases)
    assert cpu_only.frag(np.array([8000]), np.array([[1000, 900]]), model)[0] == 1900


def test_stranded_counts_gpu_milli_the_free_cpu_cannot_feed() -> None:
    nodes = OpenbNodes(["n"], np.array([8000]), np.array([1]), np.array([2]), ["T4"])
    shapes = typical_shapes(_one_shape(2000, 500, 1), nodes.models)
    assert shapes.cpu_per_milli == 4.0  # 2,000 CPU milli per 500 GPU milli
    # 2,000 CPU milli feed 500 GPU milli: 800 of the 1,300 free are stranded
    assert shapes.stranded(np.array([2000]), np.array([[300, 1000]]))[0] == 800
    assert shapes.stranded(np.array([8000]), np.array([[300, 1000]]))[0] == 0
    assert typical_shapes(_one_shape(1000, 0, 0), nodes.models).stranded(
        np.array([0]), np.array([[1000, 1000]]))[0] == 0  # no GPU pods: no CPU intensity


def test_gpuplan_keeps_cpu_away_from_a_cpu_poor_node_fgd_cannot_tell_apart() -> None:
    from benchmarks.openb.policies import FgdPolicy, GpuplanPolicy
    from benchmarks.openb.state import ClusterState, pod_reqs

    # same model and GPUs; "poor" has 4 CPUs for its 2 GPUs, "rich" 64, and ties go to poor
    nodes = OpenbNodes(["poor", "rich"], np.array([4000, 64000]), np.array([65536, 65536]),
                       np.array([2, 2]), ["T4", "T4"])
    shapes = typical_shapes(_one_shape(2000, 500, 1), nodes.models)  # 4 CPU milli per milli
    cpu_pod = pod_reqs(_one_shape(2000, 0, 0), nodes.models)[0]
    rng = np.random.default_rng(0)
    for policy, expected in ((FgdPolicy(shapes), 0), (GpuplanPolicy(shapes), 1)):
        state = ClusterState(nodes, tie_rank=np.array([0, 1]))
        # on "poor", the 500-milli shape still fits afterwards (FGD sees no change), but the
        # 2 CPUs left can only feed 500 of its 2,000 free GPU milli
        assert policy.choose(state, cpu_pod, rng) == (expected, [])


def test_typical_shapes_key_the_spec_text_and_put_larger_shapes_first_on_ties() -> None:
    # three shapes of 4 pods each and one of 1 pod
    names = [f"p{i}" for i in range(13)]
    cpu = [1000] * 4 + [2000] * 4 + [2000] * 4 + [500]
    spec_text = ["T4"] * 4 + ["V100M16|V100M32"] * 4 + ["V100M16|V100M32|V100M32"] * 4 + [""]
    pods = OpenbPods(names, np.array(cpu), np.array([1] * 13), np.array([1] * 13),
                     np.array([500] * 13), [parse_spec(t) for t in spec_text], spec_text)
    models = ["T4", "V100M16", "V100M32"]
    shapes = typical_shapes(pods, models)  # 95% of 13: all four shapes
    # the two V100 spellings stay two shapes, both allowing the same models
    assert len(shapes) == 4
    assert shapes.allowed[:2].tolist() == [[False, True, True], [False, True, True]]
    # equal counts: larger CPU first, then the larger spec text (the simulator's order)
    assert shapes.cpu.tolist() == [2000, 2000, 1000, 500]
    # 60% of 13 pods takes two of the three tied shapes: the larger two, not T4's
    two = typical_shapes(pods, models, coverage=0.6)
    assert two.cpu.tolist() == [2000, 2000]
    assert two.weight.tolist() == [0.5, 0.5]
