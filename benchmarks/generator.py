"""A deterministic, seeded generator of realistic planning instances.

`generate(size, seed)` builds one of the benchmark sizes (S = 32 GPUs / 40 jobs, M = 1,024 /
1,500, L = 16,384 / 20,000, XL = 65,536 / 80,000); `generate_custom(gpus, jobs, seed)` any
other. The same arguments always give the same request.

The mix:
- nodes of 8 GPUs, about 20% V100-32GB, 35% A100-SXM4-80GB, 30% H100-SXM5-80GB and 15%
  H200-141GB nodes; racks of 16 nodes are the topology domains; host capacity of 12 to 24
  cores and 128 to 256 GiB per GPU; about 1% of nodes cordoned and 0.5% of GPUs unhealthy;
- on about half of the A100/H100/H200 nodes the last four GPUs are in MIG mode (about 25%
  of those GPUs), some with an existing layout (7 x 1g, 3g + 3g, 4g + 2g + 1g, 7g, ...);
- 70% training jobs asking for whole GPUs with the 1-GPU-dominated gang sizes of the
  Philly / Helios / ITP traces (1: 70%, 2: 10%, 4: 8%, 8: 7%, 16: 2.5%, 32: 1.5%, 64: 1%);
  gangs over 8 GPUs span nodes, half of them `same_domain`; 30% inference jobs asking for a
  MIG slice (`mig` demand or `mig_profile`) or a GPU share with its memory;
- throughput rows from the Gavel measurements (/work/shared/data/gavel, MIT): each job
  draws a Gavel job type and its speed-up from one GPU generation to the next,
  f = clip(v100 / p100, 1, 3); speeds relative to the A100 are V100 = 1/f, A100 = 1,
  H100 = f ** 1.2, H200 = 1.1 * H100 (a synthetic extrapolation: compute-bound jobs gain
  more on newer GPUs). Without the file, f is drawn uniformly in [1, 3];
- tenants (8, Zipf-like sizes), weights 1-4, some host CPU/memory requests, GPU memory
  needs that exclude the V100 for about 20% of training jobs, a few `allowed_models`;
- up to half the jobs already running, 10% of them non-preemptible: a feasible current
  state is built first by placing the jobs with the greedy heuristic in a random order on
  the empty cluster and letting about 15% of those finish (MIG layouts then include the
  instances the running jobs use).

With `elastic` (a fraction, default 0: the instances above, unchanged), that fraction of
the whole-GPU jobs become elastic gangs (contract 5.1), drawn from a random stream of their
own: the range [max(1, g / 4), min(2 g, cap)] around the nominal g (cap: 8 GPUs, one node,
for single-node gangs; 64 otherwise), the powers of two in it (and g) as allowed sizes,
and an Amdahl-style curve speedup(n) = n / (1 + c (n - 1)) with the communication share c
uniform in [0.02, 0.2] (concave, as the Pollux measurements in /work/shared/data/pollux
are: 2x the GPUs rarely gives 2x the throughput). A running elastic job's nominal size is
the size it runs at (its host request scaled with it).

With `topology` (level names, widest first, e.g. `("zone", "block", "rack")`), the cluster
gets those topology levels (contract 5.5): the narrowest groups the nodes of one rack (16
nodes, the v1 domain), each wider level groups 4 domains of the next narrower one; about
60% of the gangs spanning nodes then require one domain of the second-narrowest level
(`required`), 60% prefer one of the narrowest (`preferred`), independently (from their
own random stream: the nodes and the job demands are those of the same instance without
`topology`; its running state is built under the topology rules).
"""

from __future__ import annotations

import json
import random
from functools import cache
from typing import Any

from benchmarks.paths import data_dir
from heuristics.greedy import plan_greedy
from models import MigInstance, PlanRequest
from models.instance import forget_compiled
from solver.build import final_layouts

#: Named benchmark sizes: (GPUs, jobs).
SIZES: dict[str, tuple[int, int]] = {
    "S": (32, 40),
    "M": (1024, 1500),
    "L": (16384, 20000),
    "XL": (65536, 80000),
}

_NODE_MODELS = (("V100-32GB", 0.20), ("A100-SXM4-80GB", 0.35), ("H100-SXM5-80GB", 0.30),
                ("H200-141GB", 0.15))
_GANGS = ((1, 0.70), (2, 0.10), (4, 0.08), (8, 0.07), (16, 0.025), (32, 0.015), (64, 0.01))
_LAYOUTS: tuple[tuple[tuple[int, int], ...], ...] = (
    (),
    ((1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 6)),
    ((3, 0), (3, 4)),
    ((4, 0), (2, 4), (1, 6)),
    ((7, 0),),
    ((2, 0), (2, 2), (2, 4), (1, 6)),
)
#: compute slices -> index of the profile in the A100-like family (1g, 2g, 3g, 4g, 7g)
_PROFILE_BY_COMPUTE = {1: 0, 2: 3, 3: 4, 4: 5, 7: 6}
_MIG_NAMES = {
    "A100-SXM4-80GB": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
                       "7g.80gb"),
    "H100-SXM5-80GB": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
                       "7g.80gb"),
    "H200-141GB": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
                   "7g.141gb"),
}
_GPUS_PER_NODE = 8
_RACK = 16


@cache
def _gavel_factors() -> tuple[float, ...]:
    """Per Gavel job type (1 GPU), the V100-over-P100 speed-up clipped to [1, 3]."""
    path = data_dir() / "gavel" / "gavel_simulation_throughputs.json"
    try:
        data = json.loads(path.read_text())
    except OSError:
        return ()
    out = []
    for key, row in sorted(data.get("v100", {}).items()):
        p100 = data.get("p100", {}).get(key, {}).get("null", 0.0)
        v100 = row.get("null", 0.0)
        if p100 > 0 and v100 > 0:
            out.append(min(3.0, max(1.0, v100 / p100)))
    return tuple(out)


def _pick(rng: random.Random, table: tuple[tuple[Any, float], ...]) -> Any:
    x = rng.random()
    acc = 0.0
    for item, p in table:
        acc += p
        if x < acc:
            return item
    return table[-1][0]


def _nodes(rng: random.Random, gpus: int) -> list[dict[str, Any]]:
    count = max(1, -(-gpus // _GPUS_PER_NODE))
    nodes = []
    left = gpus
    for n in range(count):
        model = _pick(rng, _NODE_MODELS)
        k = min(_GPUS_PER_NODE, left)
        left -= k
        mig_node = model != "V100-32GB" and rng.random() < 0.5
        gpu_list = []
        for i in range(k):
            gpu: dict[str, Any] = {"index": i, "model": model}
            if mig_node and i >= _GPUS_PER_NODE // 2:
                gpu["mig_enabled"] = True
                if rng.random() < 0.5:
                    layout = rng.choice(_LAYOUTS)
                    names = _MIG_NAMES[model]
                    gpu["mig_instances"] = [
                        {"profile": names[_PROFILE_BY_COMPUTE[c]], "start": s}
                        for c, s in layout]
            gpu_list.append(gpu)
        per_gpu_cpu = rng.choice((12000, 16000, 24000))
        per_gpu_mem = rng.choice((128, 192, 256))
        nodes.append({
            "name": f"n{n:05d}",
            "labels": {"rack": f"r{n // _RACK:04d}"},
            "topology_domain": f"r{n // _RACK:04d}",
            "cpu_millicores": per_gpu_cpu * k,
            "memory_gib": per_gpu_mem * k,
            "gpus": gpu_list,
        })
    return nodes


def _throughput(rng: random.Random) -> dict[str, float]:
    factors = _gavel_factors()
    f = rng.choice(factors) if factors else rng.uniform(1.0, 3.0)
    h100 = f ** 1.2
    return {"V100-32GB": round(1.0 / f, 4), "A100-SXM4-80GB": 1.0,
            "H100-SXM5-80GB": round(h100, 4), "H200-141GB": round(1.1 * h100, 4)}


def _job(rng: random.Random, j: int, tenants: list[str]) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": f"j{j:06d}",
        "tenant": rng.choice(tenants),
        "weight": float(rng.choice((1, 1, 1, 1, 2, 2, 4))),
        "submitted_at": round(rng.uniform(0, 86400), 1),
        "remaining_work": round(rng.lognormvariate(8.5, 1.5), 1),
    }
    if rng.random() < 0.70:
        k = _pick(rng, _GANGS)
        job["gpus"] = k
        job["throughput"] = _throughput(rng)
        if k > _GPUS_PER_NODE:
            job["single_node"] = False
            job["same_domain"] = rng.random() < 0.5
        if rng.random() < 0.2:
            job["gpu_memory_gib"] = float(rng.choice((40, 60, 70)))
        if rng.random() < 0.05:
            job["allowed_models"] = ["H100-SXM5-80GB", "H200-141GB"]
        if rng.random() < 0.3:
            job["cpu_millicores"] = 8000 * k
            job["host_memory_gib"] = 64.0 * k
        return job
    job["kind"] = "inference"
    if rng.random() < 0.5:
        if rng.random() < 0.3:
            job["mig_profile"] = rng.choice(("1g.10gb", "2g.20gb", "3g.40gb"))
        else:
            c = rng.choice((1, 1, 1, 2, 2, 3, 4))
            job["mig"] = {"compute_slices": c, "memory_gib": float(5 * c * rng.choice((1, 2)))}
    else:
        job["gpu_share"] = rng.choice((0.1, 0.2, 0.25, 0.25, 0.3, 0.5, 0.5))
        job["gpu_memory_gib"] = float(rng.choice((4, 8, 10, 16, 20)))
        if rng.random() < 0.5:
            job["throughput"] = _throughput(rng)
    if rng.random() < 0.3:
        job["cpu_millicores"] = 2000.0
        job["host_memory_gib"] = 16.0
    return job


def _make_elastic(rng: random.Random, job: dict[str, Any]) -> None:
    """Turn whole-GPU job `job` into an elastic gang (module doc), in place."""
    g = job["gpus"]
    cap = 64 if not job.get("single_node", True) else _GPUS_PER_NODE
    lo, hi = max(1, g // 4), max(g, min(2 * g, cap))
    sizes = sorted({g, *(1 << i for i in range(7) if lo <= 1 << i <= hi)})
    c = rng.uniform(0.02, 0.2)
    job["elastic"] = {"min_gpus": lo, "max_gpus": hi,
                      "speedup": {str(n): round(n / (1 + c * (n - 1)), 4) for n in sizes}}


def _add_topology(rng: random.Random, levels: tuple[str, ...], cluster: dict[str, Any],
                  jobs: list[dict[str, Any]]) -> None:
    """Topology levels on the cluster and the gangs spanning nodes (module doc)."""
    cluster["topology_levels"] = list(levels)
    for n, node in enumerate(cluster["nodes"]):
        group = n // _RACK
        topo: dict[str, str] = {}
        for depth, level in enumerate(reversed(levels)):
            topo[level] = f"{level}{group // 4 ** depth:04d}"
        node["topology"] = {lv: topo[lv] for lv in levels}
    for job in jobs:
        if job.get("single_node", True):
            continue
        want: dict[str, str] = {}
        if len(levels) >= 2 and rng.random() < 0.6:
            want["required"] = levels[-2]
        if rng.random() < 0.6:
            want["preferred"] = levels[-1]
        if want:
            job["topology"] = want


def generate_custom(gpus: int, jobs: int, seed: int = 0, elastic: float = 0.0,
                    topology: tuple[str, ...] = ()) -> PlanRequest:
    """A request with about `gpus` GPUs (nodes of 8) and `jobs` jobs, deterministic in
    `seed`; about half the jobs run already, in a feasible current state; `elastic`: the
    fraction of whole-GPU jobs that are elastic gangs; with `topology`, topology levels of
    those names (module doc)."""
    rng = random.Random(f"gpuplan-{gpus}-{jobs}-{seed}")
    nodes = _nodes(rng, gpus)
    tenants = [f"team-{k}" for k in range(8)]
    weights = [1.0 / (k + 1) for k in range(8)]
    tenant_pool = [t for t, w in zip(tenants, weights, strict=True)
                   for _ in range(round(w * 12))]
    job_dicts = [_job(rng, j, tenant_pool) for j in range(jobs)]
    if elastic > 0:
        erng = random.Random(f"gpuplan-elastic-{gpus}-{jobs}-{seed}")
        for job in job_dicts:
            if "gpus" in job and erng.random() < elastic:
                _make_elastic(erng, job)
    cluster: dict[str, Any] = {"nodes": nodes}
    if topology:
        _add_topology(random.Random(f"gpuplan-topology-{gpus}-{jobs}-{seed}"), topology,
                      cluster, job_dicts)
    request = PlanRequest.model_validate({
        "cluster": cluster,
        "jobs": job_dicts,
        "policy": {"seed": seed},
    })
    _make_running(request, rng)
    return request


def _make_running(request: PlanRequest, rng: random.Random) -> None:
    """Give up to half the jobs a feasible `current` placement (in place): place jobs in a
    random order on the empty cluster, then let about 15% of those finish."""
    order = [j.name for j in request.jobs]
    rng.shuffle(order)
    result = plan_greedy(request, order=order)
    # Of the jobs that fit in that random order, about 15% have finished since (their
    # capacity is free now) and at most half the queue runs.
    fitted = [j for j in request.jobs if result.placements.get(j.name)]
    runners = [j for j in fitted if rng.random() >= 0.15][: len(request.jobs) // 2]
    nodes = {n.name: n for n in request.cluster.nodes}
    used: dict[tuple[str, int], list[MigInstance]] = {}
    for job in runners:
        pl = result.placements.get(job.name)
        if not pl:
            continue
        job.current = [p.model_copy() for p in pl]
        if job.elastic is not None and job.gpus and len(pl) != job.gpus:
            # a running elastic gang's nominal size is its size now; its host request
            # keeps its rate per GPU
            scale = len(pl) / job.gpus
            job.gpus = len(pl)
            if job.cpu_millicores is not None:
                job.cpu_millicores *= scale
            if job.host_memory_gib is not None:
                job.host_memory_gib *= scale
        job.preemptible = rng.random() >= 0.1
        for p in pl:
            if p.mig is not None:
                used.setdefault((p.node, p.gpu), []).append(p.mig)
    # A running MIG job's instance must be in its GPU's current layout: the final layout
    # keeps the used instances and the free current ones that still fit beside them.
    layouts = final_layouts(request, {j.name: j.current for j in runners if j.current})
    for (node_name, gpu_index), layout in layouts.items():
        gpu = next(g for g in nodes[node_name].gpus if g.index == gpu_index)
        gpu.mig_instances = [MigInstance(profile=i.profile, start=i.start)
                             for i in sorted(layout, key=lambda i: (i.start, i.profile))]
    forget_compiled(request)
    for node in request.cluster.nodes:
        if rng.random() < 0.01:
            node.schedulable = False
        for gpu in node.gpus:
            if rng.random() < 0.005:
                gpu.healthy = False


def generate(size: str, seed: int = 0, elastic: float = 0.0,
             topology: tuple[str, ...] = (), tenants_quota: int = 0,
             priority_classes: int = 1) -> PlanRequest:
    """The benchmark instance of `size` (S, M, L or XL) for `seed` (`elastic`: the
    fraction of whole-GPU jobs that are elastic gangs; `topology` levels: module doc), with
    quotas on the first `tenants_quota` tenants and `priority_classes` classes
    (`with_levels`)."""
    try:
        gpus, jobs = SIZES[size.upper()]
    except KeyError:
        raise ValueError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}") from None
    request = generate_custom(gpus, jobs, seed, elastic=elastic, topology=topology)
    if tenants_quota or priority_classes > 1:
        request = with_levels(request, tenants_quota, priority_classes, seed)
    return request


#: Priority values of the generated classes, lowest first, and each class's share of jobs.
_CLASS_VALUES = (0, 100, 1000, 10000)
_CLASS_SHARES = (0.5, 0.3, 0.15, 0.05)


def with_levels(request: PlanRequest, tenants_quota: int, priority_classes: int,
                seed: int = 0) -> PlanRequest:
    """`request` with quotas (contract 5.3) and priority classes (5.4), deterministic in
    `seed`:

    - the first `tenants_quota` tenants (by name) get quotas: each is guaranteed its share
      of 80% of the cluster's GPUs in proportion to its demand (the GPU sizes of its
      jobs), rounded down, and limited to twice that (at least 8); tenants 0-3 and 4-7
      have parents `org-a` / `org-b`, guaranteed the sum of their children's guarantees
      and limited to 60% of the GPUs; every quota is on `"*"`, and each tenant also gets a
      limit on H100-SXM5-80GB of half its `"*"` limit;
    - jobs draw a class from the `priority_classes` lowest of (0, 100, 1000, 10000), the
      lower classes more often (50%, 30%, 15%, 5%, renormalised)."""
    rng = random.Random(f"gpuplan-levels-{seed}")
    data = request.model_dump(mode="json", exclude_unset=True)
    gpus = sum(len(n["gpus"]) for n in data["cluster"]["nodes"])
    demand: dict[str, float] = {}
    for job in data["jobs"]:
        demand[job.get("tenant", "default")] = demand.get(job.get("tenant", "default"), 0.0) \
            + float(job.get("gpus") or 0.5)
    tenants = sorted(demand)[:tenants_quota]
    total = sum(demand[t] for t in tenants) or 1.0
    quotas: dict[str, Any] = {}
    for org in ("org-a", "org-b"):
        quotas[org] = {"guaranteed": {"*": 0.0}, "limit": {"*": float(int(0.6 * gpus))}}
    for k, t in enumerate(tenants):
        g = float(int(0.8 * gpus * demand[t] / total))
        lim = max(8.0, 2 * g)
        org = "org-a" if k < 4 else "org-b"
        quotas[t] = {"guaranteed": {"*": g},
                     "limit": {"*": lim, "H100-SXM5-80GB": float(int(lim / 2))},
                     "parent": org}
        quotas[org]["guaranteed"]["*"] += g
    for org in ("org-a", "org-b"):
        q = quotas[org]
        q["limit"]["*"] = max(q["limit"]["*"], q["guaranteed"]["*"])
    data["cluster"]["quotas"] = quotas if tenants else {}
    values = _CLASS_VALUES[:max(1, priority_classes)]
    shares = _CLASS_SHARES[:len(values)]
    for job in data["jobs"]:
        job["priority"] = rng.choices(values, weights=shares)[0]
    return PlanRequest.model_validate(data)
