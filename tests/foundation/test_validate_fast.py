"""The validator's fast paths give the verdicts of the general ones: a kept running job is
recognised by its very placement objects without comparing them, and the per-GPU and
per-node tallies read only what a plan touches. A plan and its deep copy (equal
placements, none of them the request's own objects) must get the same violations, under
random corruptions of a planner's plan."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.generator import generate_custom
from heuristics.greedy import plan_greedy
from models import Assignment, Placement, Plan
from solver import validate
from solver.build import build_plan
from solver.validate import validate_plan

REQUEST = generate_custom(48, 60, seed=1)
BASE = build_plan(REQUEST, plan_greedy(REQUEST, seed=0, deadline=time.monotonic() + 30),
                  status="heuristic", solver="greedy")
GPUS = [(n.name, g.index) for n in REQUEST.cluster.nodes for g in n.gpus]
NAMES = [j.name for j in REQUEST.jobs]
RUNNING = {j.name for j in REQUEST.jobs if j.current}

OPS = st.tuples(st.sampled_from(["move", "move_running", "drop", "dup", "fraction", "steal",
                                 "add"]),
                st.integers(0, 10_000), st.integers(0, 10_000),
                st.floats(0.05, 1.0))


def _corrupt(plan: Plan, ops: list[tuple[str, int, int, float]]) -> Plan:
    """`plan` with the corruptions `ops` applied (untouched placements stay the very
    objects of `plan`)."""
    rows: list[tuple[str, list[Placement]]] = [(a.job, list(a.placements))
                                               for a in plan.assignments]
    unplaced = list(plan.unplaced)
    for kind, i, j, x in ops:
        if not rows:
            break
        running = [r for r in rows if r[0] in RUNNING and len(r[1]) > 1]
        if kind == "move_running" and running:   # a gang kept where it runs, one GPU moved
            name, pls = running[i % len(running)]
        else:
            name, pls = rows[i % len(rows)]
        node, gpu = GPUS[j % len(GPUS)]
        if kind in ("move", "move_running") and pls:
            k = j % len(pls)
            pls[k] = pls[k].model_copy(update={"node": node, "gpu": gpu})
        elif kind == "drop":
            rows.pop(i % len(rows))
        elif kind == "dup":
            rows.append((name, list(pls)))
        elif kind == "fraction" and pls:
            pls[0] = pls[0].model_copy(update={"fraction": x})
        elif kind == "steal" and unplaced:
            rows.append((unplaced.pop(j % len(unplaced)).job, list(pls)))
        elif kind == "add":
            rows.append((NAMES[j % len(NAMES)], [Placement(node=node, gpu=gpu)]))
    return plan.model_copy(update={
        "assignments": [Assignment.model_construct(job=n, placements=p) for n, p in rows],
        "unplaced": unplaced})


def _verdict(plan: Plan) -> list[tuple[Any, ...]]:
    return sorted((v.rule, v.message, v.job or "", v.node or "", v.gpu or -1)
                  for v in validate_plan(REQUEST, plan))


def test_the_base_plan_keeps_running_jobs_by_their_own_objects() -> None:
    """The fast path is exercised: kept placements are the request's objects."""
    current = {j.name: j.current for j in REQUEST.jobs if j.current}
    kept = [a for a in BASE.assignments if a.placements == current.get(a.job)]
    assert kept and all(p is q for a in kept
                        for p, q in zip(a.placements, current[a.job], strict=True))
    assert _verdict(BASE) == [] == _verdict(BASE.model_copy(deep=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=1, max_size=4))
def test_a_plan_and_its_deep_copy_get_the_same_violations(
        ops: list[tuple[str, int, int, float]]) -> None:
    plan = _corrupt(BASE, ops)
    assert _verdict(plan) == _verdict(plan.model_copy(deep=True))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=1, max_size=4))
def test_kept_placements_get_the_verdicts_of_the_full_placement_check(
        ops: list[tuple[str, int, int, float]]) -> None:
    """`_plain_kept` (a kept whole-GPU or MIG placement passes on a few questions) gives
    the verdicts of `_check_placement` asked of every placement."""
    plan = _corrupt(BASE, ops)
    fast = _verdict(plan)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validate, "_fast_reads", lambda *_: False)
        assert _verdict(plan) == fast


def test_a_fraction_on_each_kept_placement_gets_the_full_check_verdict() -> None:
    """Each kept running job in turn given a fraction (still kept: fractions are not part
    of where a job runs): the fast path and the full check agree, and a whole-GPU or MIG
    job's fraction is reported (a MIG job's by the `shared` rule)."""
    kept = [i for i, a in enumerate(BASE.assignments) if a.job in RUNNING]
    shapes = {j.name: j.shape for j in REQUEST.jobs}
    assert {shapes[BASE.assignments[i].job] for i in kept} >= {"whole", "mig"}
    for i in kept:
        plan = _corrupt(BASE, [("fraction", i, 0, 0.5)])
        fast = _verdict(plan)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(validate, "_fast_reads", lambda *_: False)
            assert _verdict(plan) == fast
        shape = shapes[BASE.assignments[i].job]
        if shape == "whole":
            assert any(v[0] == "eligibility" for v in fast)
        elif shape == "mig":   # a fraction on a MIG GPU is the `shared` rule's
            assert any(v[0] == "shared" for v in fast)
