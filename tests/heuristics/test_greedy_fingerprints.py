"""The greedy's plans pinned: a hash of the sorted placements and reasons of each pass
below, captured with the implementation before the setup was reworked (running jobs kept
in bulk, prices and the priced order made once per kind: issue 21). A change of any of
them is a change of the plans, to be made on purpose (and the hashes recaptured with
`fingerprints()`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from benchmarks.colocation import add_colocation_classes
from benchmarks.generator import generate
from heuristics.greedy import plan_greedy
from heuristics.result import HeuristicResult
from models import PlanRequest
from models.instance import forget_compiled

#: The passes of each instance: both variants, each alone, and a seeded restart.
PASSES: tuple[dict[str, Any], ...] = (
    {}, {"keep_running": False}, {"keep_running": True}, {"seed": 3})


def _with(objective: str | None = None, preemption: bool = True,
          **kw: Any) -> Callable[[], PlanRequest]:
    def make() -> PlanRequest:
        req = generate("S", **kw)
        if objective is not None:
            req.policy.objective = objective  # type: ignore[assignment]
        req.policy.allow_preemption = preemption
        forget_compiled(req)
        return req
    return make


def _instances() -> Iterator[tuple[str, Callable[[], PlanRequest]]]:
    for seed in range(3):
        yield f"S{seed}", _with(seed=seed)
    yield "S0-elastic", _with(seed=0, elastic=0.3)
    yield "S1-topology", _with(seed=1, topology=("zone", "rack"))
    yield "S2-topology-elastic", _with(seed=2, elastic=0.3, topology=("zone", "rack"))
    yield "S0-quotas-classes", _with(seed=0, tenants_quota=8, priority_classes=3)
    yield "S1-classes", _with(seed=1, priority_classes=3)
    yield "S1-colocation", lambda: add_colocation_classes(generate("S", 1), 0.5, 1)
    yield "S0-no-preemption", _with(seed=0, preemption=False)
    for objective in ("jct", "makespan", "priority_fifo", "fairness"):
        yield f"S2-elastic-{objective}", _with(objective, seed=2, elastic=0.3)
        yield f"S1-quotas-{objective}", _with(objective, seed=1, tenants_quota=8,
                                               priority_classes=2)


def fingerprint(result: HeuristicResult) -> str:
    """A hash of `result`'s placements and reasons, sorted by job."""
    placements = sorted(
        (name, [(p.node, p.gpu, p.fraction,
                 None if p.mig is None else (p.mig.profile, p.mig.start)) for p in pl])
        for name, pl in result.placements.items())
    reasons = sorted(result.reasons.items())
    return hashlib.sha256(json.dumps([placements, reasons]).encode()).hexdigest()[:16]


def fingerprints() -> dict[str, str]:
    """Every pass's fingerprint, by "instance:pass" (what `PINNED` holds)."""
    out = {}
    for name, make in _instances():
        req = make()
        for k, kw in enumerate(PASSES):
            out[f"{name}:{k}"] = fingerprint(plan_greedy(req, **kw))
    return out


PINNED: dict[str, str] = {
    "S0-elastic:0": "af4ba973d6132b45",
    "S0-elastic:1": "af4ba973d6132b45",
    "S0-elastic:2": "5ad98bca52a62b6e",
    "S0-elastic:3": "af4ba973d6132b45",
    "S0-no-preemption:0": "dfc0a60f041ec855",
    "S0-no-preemption:1": "dfc0a60f041ec855",
    "S0-no-preemption:2": "dfc0a60f041ec855",
    "S0-no-preemption:3": "dfc0a60f041ec855",
    "S0-quotas-classes:0": "0d499ea8dd1e3922",
    "S0-quotas-classes:1": "0d499ea8dd1e3922",
    "S0-quotas-classes:2": "e083e82f377bc2e2",
    "S0-quotas-classes:3": "1935f9dc6420888c",
    "S0:0": "95c42bc02786a912",
    "S0:1": "d44193a5ab7694a2",
    "S0:2": "dfc0a60f041ec855",
    "S0:3": "d44193a5ab7694a2",
    "S1-classes:0": "e9207aea13e5cbe4",
    "S1-classes:1": "e9207aea13e5cbe4",
    "S1-classes:2": "88506b1ad4b50052",
    "S1-classes:3": "f55c672fc2e40cf4",
    "S1-colocation:0": "bfeb4aa7437f2bb5",
    "S1-colocation:1": "d729105786a935de",
    "S1-colocation:2": "88506b1ad4b50052",
    "S1-colocation:3": "5f0b69915b3f3ec6",
    "S1-quotas-fairness:0": "12991f34012c7150",
    "S1-quotas-fairness:1": "12991f34012c7150",
    "S1-quotas-fairness:2": "1b0dbce1fc6a40dc",
    "S1-quotas-fairness:3": "a1a21176f1d9da5a",
    "S1-quotas-jct:0": "aa3975b9e4cd9336",
    "S1-quotas-jct:1": "aa3975b9e4cd9336",
    "S1-quotas-jct:2": "ec94e1ad79656b50",
    "S1-quotas-jct:3": "aa3975b9e4cd9336",
    "S1-quotas-makespan:0": "f2357fa5f81fd77f",
    "S1-quotas-makespan:1": "f2357fa5f81fd77f",
    "S1-quotas-makespan:2": "9a1f98a3fc2b5e81",
    "S1-quotas-makespan:3": "617c6332a97a4d0c",
    "S1-quotas-priority_fifo:0": "4a2608dba35ae311",
    "S1-quotas-priority_fifo:1": "4a2608dba35ae311",
    "S1-quotas-priority_fifo:2": "4a2608dba35ae311",
    "S1-quotas-priority_fifo:3": "a1a21176f1d9da5a",
    "S1-topology:0": "bfeb4aa7437f2bb5",
    "S1-topology:1": "d729105786a935de",
    "S1-topology:2": "88506b1ad4b50052",
    "S1-topology:3": "5f0b69915b3f3ec6",
    "S1:0": "bfeb4aa7437f2bb5",
    "S1:1": "d729105786a935de",
    "S1:2": "88506b1ad4b50052",
    "S1:3": "5f0b69915b3f3ec6",
    "S2-elastic-fairness:0": "ff8d9bdc2972ded9",
    "S2-elastic-fairness:1": "e071ef38fcdb4a10",
    "S2-elastic-fairness:2": "ff8d9bdc2972ded9",
    "S2-elastic-fairness:3": "442d89affcd730d1",
    "S2-elastic-jct:0": "2f2609cf262a988d",
    "S2-elastic-jct:1": "47578580dc36d7cf",
    "S2-elastic-jct:2": "decd800e451608e6",
    "S2-elastic-jct:3": "56f3bb73a15d134e",
    "S2-elastic-makespan:0": "78897e1f4b609f5c",
    "S2-elastic-makespan:1": "ff3c6d54b0aad4c0",
    "S2-elastic-makespan:2": "325a368c801c514d",
    "S2-elastic-makespan:3": "e3fdcec04c5f0192",
    "S2-elastic-priority_fifo:0": "d694c485f15fe40e",
    "S2-elastic-priority_fifo:1": "d694c485f15fe40e",
    "S2-elastic-priority_fifo:2": "d694c485f15fe40e",
    "S2-elastic-priority_fifo:3": "aed73606d7e6037d",
    "S2-topology-elastic:0": "4d52f15c33a92677",
    "S2-topology-elastic:1": "b7bb8961640d1fa3",
    "S2-topology-elastic:2": "4d52f15c33a92677",
    "S2-topology-elastic:3": "4d52f15c33a92677",
    "S2:0": "d3b65a0e132e6a10",
    "S2:1": "7a3a743715b93fc7",
    "S2:2": "a947cb8f8917be51",
    "S2:3": "a947cb8f8917be51",
}


@pytest.mark.parametrize("name", [name for name, _ in _instances()])
def test_plans_are_pinned(name: str) -> None:
    make = dict(_instances())[name]
    req = make()
    for k, kw in enumerate(PASSES):
        assert fingerprint(plan_greedy(req, **kw)) == PINNED[f"{name}:{k}"], (name, kw)
