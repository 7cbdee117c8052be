"""CP-SAT and the MILP backend agree on the optimum of random small instances."""

from __future__ import annotations

import random

import pytest

from tests.solver.checks import assert_backends_agree
from tests.solver.strategies import random_request


@pytest.mark.parametrize("seed", range(50))
def test_cp_sat_and_milp_agree(seed: int) -> None:
    # the proof takes well under a second on a quiet machine
    assert_backends_agree(lambda solver: random_request(
        random.Random(1000 + seed), max_gpus=32, max_jobs=40, max_nodes=6, solver=solver))
