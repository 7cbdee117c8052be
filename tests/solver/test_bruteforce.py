"""Both exact backends return the brute-force optimum, with valid plans, on tiny instances."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver import plan
from solver.validate import validate_plan
from tests.solver.checks import assert_brute_force_optimum
from tests.solver.strategies import random_levels_request, random_request


def _check(seed: int, solver: str) -> None:
    req = random_request(random.Random(seed), solver=solver)
    assert_brute_force_optimum(req, seed)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_cp_sat_matches_brute_force(seed: int) -> None:
    _check(seed, "cp_sat")


# MILP: fewer draws than CP-SAT's on the same strategy (each solve starts a CBC process,
# 3-6 times a CP-SAT draw in the loaded suite); both backends solve one compiled model, and
# test_agreement / the agree tests compare them on larger instances as well.
@settings(max_examples=50, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_milp_matches_brute_force(seed: int) -> None:
    _check(seed, "milp")


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_auto_matches_brute_force(seed: int) -> None:
    # auto may stop early when its starting plan reaches the LP bound: that claim of
    # optimality must hold too
    _check(seed, "auto")


def _check_levels(seed: int, solver: str) -> None:
    req = random_levels_request(random.Random(seed), solver=solver)
    assert_brute_force_optimum(req, seed, levels=True, tol=1e-5)


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_cp_sat_levels_match_brute_force(seed: int) -> None:
    # quotas (with a parent), two or three priority classes and every v1 feature
    _check_levels(seed, "cp_sat")


# MILP: fewer draws than CP-SAT's on the same strategy (each solve starts a CBC process,
# 3-6 times a CP-SAT draw in the loaded suite); both backends solve one compiled model, and
# test_agreement / the agree tests compare them on larger instances as well.
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_milp_levels_match_brute_force(seed: int) -> None:
    _check_levels(seed, "milp")


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_auto_levels_match_brute_force(seed: int) -> None:
    # auto must not call a plan optimal because it reaches the LP bound of the objective:
    # with levels that bound is not the lexicographic optimum's
    _check_levels(seed, "auto")


def _check_mixed(seed: int, solver: str) -> None:
    # every v1.1 field at once: elastic gangs, topology levels and interference (each
    # drawn or not), under quotas and priority classes, with every v1 feature
    rng = random.Random(seed)
    flags = {"elastic": rng.choice([0.0, 0.6]), "topology": rng.random() < 0.5,
             "interference": rng.random() < 0.5}
    req = random_levels_request(rng, solver=solver, **flags)
    assert_brute_force_optimum(req, (seed, flags), levels=True, tol=1e-5)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_cp_sat_matches_brute_force_with_every_v11_field(seed: int) -> None:
    _check_mixed(seed, "cp_sat")


# MILP: fewer draws than CP-SAT's on the same strategy (each solve starts a CBC process,
# 3-6 times a CP-SAT draw in the loaded suite); both backends solve one compiled model, and
# test_agreement / the agree tests compare them on larger instances as well.
@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_milp_matches_brute_force_with_every_v11_field(seed: int) -> None:
    _check_mixed(seed, "milp")


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9))
def test_heuristic_plans_are_valid_with_every_v11_field(seed: int) -> None:
    rng = random.Random(seed)
    req = random_levels_request(rng, solver=rng.choice(["heuristic", "auto"]), elastic=0.6,
                                topology=rng.random() < 0.5, interference=rng.random() < 0.5)
    assert validate_plan(req, plan(req)) == [], seed
