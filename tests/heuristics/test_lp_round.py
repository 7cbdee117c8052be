"""LP rounding (heuristics/lp_round.py) and the driver's choice of starting plan."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.generator import generate_custom
from heuristics.greedy import Greedy, place_pending, plan_greedy
from heuristics.lp_round import VARIANTS, plan_lp_round
from models import PlanRequest
from models.objective import evaluate
from solver import plan
from solver.bound import relax
from tests.heuristics.helpers import node, request, violations

V100, H100 = "V100-32GB", "H100-SXM5-80GB"


def _heterogeneity_trap() -> PlanRequest:
    """One H100 and one V100. `heavy` (weight 4) barely gains on the H100 (4.4 vs 4.0),
    `fast` (weight 1) triples there (3.0 vs 1.0). Density order by value alone places
    `heavy` first on its best model, the H100, and leaves `fast` the V100: 4.4 + 1.0 =
    5.4. The optimum swaps them: 3.0 + 4.0 = 7.0 (the greedy's model prices find it
    too: heuristics/prices.py)."""
    return request(
        [node("h", H100, 1), node("v", V100, 1)],
        [{"name": "heavy", "gpus": 1, "weight": 4,
          "throughput": {H100: 1.1, V100: 1.0}},
         {"name": "fast", "gpus": 1, "weight": 1,
          "throughput": {H100: 3.0, V100: 1.0}}])


def test_rounding_finds_the_mix_that_density_order_misses() -> None:
    req = _heterogeneity_trap()
    g = Greedy(req)
    unpriced = place_pending(g, g.keep_running(preemptible=False), order=None, seed=None,
                             deadline=None, keep_all=False, priced=False)
    plain = evaluate(req, unpriced.placements).objective_value
    greedy = evaluate(req, plan_greedy(req).placements).objective_value
    rel = relax(req)
    assert rel is not None
    assert rel.targets == {"heavy": V100, "fast": H100}
    rounded = plan_lp_round(req, rel.targets)
    assert violations(req, rounded) == []
    value = evaluate(req, rounded.placements).objective_value
    assert abs(plain - 5.4) < 1e-9
    assert abs(greedy - 7.0) < 1e-9
    assert abs(value - 7.0) < 1e-9
    assert abs(rel.bound - 7.0) < 0.02  # the LP is tight here (0.2% coefficient grid)


def test_heuristic_planner_starts_from_the_better_plan() -> None:
    req = _heterogeneity_trap()
    req.policy.solver = "heuristic"
    result = plan(req)
    assert abs(result.objective_value - 7.0) < 1e-9
    by_job = {a.job: a.placements[0].node for a in result.assignments}
    assert by_job == {"heavy": "v", "fast": "h"}


def test_rounding_keeps_running_jobs_on_their_target_model() -> None:
    """A running job the LP keeps on its model stays where it is (no migration)."""
    req = request(
        [node("a", H100, 2)],
        [{"name": "r", "gpus": 1, "current": [{"node": "a", "gpu": 1}]},
         {"name": "q", "gpus": 1}])
    rel = relax(req)
    assert rel is not None
    res = plan_lp_round(req, rel.targets)
    assert violations(req, res) == []
    assert [(p.node, p.gpu) for p in res.placements["r"]] == [("a", 1)]
    assert [(p.node, p.gpu) for p in res.placements["q"]] == [("a", 0)]


def test_non_preemptible_jobs_stay_whatever_the_targets() -> None:
    req = request(
        [node("a", H100, 1), node("b", V100, 1)],
        [{"name": "pinned", "gpus": 1, "preemptible": False,
          "current": [{"node": "a", "gpu": 0}]},
         {"name": "q", "gpus": 1, "weight": 8}])
    # Targets that ask for the pinned GPU for another job must not move `pinned`.
    res = plan_lp_round(req, {"q": H100})
    assert violations(req, res) == []
    assert [(p.node, p.gpu) for p in res.placements["pinned"]] == [("a", 0)]
    assert res.placements["q"][0].node == "b"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(4, 64), st.integers(1, 60), st.integers(0, 10_000),
       st.sampled_from(("throughput", "jct", "makespan")), st.sampled_from(VARIANTS))
def test_rounded_plans_are_valid_and_below_the_bound(gpus: int, jobs: int, seed: int,
                                                     objective: str, variant: str) -> None:
    req = generate_custom(gpus, jobs, seed)
    req.policy.objective = objective  # type: ignore[assignment]
    rel = relax(req)
    assert rel is not None
    res = plan_lp_round(req, rel.targets, variant=variant)
    assert violations(req, res) == []
    # every job is placed or explained
    assert set(res.placements) | set(res.reasons) == {j.name for j in req.jobs}
    assert evaluate(req, res.placements).objective_value <= rel.bound + 1e-6


def test_node_patterns_tighten_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two nodes of 7 GPUs; one 5-GPU and four 3-GPU single-node gangs. Per-size
    thresholds let the LP place the 5-gang and three 3-gangs (14 GPUs); on real nodes a
    node holds (5) or (3, 3), so at most 12 GPUs are used: the node-pattern LP knows."""
    import solver.bound as bound_mod

    req = request([node("a", V100, 7), node("b", V100, 7)],
                  [{"name": "five", "gpus": 5}] + [{"name": f"t{i}", "gpus": 3}
                                                    for i in range(4)],
                  solver="cp_sat")
    exact = plan(req)
    assert exact.status == "optimal"
    per_gpu = exact.objective_value / 12  # four 3-gangs (or the 5-gang and two 3-gangs)
    assert sum(len(a.placements) for a in exact.assignments) == 12
    tight = bound_mod.upper_bound(req)
    assert tight is not None and exact.objective_value - 1e-6 <= tight
    assert tight <= exact.objective_value * 1.003  # within the coefficient grid
    monkeypatch.setattr(bound_mod, "MAX_PATTERNS", 0)  # threshold rows only
    loose = bound_mod.upper_bound(req)
    assert loose is not None and loose >= 13.9 * per_gpu


def test_gangs_first_rounding_clears_a_node_for_the_lps_gang() -> None:
    """Two 8-GPU H100 nodes. A running 1-GPU job sits on each; the LP keeps both on the
    H100 and puts the 8-GPU gang there too, which only fits if one of them moves.
    Keeping running jobs first leaves the gang out; placing the gang first (on the node
    that displaces the fewest kept GPUs) and migrating one job keeps everything."""
    req = request(
        [node("a", H100, 8), node("b", H100, 8)],
        [{"name": "r1", "gpus": 1, "current": [{"node": "a", "gpu": 0}]},
         {"name": "r2", "gpus": 1, "current": [{"node": "b", "gpu": 0}]},
         {"name": "gang", "gpus": 8, "weight": 2}])
    rel = relax(req)
    assert rel is not None and rel.targets == {"r1": H100, "r2": H100, "gang": H100}
    keep = plan_lp_round(req, rel.targets, variant="keep_first")
    first = plan_lp_round(req, rel.targets, variant="gangs_first")
    assert violations(req, keep) == [] and violations(req, first) == []
    assert set(first.placements) == {"r1", "r2", "gang"}
    # keep_first places the gang only in its last pass, by evicting one of the running
    # jobs from a node (heuristics/domain_room.py)
    assert set(keep.placements) == {"r1", "r2", "gang"}
    v_keep = evaluate(req, keep.placements).objective_value
    v_first = evaluate(req, first.placements).objective_value
    assert v_first >= v_keep
    assert abs(plan(req).objective_value - v_first) < 1e-9  # the driver keeps the best


def test_gangs_spanning_nodes_fill_the_fullest_nodes_of_one_rack() -> None:
    """One rack of three 8-GPU H100 nodes; four running 1-GPU jobs on node a, a 12-GPU
    same-rack gang and an 8-GPU single-node gang. Everything fits only if the 12-GPU gang
    takes a's four free GPUs and one whole node, leaving the third node to the 8-GPU
    gang; spreading over the emptiest nodes first leaves no whole node."""
    nodes = [node(n, H100, 8, topology_domain="r0") for n in ("a", "b", "c")]
    running = [{"name": f"r{i}", "gpus": 1, "current": [{"node": "a", "gpu": i}]}
               for i in range(4)]
    req = request(nodes, [*running,
                          {"name": "wide", "gpus": 12, "single_node": False,
                           "same_domain": True, "weight": 2},
                          {"name": "eight", "gpus": 8, "weight": 2}])
    rel = relax(req)
    assert rel is not None and rel.targets.get("wide") == H100
    res = plan_lp_round(req, rel.targets, variant="gangs_first")
    assert violations(req, res) == []
    assert set(res.placements) == {"r0", "r1", "r2", "r3", "wide", "eight"}
    assert {p.node for p in res.placements["wide"]} == {"a", "b"} or {
        p.node for p in res.placements["wide"]} == {"a", "c"}
    for i in range(4):  # the running jobs kept their GPUs
        assert [(p.node, p.gpu) for p in res.placements[f"r{i}"]] == [("a", i)]
