"""Random requests for property tests: tiny (brute-forceable) and small (<= 32 GPUs).

Running jobs get current placements drawn from a feasible state, so that the instances mix
every feature: gangs, MIG (with existing layouts), shared GPUs, host limits, running jobs
(preemptible or not), topology domains, unhealthy GPUs and cordoned nodes.
"""

from __future__ import annotations

import random
from typing import Any

from models import BUILTIN_CATALOG, PlanRequest, valid_layouts
from models.reasons import static_reasons

WHOLE_MODELS = ["V100-32GB", "A100-SXM4-40GB", "H100-SXM5-80GB", "T4-16GB"]
MIG_MODELS = ["A100-SXM4-40GB", "A30-24GB", "H100-SXM5-80GB"]
OBJECTIVES = ["throughput", "throughput", "fairness", "priority_fifo", "jct", "makespan"]


def random_request(rng: random.Random, *, max_gpus: int = 4, max_jobs: int = 5,
                   max_nodes: int = 2, objective: str | None = None,
                   solver: str = "cp_sat") -> PlanRequest:
    """A random consistent request."""
    n_gpus = rng.randint(1, max_gpus)
    n_nodes = rng.randint(1, min(max_nodes, n_gpus))
    sizes = [1] * n_nodes
    for _ in range(n_gpus - n_nodes):
        sizes[rng.randrange(n_nodes)] += 1
    nodes: list[dict[str, Any]] = []
    for ni, size in enumerate(sizes):
        model_whole = rng.choice(WHOLE_MODELS)
        model_mig = rng.choice(MIG_MODELS)
        gpus = []
        for gi in range(size):
            mig = rng.random() < 0.35
            g: dict[str, Any] = {"index": gi, "model": model_mig if mig else model_whole,
                                 "healthy": rng.random() > 0.05}
            if mig:
                g["mig_enabled"] = True
                layouts = valid_layouts(BUILTIN_CATALOG[g["model"]])
                lay = rng.choice(layouts) if rng.random() < 0.5 else frozenset()
                g["mig_instances"] = [{"profile": i.profile, "start": i.start}
                                      for i in sorted(lay)]
            gpus.append(g)
        node: dict[str, Any] = {"name": f"n{ni}", "gpus": gpus,
                                "schedulable": rng.random() > 0.05,
                                "topology_domain": rng.choice(["r1", "r2", None])}
        if rng.random() < 0.4:
            node["cpu_millicores"] = rng.choice([4000, 8000, 16000])
            node["memory_gib"] = rng.choice([32, 64, 128])
        nodes.append(node)
    jobs: list[dict[str, Any]] = []
    used_whole: set[tuple[str, int]] = set()
    share_used: dict[tuple[str, int], float] = {}
    mig_used: set[tuple[str, int, str, int]] = set()
    for ji in range(rng.randint(1, max_jobs)):
        job: dict[str, Any] = {"name": f"j{ji}", "tenant": rng.choice(["a", "b", "c"]),
                               "weight": rng.choice([1.0, 1.0, 2.0, 0.5]),
                               "submitted_at": float(rng.randint(0, 100))}
        kind = rng.random()
        if kind < 0.45:
            job["gpus"] = rng.choice([1, 1, 2, 2, 3, 4])
            if job["gpus"] > 1 and rng.random() < 0.4:
                job["single_node"] = False
                job["same_domain"] = rng.random() < 0.5
        elif kind < 0.7:
            job["gpu_share"] = rng.choice([0.25, 0.3, 0.5, 0.6])
            if rng.random() < 0.4:
                job["gpu_memory_gib"] = rng.choice([4, 8, 12, 20])
        elif rng.random() < 0.5:
            job["mig"] = {"compute_slices": rng.choice([1, 1, 2, 3, 4]),
                          "memory_gib": rng.choice([0, 5, 10, 20])}
        else:
            job["mig_profile"] = rng.choice(["1g.5gb", "2g.10gb", "3g.20gb", "1g.6gb",
                                             "2g.12gb", "1g.10gb", "3g.40gb"])
        if rng.random() < 0.5:
            models = sorted(set(WHOLE_MODELS + MIG_MODELS))
            job["throughput"] = {m: round(rng.uniform(0.2, 3.0), 2)
                                 for m in rng.sample(models, rng.randint(1, len(models)))}
        if rng.random() < 0.2:
            job["cpu_millicores"] = rng.choice([1000, 4000, 6000])
            job["host_memory_gib"] = rng.choice([8, 16, 48])
        if rng.random() < 0.15:
            job["remaining_work"] = float(rng.choice([600, 3600, 20000]))
        # Maybe running: try to give it a current placement consistent with the others.
        if rng.random() < 0.4:
            cur = _current(rng, job, nodes, used_whole, share_used, mig_used)
            if cur is not None:
                job["current"] = cur
                job["preemptible"] = rng.random() > 0.25
        jobs.append(job)
    policy = {
        "objective": objective or rng.choice(OBJECTIVES),
        "solver": solver,
        "time_limit_s": 20,
        "threads": 1,
        "seed": 1,
        "mip_gap": 0.0,
        "migration_cost": rng.choice([0.0, 0.5, 2.0]),
        "preemption_cost": rng.choice([0.0, 1.0, 3.0]),
        "allow_preemption": rng.random() > 0.2,
        "allow_mig_reconfiguration": rng.random() > 0.2,
    }
    return PlanRequest.model_validate({"cluster": {"nodes": nodes}, "jobs": jobs,
                                       "policy": policy})


def _current(rng: random.Random, job: dict[str, Any], nodes: list[dict[str, Any]],
             used_whole: set[tuple[str, int]], share_used: dict[tuple[str, int], float],
             mig_used: set[tuple[str, int, str, int]]) -> list[dict[str, Any]] | None:
    if "gpus" in job:
        for node in rng.sample(nodes, len(nodes)):
            free = [g for g in node["gpus"] if not g.get("mig_enabled")
                    and (node["name"], g["index"]) not in used_whole
                    and (node["name"], g["index"]) not in share_used]
            by_model: dict[str, list[int]] = {}
            for g in free:
                by_model.setdefault(g["model"], []).append(g["index"])
            for idx in by_model.values():
                if len(idx) >= job["gpus"]:
                    pick = idx[: job["gpus"]]
                    for i in pick:
                        used_whole.add((node["name"], i))
                    return [{"node": node["name"], "gpu": i} for i in pick]
        return None
    if "gpu_share" in job:
        for node in nodes:
            for g in node["gpus"]:
                key = (node["name"], g["index"])
                if g.get("mig_enabled") or key in used_whole:
                    continue
                if share_used.get(key, 0.0) + job["gpu_share"] <= 1.0:
                    share_used[key] = share_used.get(key, 0.0) + job["gpu_share"]
                    job.pop("gpu_memory_gib", None)
                    return [{"node": node["name"], "gpu": g["index"],
                             "fraction": job["gpu_share"]}]
        return None
    for node in nodes:
        for g in node["gpus"]:
            if not g.get("mig_enabled"):
                continue
            spec = BUILTIN_CATALOG[g["model"]]
            for inst in g.get("mig_instances", []):
                key = (node["name"], g["index"], inst["profile"], inst["start"])
                prof = spec.profile(inst["profile"])
                if key in mig_used or prof is None:
                    continue
                job.pop("mig", None)
                job.pop("mig_profile", None)
                job["mig_profile"] = inst["profile"]
                mig_used.add(key)
                return [{"node": node["name"], "gpu": g["index"], "mig": dict(inst)}]
    return None


LEVEL_OBJECTIVES = ["throughput", "throughput", "jct", "makespan", "priority_fifo"]


def random_levels_request(rng: random.Random, *, objective: str | None = None,
                          solver: str = "cp_sat", **kw: Any) -> PlanRequest:
    """A random tiny request (as `random_request`) with quotas (a parent `org` over some
    tenants, guarantees and limits on "*" and on models) and two or three priority classes
    (contract 5.3 / 5.4)."""
    req = random_request(rng, objective=objective or rng.choice(LEVEL_OBJECTIVES),
                         solver=solver, **kw)
    while len(req.jobs) < 3:  # levels need contention
        req = random_request(rng, objective=req.policy.objective, solver=solver, **kw)
    data = req.model_dump(mode="json", exclude_unset=True)
    data["policy"]["objective"] = req.policy.objective
    stuck = static_reasons(req)
    for job in data["jobs"]:
        if job["name"] in stuck and not job.get("current"):
            # a job nothing could host makes no contention: a plain whole or shared one
            for k in ("gpus", "mig", "mig_profile", "gpu_share", "throughput",
                      "allowed_models", "gpu_memory_gib", "single_node", "same_domain",
                      "cpu_millicores", "host_memory_gib"):
                job.pop(k, None)
            if rng.random() < 0.7:
                job["gpus"] = rng.choice([1, 1, 2])
            else:
                job["gpu_share"] = rng.choice([0.3, 0.5, 0.6])
    classes = sorted(rng.sample([0, 1, 5, 9], rng.choice([2, 3])))
    inverse = rng.random() < 0.5  # light jobs in high classes: the classes then decide
    for job in data["jobs"]:
        job["priority"] = rng.choice(classes)
        if inverse and job.get("weight", 1.0) <= 1.0:
            job["priority"] = classes[-1]
        if rng.random() < 0.5:
            job.pop("throughput", None)  # eligible on more models: more contention
    models = sorted({g["model"] for n in data["cluster"]["nodes"] for g in n["gpus"]})
    amounts = [0.0, 0.5, 1.0, 1.0, 2.0, 3.0]
    quotas: dict[str, Any] = {}
    if rng.random() < 0.85:
        org_g = rng.choice([1.0, 2.0, 3.0, 4.0])
        quotas["org"] = {"guaranteed": {"*": org_g}}
        if rng.random() < 0.6:
            quotas["org"]["limit"] = {"*": org_g + rng.choice([0.0, 0.5, 1.0])}
        left = org_g
        for t in rng.sample(["a", "b", "c"], rng.randint(1, 3)):
            q: dict[str, Any] = {"guaranteed": {}, "limit": {}}
            if rng.random() < 0.7:
                q["parent"] = "org"
                g = min(left, rng.choice(amounts))
                left -= g
            else:
                g = rng.choice(amounts)
            if g > 0:
                q["guaranteed"]["*"] = g
            if rng.random() < 0.8:
                q["limit"]["*"] = g + rng.choice([0.0, 0.5, 1.0])
            if rng.random() < 0.3:
                m = rng.choice(models)
                q["limit"][m] = rng.choice([0.0, 1.0, 2.0])
                if q.get("parent") is None and rng.random() < 0.5:
                    q["guaranteed"][m] = min(q["limit"][m], rng.choice(amounts))
            quotas[t] = q
    data["cluster"]["quotas"] = quotas
    return PlanRequest.model_validate(data)
