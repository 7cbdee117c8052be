"""Random requests for property tests: tiny (brute-forceable) and small (<= 32 GPUs).

Running jobs get current placements drawn from a feasible state, so that the instances mix
every feature: gangs, MIG (with existing layouts), shared GPUs, host limits, running jobs
(preemptible or not), topology domains, unhealthy GPUs and cordoned nodes. With
`elastic` (a probability), whole-GPU gangs are made elastic (contract 5.1): a size range
around `gpus`, and either no curve (linear) or a curve over some sizes of the range,
concave or not; the random stream of a request drawn without it is unchanged.
`interference=True` more jobs share GPUs (down to a fifth of one, so three to five may sit
together), most of them carry one of three co-location classes, and the request gets
random interference pairs, slowdowns and speedups up to 2 (contract 5.2); without it the
draws are exactly those of v1.
"""

from __future__ import annotations

import random
from typing import Any

from models import BUILTIN_CATALOG, PlanRequest, valid_layouts
from models.reasons import static_reasons

WHOLE_MODELS = ["V100-32GB", "A100-SXM4-40GB", "H100-SXM5-80GB", "T4-16GB"]
MIG_MODELS = ["A100-SXM4-40GB", "A30-24GB", "H100-SXM5-80GB"]
#: Co-location classes and interference speeds drawn with `interference=True`.
CLASSES = ["a", "b", "c"]
SPEEDS = [0.25, 0.5, 0.8, 0.9, 1.25, 1.6, 2.0]
OBJECTIVES = ["throughput", "throughput", "fairness", "priority_fifo", "jct", "makespan"]


def random_request(rng: random.Random, *, max_gpus: int = 4, max_jobs: int = 5,
                   max_nodes: int = 2, objective: str | None = None,
                   solver: str = "cp_sat", elastic: float = 0.0,
                   topology: bool = False, interference: bool = False) -> PlanRequest:
    """A random consistent request (`elastic`: the chance that a whole-GPU job is an
    elastic gang; with `topology`, topology levels as well; with `interference`, classes
    and pairs: draws for the v1 fields stay the same without them)."""
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
            mig = rng.random() < (0.1 if interference else 0.35)
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
        whole_p, share_p = (0.15, 0.85) if interference else (0.45, 0.7)
        if kind < whole_p:
            job["gpus"] = rng.choice([1, 1, 2, 2, 3, 4])
            if job["gpus"] > 1 and rng.random() < 0.4:
                job["single_node"] = False
                job["same_domain"] = rng.random() < 0.5
            if elastic and rng.random() < elastic:
                job["elastic"] = elastic_spec(rng, job["gpus"], max_gpus)
        elif kind < share_p:
            job["gpu_share"] = rng.choice([0.2, 0.25, 0.3, 0.5, 0.6] if interference
                                          else [0.25, 0.3, 0.5, 0.6])
            if rng.random() < 0.4:
                job["gpu_memory_gib"] = rng.choice([4, 8, 12, 20])
            if interference and rng.random() < 0.8:
                job["colocation_class"] = rng.choice(CLASSES)
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
    if solver == "milp":
        # Both MILP backends, by instance, chosen without a draw from `rng` (the instance
        # of a seed stays the same): CBC, the default, runs as a subprocess; HiGHS, in
        # process, solves these tiny models about 14 times faster.
        policy["milp_backend"] = ("cbc", "highs")[sum(rng.getstate()[1][:8]) % 2]
    cluster: dict[str, Any] = {"nodes": nodes}
    if topology:
        _add_topology(random.Random(rng.random()), cluster, jobs, policy)
    body: dict[str, Any] = {"cluster": cluster, "jobs": jobs, "policy": policy}
    if interference:
        body["interference"] = [{"a": a, "b": b, "speed": rng.choice(SPEEDS)}
                                for a in CLASSES for b in CLASSES if rng.random() < 0.7]
    return PlanRequest.model_validate(body)


#: Hierarchies of topology levels (widest first) and the domain names drawn at each level.
LEVELS = (["block", "rack"], ["zone", "block", "rack"], ["spine", "leaf"])


def _add_topology(rng: random.Random, cluster: dict[str, Any], jobs: list[dict[str, Any]],
                  policy: dict[str, Any]) -> None:
    """Topology levels (2-3 of them) on the cluster, a domain per level on each node (few
    names, so that nodes share domains and the same name recurs under two parents), most
    often one model for every non-MIG GPU (so that gangs may span nodes), and required /
    preferred levels on the jobs (any level, "host" and "domain" included), more of them
gangs; a few more small nodes; MIG GPUs no job holds mostly become whole ones."""
    levels = list(rng.choice(LEVELS))
    cluster["topology_levels"] = levels
    same = rng.choice(WHOLE_MODELS) if rng.random() < 0.7 else None
    held = {(p["node"], p["gpu"]) for j in jobs for p in j.get("current", [])}
    nodes = cluster["nodes"]
    for k in range(rng.randint(0, 2) if len(nodes) < 4 else 0):
        nodes.append({"name": f"t{k}", "gpus": [
            {"index": i, "model": same or rng.choice(WHOLE_MODELS)}
            for i in range(rng.randint(1, 2))]})
    for node in cluster["nodes"]:
        node["topology"] = {lv: rng.choice(["x", "y"]) for lv in levels}
        for g in node["gpus"]:
            if (g.get("mig_enabled") and (node["name"], g["index"]) not in held
                    and rng.random() < 0.6):
                del g["mig_enabled"], g["mig_instances"]
                g["model"] = same or rng.choice(WHOLE_MODELS)
            if same is not None and not g.get("mig_enabled"):
                g["model"] = same  # gangs spanning nodes need one model
    names = [*levels, "host", "domain"]
    for job in jobs:
        if "gpus" in job and "current" not in job and "elastic" not in job \
                and rng.random() < 0.5:
            job["gpus"] = rng.choice([2, 2, 3, 4])  # more gangs that may span nodes
        if "gpus" in job and same is not None and job.get("throughput"):
            job["throughput"].setdefault(same, round(rng.uniform(0.5, 2.0), 2))
        if rng.random() < (0.9 if job.get("gpus", 1) > 1 else 0.4):
            topo: dict[str, str] = {}
            if rng.random() < 0.6:
                topo["required"] = rng.choice(names)
            if rng.random() < 0.6:
                topo["preferred"] = rng.choice(names)
            job["topology"] = topo
            if "gpus" in job and job["gpus"] > 1 and rng.random() < 0.7:
                job["single_node"] = False
    policy["topology_cost"] = rng.choice([0.0, 0.1, 0.5, 3.0])


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
                      "cpu_millicores", "host_memory_gib", "elastic", "topology",
                      "colocation_class"):
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
