"""Fingerprints of what a v1 request compiles to and plans as (tests/solver/test_topology.py).

A request without a v1.1 field means exactly what it meant in v1, so its compiled model
(variables, bounds, rows, objective, hints), its LP bound and its heuristic plans must stay
identical. `fingerprint(request)` digests them; `tests/solver/data/v1_reference.json` holds
requests (their JSON, so that later changes to the strategies do not move them) with the
digests the code before topology levels gave them. Regenerate only for a deliberate v1
change: `python -m tests.solver.v1_fingerprint`.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path
from typing import Any

from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from heuristics.lp_round import plan_lp_round
from heuristics.result import HeuristicResult
from models import PlanRequest
from solver.bound import relax, upper_bound
from solver.formulation import compile_request
from solver.linear import LinearModel

REFERENCE = Path(__file__).parent / "data" / "v1_reference.json"


def _num(x: float) -> str:
    return f"{x:.12g}"


def model_digest(m: LinearModel) -> str:
    """A digest of a LinearModel: variables with bounds, rows in order, objective, hints."""
    h = hashlib.sha256()
    for name, lb, ub in zip(m.names, m.lbs, m.ubs, strict=True):
        h.update(f"v {name} {lb} {ub}\n".encode())
    for c in m.constraints:
        terms = " ".join(f"{v}:{_num(k)}" for v, k in c.terms.items())
        h.update(f"r {c.name} {c.lo} {c.hi} {terms}\n".encode())
    obj = " ".join(f"{v}:{_num(k)}" for v, k in m.objective.items())
    h.update(f"o {obj} {_num(m.objective_const)}\n".encode())
    h.update(" ".join(f"{v}:{k}" for v, k in sorted(m.hints.items())).encode())
    return h.hexdigest()


def _placements(res: HeuristicResult) -> dict[str, Any]:
    return {n: sorted((p.node, p.gpu, p.fraction, p.mig.profile if p.mig else None,
                       p.mig.start if p.mig else None) for p in pls)
            for n, pls in sorted(res.placements.items())}


def fingerprint(request: PlanRequest) -> dict[str, Any]:
    """The digests of `request`: its compiled model (exact and pruned), its LP bound and
    its heuristic plans (both greedy variants, LP rounding, a fixed number of local search
    moves)."""
    exact = compile_request(request)
    pruned = compile_request(request, prune=1)
    bound = upper_bound(request, time_limit_s=30.0)
    out: dict[str, Any] = {
        "model": model_digest(exact.model),
        "throughput": model_digest(LinearModel(objective=exact.throughput_terms,
                                               objective_const=exact.throughput_const)),
        "pruned": model_digest(pruned.model),
        "bound": None if bound is None else _num(bound),
    }
    for keep in (False, True):
        out[f"greedy_{keep}"] = _placements(plan_greedy(request, keep_running=keep))
    rel = relax(request, time_limit_s=30.0)
    if rel is not None:
        out["lp_round"] = _placements(plan_lp_round(request, rel.targets))
    far = time.monotonic() + 3600.0
    out["local_search"] = _placements(improve(request, plan_greedy(request), deadline=far,
                                              seed=7, max_moves=40))
    return json.loads(json.dumps(out))


def reference_requests() -> list[PlanRequest]:
    """The v1 requests of the reference: tiny and small random ones (every v1 feature,
    topology domains and same_domain gangs included)."""
    from tests.solver.strategies import random_request

    reqs = [random_request(random.Random(seed)) for seed in range(60)]
    reqs += [random_request(random.Random(1000 + s), max_gpus=24, max_jobs=14, max_nodes=5)
             for s in range(20)]
    return reqs


def main() -> None:
    """Write the reference file from the code as it is now."""
    rows = [{"request": json.loads(r.model_dump_json(exclude_defaults=True)),
             "fingerprint": fingerprint(r)} for r in reference_requests()]
    REFERENCE.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
