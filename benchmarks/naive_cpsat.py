"""The naive CP-SAT model, for the side-by-side comparison of `gpuplan bench run`.

One boolean per (job, GPU) for whole-GPU and shared jobs and one per (job, GPU, MIG
instance position) for MIG jobs, the textbook formulation whose size grows with
jobs x GPUs. It honours the whole contract (gangs, domains, eligibility, shared GPUs, MIG
layouts, host resources, running jobs and their costs) for the `throughput`, `jct` and
`makespan` objectives (`fairness` and `priority_fifo` are solved as `throughput`). It
exists to show what the aggregated formulation and the heuristics buy; it is not a
backend of `solver.plan`.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from heuristics.result import HeuristicResult
from models import Instance, Placement, PlanRequest
from models.catalog import instance_positions
from models.instance import ClusterState, compile_jobs, mig_placement
from models.objective import objective_value_of
from models.rules import mig_profiles_for, model_eligible

#: Objective coefficients and fractions are scaled to integers by this factor.
SCALE = 1000


def _key(p: Placement) -> tuple[str, int]:
    return (p.node, p.gpu)


def solve_naive(request: PlanRequest, time_limit_s: float, *,
                seed: int | None = None, threads: int = 2) -> HeuristicResult | None:
    """Solve `request` with the naive model within `time_limit_s` seconds of search
    (building the model is not counted); None when no solution was found."""
    state = ClusterState(request)
    infos = compile_jobs(request)
    catalog = state.catalog
    policy = request.policy
    objective = policy.objective if policy.objective in ("jct", "makespan") else "throughput"
    m = cp_model.CpModel()
    obj_terms: list[tuple[int, cp_model.IntVar]] = []
    const = 0
    gpu_whole: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    gpu_share: dict[int, list[tuple[cp_model.IntVar, int, int]]] = defaultdict(list)
    gpu_mig: dict[int, list[tuple[cp_model.IntVar, Instance]]] = defaultdict(list)
    node_cpu: dict[int, list[tuple[cp_model.LinearExprT, float]]] = defaultdict(list)
    decode: dict[str, list[tuple[cp_model.IntVar, Placement]]] = {}
    for info in infos:
        job = info.job
        cur = {_key(p) for p in (job.current or [])}
        y = m.new_bool_var(f"y[{info.name}]")
        kept = m.new_bool_var(f"kept[{info.name}]") if job.current else None
        pairs: list[tuple[cp_model.IntVar, Placement]] = []
        by_model: dict[str, list[cp_model.IntVar]] = defaultdict(list)
        by_node: dict[int, list[cp_model.IntVar]] = defaultdict(list)
        values: dict[str, int] = {}
        for g in state.gpus:
            key = (state.nodes[g.node].name, g.index)
            spec = catalog[g.model]
            grandfathered = key in cur
            if not grandfathered and (not g.usable or not model_eligible(job, g.model, spec)):
                continue
            if g.mig != (info.shape == "mig"):
                continue
            if g.model not in values:
                values[g.model] = round(SCALE * objective_value_of(job, g.model, catalog,
                                                                   objective))
            if info.shape == "mig":
                profs = {p.name for p in mig_profiles_for(job, spec)}
                for pos in instance_positions(spec):
                    is_cur = job.current is not None and job.current[0].mig is not None \
                        and grandfathered and job.current[0].mig.key() == pos
                    if pos.profile not in profs and not is_cur:
                        continue
                    if not policy.allow_mig_reconfiguration and pos not in g.mig_current:
                        continue
                    v = m.new_bool_var(f"m[{info.name},{g.gid},{pos.profile}@{pos.start}]")
                    if grandfathered and not is_cur:
                        m.add(v == 0)
                    gpu_mig[g.gid].append((v, pos))
                    pairs.append((v, mig_placement(key[0], key[1], pos)))
                    by_model[g.model].append(v)
                    by_node[g.node].append(v)
                    obj_terms.append((values[g.model], v))
                    if is_cur and kept is not None:
                        m.add_implication(kept, v)
                continue
            v = m.new_bool_var(f"x[{info.name},{g.gid}]")
            if grandfathered and kept is not None and not (g.usable and model_eligible(
                    job, g.model, spec)):
                m.add_implication(v, kept)
            if info.shape == "share":
                frac = (job.current[0].fraction if grandfathered and job.current
                        else None) or info.share
                gpu_share[g.gid].append((v, round(frac * SCALE), round(info.gpu_mem * SCALE)))
                pairs.append((v, Placement(node=key[0], gpu=key[1], fraction=frac)))
                obj_terms.append((values[g.model], v))
            else:
                gpu_whole[g.gid].append(v)
                pairs.append((v, Placement(node=key[0], gpu=key[1])))
            by_model[g.model].append(v)
            by_node[g.node].append(v)
            if grandfathered and kept is not None:
                m.add_implication(kept, v)
        decode[info.name] = pairs
        k = info.gpus if info.shape == "whole" else 1
        # sum of the job's booleans = k * placed
        m.add(sum(v for v, _ in pairs) == k * y)
        if info.shape == "whole":
            # one model: z[model] chosen once; value by model
            zs = []
            for model, vs in by_model.items():
                z = m.new_bool_var(f"z[{info.name},{model}]")
                zs.append(z)
                m.add(sum(vs) == k * z)
                obj_terms.append((values[model], z))
            m.add(sum(zs) == y)
            if job.single_node and k > 1:
                ws = []
                for ni, vs in by_node.items():
                    w = m.new_bool_var(f"w[{info.name},{ni}]")
                    ws.append(w)
                    m.add(sum(vs) == k * w)
                m.add(sum(ws) == y)
            elif job.same_domain and k > 1:
                by_dom: dict[str | None, list[cp_model.IntVar]] = defaultdict(list)
                for ni, vs in by_node.items():
                    by_dom[state.nodes[ni].domain or f"(node {ni})"].extend(vs)
                ds = []
                for dom, vs in by_dom.items():
                    d = m.new_bool_var(f"d[{info.name},{dom}]")
                    ds.append(d)
                    m.add(sum(vs) <= k * d)
                m.add(sum(ds) <= 1)
        if info.cpu > 0 or info.host_mem > 0:
            for ni, vs in by_node.items():
                node_cpu[ni].append((sum(vs), info.cpu / k if info.shape == "whole"
                                     else info.cpu))
                node_cpu[-1 - ni].append((sum(vs), info.host_mem / k if info.shape == "whole"
                                          else info.host_mem))
        if job.current and kept is not None:
            m.add_implication(kept, y)
            mc, pc = round(SCALE * policy.migration_cost), round(SCALE * policy.preemption_cost)
            # -mc * (y - kept) - pc * (1 - y)
            obj_terms.append((pc - mc, y))
            obj_terms.append((mc, kept))
            const -= pc
            if not job.preemptible:
                m.add(kept == 1)
            if not policy.allow_preemption:
                m.add(y == 1)
        elif kept is None and not pairs:
            m.add(y == 0)
    # whole GPU: at most one whole job, and no share beside it
    for gid, vs in gpu_whole.items():
        m.add_at_most_one(vs)
        for v, _, _ in gpu_share.get(gid, []):
            m.add(sum(vs) + v <= 1)
    for gid, shares in gpu_share.items():
        g = state.gpus[gid]
        m.add(sum(f * v for v, f, _ in shares) <= SCALE)
        if g.mem < 1e17:
            m.add(sum(mem * v for v, _, mem in shares) <= round(g.mem * SCALE))
    for gid, migs in gpu_mig.items():
        spec = catalog[state.gpus[gid].model]
        # each memory slice covered at most once; compute slices within the total
        for s in range(spec.memory_slices):
            cover = []
            for v, pos in migs:
                prof = spec.profile(pos.profile)
                if prof is not None and pos.start <= s < pos.start + prof.memory_slices:
                    cover.append(v)
            if len(cover) > 1:
                m.add_at_most_one(cover)
        comp = []
        for v, pos in migs:
            prof = spec.profile(pos.profile)
            if prof is not None:
                comp.append((prof.compute_slices, v))
        m.add(sum(c * v for c, v in comp) <= spec.compute_slices)
        for prof in spec.mig_profiles:
            same = [v for v, pos in migs if pos.profile == prof.name]
            if len(same) > prof.max_count:
                m.add(sum(same) <= prof.max_count)
        media = [v for v, pos in migs if (p := spec.profile(pos.profile)) and p.media_extensions]
        if len(media) > 1:
            m.add_at_most_one(media)
    for ni, host in node_cpu.items():
        node = state.nodes[ni if ni >= 0 else -1 - ni]
        cap_ = node.cpu_cap if ni >= 0 else node.mem_cap
        if cap_ is None:
            continue
        m.add(sum(round(a * SCALE) * e for e, a in host) <= round(cap_ * SCALE))
    m.maximize(sum(c * v for c, v in obj_terms) + const)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, time_limit_s)
    solver.parameters.num_workers = threads
    if seed is not None:
        solver.parameters.random_seed = seed
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    result = HeuristicResult()
    for name, pairs in decode.items():
        chosen = [p for v, p in pairs if solver.boolean_value(v)]
        if chosen:
            result.placements[name] = chosen
    return result

