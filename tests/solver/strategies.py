"""Random requests for property tests: tiny (brute-forceable) and small (<= 32 GPUs).

Running jobs get current placements drawn from a feasible state, so that the instances mix
every feature: gangs, MIG (with existing layouts), shared GPUs, host limits, running jobs
(preemptible or not), topology domains, unhealthy GPUs and cordoned nodes. With
`elastic` (a probability), whole-GPU gangs are made elastic (contract 5.1): a size range
around `gpus`, and either no curve (linear) or a curve over some sizes of the range,
concave or not; the random stream of a request drawn without it is unchanged.
"""

from __future__ import annotations

import random
from typing import Any

from models import BUILTIN_CATALOG, PlanRequest, valid_layouts

WHOLE_MODELS = ["V100-32GB", "A100-SXM4-40GB", "H100-SXM5-80GB", "T4-16GB"]
MIG_MODELS = ["A100-SXM4-40GB", "A30-24GB", "H100-SXM5-80GB"]
OBJECTIVES = ["throughput", "throughput", "fairness", "priority_fifo", "jct", "makespan"]


def random_request(rng: random.Random, *, max_gpus: int = 4, max_jobs: int = 5,
                   max_nodes: int = 2, objective: str | None = None,
                   solver: str = "cp_sat", elastic: float = 0.0) -> PlanRequest:
    """A random consistent request (`elastic`: the chance that a whole-GPU job is an
    elastic gang)."""
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
            if elastic and rng.random() < elastic:
                job["elastic"] = elastic_spec(rng, job["gpus"], max_gpus)
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


def elastic_spec(rng: random.Random, gpus: int, max_gpus: int) -> dict[str, Any]:
    """An `elastic` object whose allowed sizes include `gpus`: a range around it and, half
    the time, a speedup curve over some of its sizes (concave, or with a random dip)."""
    lo = rng.randint(1, gpus)
    hi = rng.randint(gpus, max(gpus, min(max_gpus, gpus + 2)))
    spec: dict[str, Any] = {"min_gpus": lo, "max_gpus": hi}
    if rng.random() < 0.5:
        sizes = sorted({gpus, *(n for n in range(lo, hi + 1) if rng.random() < 0.6)})
        alpha = rng.choice([0.5, 0.7, 0.9, 1.0])
        spec["speedup"] = {str(n): round(n ** alpha * rng.uniform(0.85, 1.0), 3)
                           for n in sizes}
    return spec


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
