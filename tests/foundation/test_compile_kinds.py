"""The compiled jobs' kinds: the rules asked once per class of jobs give each job what
asking them for that job gives, and the per-request caches never serve a stale answer
after a request is copied with edits or its job list is edited."""

from __future__ import annotations

from typing import Any

import pytest

from models import Placement, PlanRequest
from models.instance import compile_jobs, forget_compiled
from models.objective import evaluate, objective_value_of
from models.reasons import static_reasons
from models.rules import allowed_sizes, job_value
from solver.quick_bound import quick_bound

OBJECTIVES = ["throughput", "jct", "makespan", "fairness", "priority_fifo"]


def _request(objective: str = "throughput") -> PlanRequest:
    """Two nodes (H100 whole GPUs; A100 half MIG) and jobs of every shape, several of a
    class (equal shape, size, weight, speeds) that differ in what is each job's own
    (remaining work, host request, running or not), one elastic gang."""
    fast = {"H100-SXM5-80GB": 2.0, "A100-SXM4-80GB": 1.0}
    jobs: list[dict[str, Any]] = [
        {"name": "a", "gpus": 1, "throughput": dict(fast), "remaining_work": 600.0},
        {"name": "b", "gpus": 1, "throughput": dict(fast), "remaining_work": 7200.0,
         "cpu_millicores": 4000.0},
        {"name": "c", "gpus": 1, "throughput": dict(fast), "weight": 2.0,
         "current": [{"node": "h", "gpu": 0}]},
        {"name": "d", "gpus": 2, "throughput": dict(fast)},
        {"name": "e", "gpu_share": 0.5, "gpu_memory_gib": 10.0},
        {"name": "f", "gpu_share": 0.5, "gpu_memory_gib": 10.0, "remaining_work": 60.0,
         "current": [{"node": "h", "gpu": 1, "fraction": 0.5}]},
        {"name": "g", "mig": {"compute_slices": 2, "memory_gib": 10.0}},
        {"name": "h", "mig_profile": "3g.40gb", "tenant": "other"},
        {"name": "i", "gpus": 2, "throughput": dict(fast), "remaining_work": 900.0,
         "elastic": {"min_gpus": 1, "max_gpus": 4, "speedup": {"1": 1.0, "2": 1.8, "4": 3.0}}},
        {"name": "j", "gpus": 1, "allowed_models": ["V100-32GB"]},
    ]
    nodes = [
        {"name": "h", "gpus": [{"index": i, "model": "H100-SXM5-80GB"} for i in range(4)]},
        {"name": "m", "gpus": [{"index": i, "model": "A100-SXM4-80GB", "mig_enabled": i >= 2}
                               for i in range(4)]},
    ]
    return PlanRequest.model_validate({"cluster": {"nodes": nodes}, "jobs": jobs,
                                       "policy": {"objective": objective}})


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_compiled_values_are_each_jobs_rules(objective: str) -> None:
    """Every JobInfo's values are `job_value` / `objective_value_of` of its own job (an
    elastic gang's at every allowed size), jobs of one class share one kind and its value
    dicts, and jobs of other weights or sizes do not."""
    req = _request(objective)
    forget_compiled(req)
    catalog = req.cluster.catalog()
    infos = {i.name: i for i in compile_jobs(req)}
    for info in infos.values():
        job = info.job
        assert info.values == {m: job_value(job, m, catalog) for m in info.values}
        assert info.obj_values == {m: objective_value_of(job, m, catalog, objective)
                                   for m in info.values}
        assert info.kind.values is info.values
        for n in allowed_sizes(job) if job.elastic is not None else []:
            assert info.size_obj_values[n] == {
                m: objective_value_of(job, m, catalog, objective, n) for m in info.values}
    assert set(infos["a"].values) == {"H100-SXM5-80GB", "A100-SXM4-80GB"}
    assert infos["a"].kind is infos["b"].kind
    assert infos["e"].kind is infos["f"].kind
    assert infos["c"].kind is not infos["a"].kind   # another weight
    assert infos["d"].kind is not infos["a"].kind   # another size
    assert infos["i"].kind is not infos["d"].kind   # elastic: its value is on its curve
    assert infos["i"].values != infos["d"].values
    # the objectives with a per-job factor keep each job's own objective values
    per_job = objective in ("jct", "makespan")
    assert (infos["a"].obj_values is infos["b"].obj_values) is not per_job
    assert (infos["a"].obj_values == infos["b"].obj_values) is not per_job
    assert infos["j"].values == {}


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_evaluate_is_the_same_with_or_without_compiled_jobs(objective: str) -> None:
    """`evaluate` gives the same evaluation whether it reads the compiled values (the
    request compiled) or asks the rules itself (not compiled)."""
    req = _request(objective)
    where: dict[str, list[dict[str, Any]]] = {
        "a": [{"node": "h", "gpu": 2}], "c": [{"node": "m", "gpu": 0}],
        "f": [{"node": "h", "gpu": 1, "fraction": 0.5}],
        "i": [{"node": "h", "gpu": 0}, {"node": "h", "gpu": 3}],
        "g": [{"node": "m", "gpu": 2, "mig": {"profile": "2g.20gb", "start": 0}}]}
    pl = {name: [Placement.model_validate(p) for p in ps] for name, ps in where.items()}
    forget_compiled(req)
    plain = evaluate(req, pl)
    compile_jobs(req)
    assert evaluate(req, pl) == plain
    assert plain.throughput > 0 and "c" in plain.migrated


def _fresh(request: PlanRequest) -> PlanRequest:
    """An equal request that no cache has seen."""
    return PlanRequest.model_validate(request.model_dump())


def test_edits_between_calls_give_fresh_answers() -> None:
    """A copy of a request with an edited job, or its job list edited in place, is
    compiled, given static reasons, evaluated and bounded afresh."""
    req = _request("throughput")
    pl = {"a": list(req.jobs[2].current or []), "z": list(req.jobs[5].current or [])}
    before = {i.name: i for i in compile_jobs(req)}
    assert "j" in static_reasons(req)
    ev = evaluate(req, pl)
    bound = quick_bound(req)
    jobs = list(req.jobs)
    jobs[0] = jobs[0].model_copy(update={"weight": 3.0})
    jobs[9] = jobs[9].model_copy(update={"allowed_models": None})
    edited = req.model_copy(update={"jobs": jobs})
    after = {i.name: i for i in compile_jobs(edited)}
    assert after["a"].values == {m: 3.0 * v for m, v in before["a"].values.items()}
    assert after["b"].values == before["b"].values
    assert "j" not in static_reasons(edited)
    assert evaluate(edited, pl) == evaluate(_fresh(edited), pl) != ev
    assert quick_bound(edited) == quick_bound(_fresh(edited)) > bound
    # the job list edited in place: one job more, then that job replaced
    edited.jobs.append(req.jobs[0].model_copy(update={"name": "z", "weight": 5.0}))
    assert compile_jobs(edited)[-1].name == "z"
    assert static_reasons(edited) == static_reasons(_fresh(edited))
    with_z = evaluate(edited, pl)
    assert with_z == evaluate(_fresh(edited), pl) != evaluate(edited, {"a": pl["a"]})
    edited.jobs[-1] = edited.jobs[-1].model_copy(update={"weight": 1.0})
    assert evaluate(edited, pl) == evaluate(_fresh(edited), pl) != with_z
