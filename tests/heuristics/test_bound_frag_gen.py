"""upper_bound, fragmentation and the generator."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.generator import SIZES, generate, generate_custom
from benchmarks.naive_cpsat import solve_naive
from heuristics.fragmentation import fragmentation
from heuristics.greedy import plan_greedy
from heuristics.portfolio import plan_heuristic
from heuristics.result import HeuristicResult
from models import Placement, PlanRequest
from models.objective import evaluate
from solver.bound import upper_bound
from tests.heuristics.helpers import node, request, violations
from tests.solver.brute import brute_force
from tests.solver.strategies import random_request


def _with(req: PlanRequest, **policy: object) -> PlanRequest:
    return req.model_copy(update={"policy": req.policy.model_copy(update=policy)})


# ------------------------------------------------------------------ generator
def test_generator_is_deterministic_and_sized() -> None:
    a, b = generate("S", 3), generate("S", 3)
    assert a.model_dump() == b.model_dump()
    assert generate("S", 4).model_dump() != a.model_dump()
    gpus, jobs = SIZES["M"]
    m = generate("M", 1)
    assert sum(len(n.gpus) for n in m.cluster.nodes) == gpus and len(m.jobs) == jobs
    running = [j for j in m.jobs if j.current]
    assert 0.25 * jobs < len(running) <= jobs / 2
    mig = sum(g.mig_enabled for n in m.cluster.nodes for g in n.gpus)
    assert 0.05 * gpus < mig < 0.35 * gpus
    # the current state is itself a valid plan
    current = HeuristicResult(placements={j.name: list(j.current or []) for j in running})
    assert violations(m, current) == []


# ------------------------------------------------------------------ bound
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(4, 16), st.integers(1, 8), st.integers(0, 1000),
       st.sampled_from(("throughput", "jct", "fairness", "makespan")))
def test_bound_dominates_exact_and_heuristic(gpus: int, jobs: int, seed: int,
                                             objective: str) -> None:
    req = _with(generate_custom(gpus, jobs, seed), objective=objective)
    bound = upper_bound(req)
    assert bound is not None
    heur = plan_heuristic(req, deadline=time.monotonic() + 0.2, seed=seed)
    assert evaluate(req, heur.placements).objective_value <= bound + 1e-6
    if objective != "fairness":  # the naive model solves throughput-like objectives
        exact = solve_naive(req, 5.0)
        assert exact is not None
        assert evaluate(req, exact.placements).objective_value <= bound + 1e-6


def test_bound_is_tight_on_a_trivial_instance() -> None:
    req = request([node("a", "A100-SXM4-80GB", 2)],
                  [{"name": "x", "gpus": 1}, {"name": "y", "gpus": 1, "weight": 2},
                   {"name": "z", "gpus": 1, "weight": 3}])
    assert upper_bound(req) == pytest.approx(5.0, rel=3e-3)  # within the 0.2% grid


def test_bound_counts_same_domain_gangs_on_nodes_without_a_domain() -> None:
    """A node without a topology domain is a domain of its own: a same-domain gang that
    fits on it counts in the bound (the bound once left it out and fell below the optimum)."""
    req = request([node("a", "V100-32GB", 4), node("b", "V100-32GB", 2)],
                  [{"name": "g", "gpus": 4, "single_node": False, "same_domain": True}])
    res = plan_greedy(req)
    assert set(res.placements) == {"g"}
    bound = upper_bound(req)
    assert bound is not None
    assert bound >= evaluate(req, res.placements).objective_value - 1e-9


def test_bound_leaves_unusable_gpus_to_the_running_job_on_them() -> None:
    """A GPU of a cordoned node that a running job holds counts in its pool, but only
    that job, kept there, may use it: the bound no longer hands it to a new job (the old
    bound here was 5: x and y placed, r preempted)."""
    req = request([node("a", "A100-SXM4-80GB", 2, schedulable=False),
                   node("b", "A100-SXM4-80GB", 1)],
                  [{"name": "r", "gpus": 1, "current": [{"node": "a", "gpu": 0}]},
                   {"name": "x", "gpus": 1, "weight": 3},
                   {"name": "y", "gpus": 1, "weight": 3}])
    best = plan_greedy(req)
    assert evaluate(req, best.placements).objective_value == pytest.approx(4.0)
    assert upper_bound(req) == pytest.approx(4.0, rel=1e-4)  # the 1e-5 grid


def test_bound_fits_same_domain_gangs_into_domains() -> None:
    """Three same-domain 2-GPU gangs and two domains of 3 GPUs each: only one gang fits
    a domain, so two are placed; the pooled 6 GPUs once let the bound count three."""
    nodes = [node(n, "A100-SXM4-80GB", k, topology_domain=d)
             for n, k, d in (("a", 1, "d1"), ("b", 2, "d1"), ("c", 2, "d2"), ("e", 1, "d2"))]
    gangs = [{"name": f"g{i}", "gpus": 2, "single_node": False, "same_domain": True}
             for i in range(3)]
    req = request(nodes, gangs)
    best = plan_greedy(req)
    assert len(best.placements) == 2 and violations(req, best) == []
    assert upper_bound(req) == pytest.approx(evaluate(req, best.placements).objective_value,
                                             rel=1e-4)


def test_bound_keeps_a_fixed_same_domain_gang_out_of_the_domain_rows() -> None:
    """A non-preemptible running same-domain gang holds its domain's GPUs, which the domain
    rows do not count: it must not take a place in them too (the bound would fall below
    the plan that keeps it and places the new gang in the other domain)."""
    nodes = [node(n, "A100-SXM4-80GB", 2, topology_domain=d)
             for n, d in (("a", "d1"), ("b", "d1"), ("c", "d2"), ("e", "d2"))]
    running = [{"node": n, "gpu": i} for n in ("a", "b") for i in range(2)]
    req = request(nodes, [
        {"name": "r", "gpus": 4, "single_node": False, "same_domain": True,
         "preemptible": False, "current": running},
        {"name": "g", "gpus": 4, "single_node": False, "same_domain": True}])
    best = plan_greedy(req)
    assert set(best.placements) == {"r", "g"} and violations(req, best) == []
    bound = upper_bound(req)
    assert bound is not None
    assert bound >= evaluate(req, best.placements).objective_value - 1e-6


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_bound_dominates_brute_force_with_every_v1_feature(seed: int) -> None:
    """On random tiny requests (unhealthy GPUs and cordoned nodes under running jobs,
    same-domain gangs, MIG, shares), the bound is at least the brute-forced optimum."""
    req = random_request(random.Random(seed), max_gpus=6, max_jobs=5, max_nodes=3)
    ref = brute_force(req)
    if ref is None or req.policy.objective == "fairness":
        return
    bound = upper_bound(req, time_limit_s=5.0)
    assert bound is not None and bound >= ref[0] - 1e-6


def test_bound_counts_preemption_costs() -> None:
    req = request([node("a", "A100-SXM4-80GB", 1)],
                  [{"name": "run", "gpus": 1, "current": [{"node": "a", "gpu": 0}]},
                   {"name": "new", "gpus": 1, "weight": 1.2}], preemption_cost=1.0)
    # keep `run` (1.0) beats placing `new` (1.2 - 1.0 preemption)
    assert upper_bound(req) == pytest.approx(1.0, rel=3e-3)


# ------------------------------------------------------------------ fragmentation
def _gang_request(gang_sizes: list[int]) -> PlanRequest:
    jobs = [{"name": "busy", "gpus": 5}] + [
        {"name": f"t{i}", "gpus": k} for i, k in enumerate(gang_sizes)]
    return request([node("a", "A100-SXM4-80GB", 8)], jobs)


def _busy() -> dict[str, list[Placement]]:
    return {"busy": [Placement(node="a", gpu=i) for i in range(5)]}


def test_fragmentation_hand_checked() -> None:
    # typical jobs: 1 x 5-GPU (the busy one), then the others; 3 GPUs stay free
    assert fragmentation(_gang_request([1, 1]), _busy()) == pytest.approx(1 / 3)
    assert fragmentation(_gang_request([4, 4]), _busy()) == pytest.approx(1.0)
    assert fragmentation(_gang_request([1, 4]), _busy()) == pytest.approx(2 / 3)
    # an empty cluster is free for every shape that fits a node
    assert fragmentation(_gang_request([1, 4]), {}) == pytest.approx(0.0)
    # a shared GPU at 0.7: 0.3 left, unusable for a 0.5 share, usable for a 0.25 one
    shares = request([node("a", "A100-SXM4-80GB", 1)],
                     [{"name": "s", "gpu_share": 0.7}, {"name": "h", "gpu_share": 0.5},
                      {"name": "q", "gpu_share": 0.25}])
    placed = {"s": [Placement(node="a", gpu=0, fraction=0.7)]}
    # classes 0.7, 0.5 (unusable 0.3 each), 0.25 (usable): 0.6 / 0.9
    assert fragmentation(shares, placed) == pytest.approx(2 / 3)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(8, 64), st.integers(1, 60), st.integers(0, 1000))
def test_fragmentation_in_unit_interval(gpus: int, jobs: int, seed: int) -> None:
    req = generate_custom(gpus, jobs, seed)
    f = fragmentation(req, plan_greedy(req).placements)
    assert 0.0 <= f <= 1.0


@pytest.mark.slow
def test_auto_on_l_answers_within_its_limit() -> None:
    from solver import plan

    req = _with(generate("L", 0), time_limit_s=10.0)
    t0 = time.monotonic()
    out = plan(req)
    wall = time.monotonic() - t0
    assert wall <= 10.0 + 0.5
    assert out.best_bound is not None and out.objective_value <= out.best_bound + 1e-6
