"""Compile a PlanRequest into the formulation's model: data, variables, constraints,
objective, hints, in that order (one function per stage below).

The order of the calls is the order of the model's variables and rows, which the
backends see; keep it when adding a family (append, do not interleave).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping

from models import Placement, PlanRequest
from models.rules import lexicographic_levels
from solver.formulation import constraints as rows
from solver.formulation import variables as new
from solver.formulation.builder import Builder
from solver.formulation.hints import current_state_hints
from solver.formulation.objective import add_level_terms, add_objective
from solver.formulation.tables import BinPattern, ClassedShare, Compiled, PatternShare


def compile_request(request: PlanRequest, objective: str | None = None,
                    prune: int | None = None,
                    hint: Mapping[str, list[Placement]] | None = None,
                    max_vars: int | None = None) -> Compiled:
    """Compile `request` for `objective` (default: the policy's; fairness and priority_fifo
    compile with throughput values and are handled by the driver).

    `prune` (None = exact) restricts each job to its `prune` most valuable targets (more
    for large groups): the model stays small on large clusters, at the price of
    optimality; `Compiled.pruned` tells whether any target was dropped. Targets that the
    `hint` plan uses are always kept, so that the hint stays feasible. With `max_vars`,
    `ModelTooLarge` is raised as soon as the model would grow past it.
    """
    obj = objective or request.policy.objective
    if obj in ("fairness", "priority_fifo"):
        obj = "throughput"
    b = Builder(request, obj, prune, hint)
    b.m.max_vars = max_vars
    collect_data(b)
    add_variables(b)
    add_constraints(b)
    add_objective(b)
    if lexicographic_levels(request):
        add_level_terms(b)
        add_quota_limits(b)
    current_state_hints(b)
    b.m.max_vars = None
    return b.c


def collect_data(b: Builder) -> None:
    """Pools and MIG GPUs, what running jobs hold, groups of identical new jobs."""
    b.collect_hardware()
    b.collect_occupancy()
    b.collect_groups()


def add_variables(b: Builder) -> None:
    """Every variable family, in model order."""
    new.new_layout_vars(b)
    new.new_keep_vars(b)
    new.new_bin_vars(b)
    for gi in range(len(b.c.groups)):
        new.new_group_vars(b, gi)
    for r in b.running:
        new.new_move_vars(b, r)
    new.new_pattern_vars(b)


def add_constraints(b: Builder) -> None:
    """Every row family, in model order (see the functions of constraints.py)."""
    for mg in b.mig_gpus:
        if mg.pos_vars is not None:
            rows.add_mig_slice_once(b, mg)
            rows.add_mig_compute(b, mg)
            rows.add_mig_profile_count(b, mg)
            rows.add_mig_one_media(b, mg)
    for r in b.running:
        rows.add_kept_instance_stays(b, r)
    rows.add_instance_kept_once(b)
    for bi, bin_ in enumerate(b.c.bins):
        if bin_.gpu is not None:
            rows.add_kept_share_needs_bin(b, bi)
    virtual = rows.virtual_bins(b)
    for key, opens in virtual.items():
        rows.add_virtual_bins_in_order(b, key, opens)
    for gi, grp in enumerate(b.c.groups):
        gangs = [j for j in grp.members if j in b.c.gangs]
        for prev, j in zip([None, *gangs], gangs, strict=False):
            rows.add_gang(b, j)
            if prev is not None:
                rows.add_gang_priority(b, prev, j)
        rows.add_group_size(b, gi)
    for r in b.running:
        if r in b.moves:
            if r in b.c.gangs:
                rows.add_gang(b, r)
            rows.add_keep_move_or_stop(b, r)
    add_capacity(b, virtual)
    if b.prune is None:
        # Pruned targets differ per job, so nodes are no longer interchangeable.
        add_symmetry(b)
    add_colocation(b)


def add_capacity(b: Builder, virtual: Mapping[tuple[str, str], list[int]]) -> None:
    """The capacity rows: per pool its occupied GPUs and its GPUs, per bin its fraction
    and memory, per MIG GPU and profile its instances, per node its host CPU and memory."""
    for key, pool in b.pools.items():
        for gpu in rows.occupied_gpus(pool):
            rows.add_exclusive_gpu(b, key, gpu)
        rows.add_pool_capacity(b, key, virtual.get(key, []))
    for bi in range(len(b.c.bins)):
        rows.add_share_fraction(b, bi)
        rows.add_share_memory(b, bi)
    for mg_i, profile in list(b.mig_use):
        rows.add_mig_instances(b, mg_i, profile)
    for node in list(b.host_cpu):
        rows.add_host_cpu(b, node)
    for node in list(b.host_mem):
        rows.add_host_memory(b, node)


def add_quota_limits(b: Builder) -> None:
    """The quota limit rows (contract 5.3 Q1), after every other family: one per tenant
    and limited key (their usage terms come from `add_level_terms`)."""
    for tenant, q in b.req.cluster.quotas.items():
        for model in q.limit:
            rows.add_quota_limit(b, (tenant, model))


def add_symmetry(b: Builder) -> None:
    """Identical clean nodes, and identical clean MIG GPUs of a node, ordered by load."""
    load, mig_load = rows.symmetry_loads(b)
    for names in rows.symmetric_nodes(b):
        for first, second in itertools.pairwise(names):
            rows.add_node_symmetry(b, first, second, load)
    for ids in rows.symmetric_mig_gpus(b):
        for first_gpu, second_gpu in itertools.pairwise(ids):
            rows.add_mig_gpu_symmetry(b, first_gpu, second_gpu, mig_load)


def add_colocation(b: Builder) -> None:
    """The co-location pattern rows (contract 5.2): per bin with patterns, one pattern;
    per class whose jobs are worth the same, its count; per other class, each share
    variable split over the patterns and each pattern's count of the class."""
    by_bin: dict[int, list[BinPattern]] = defaultdict(list)
    for pat in b.c.patterns:
        by_bin[pat.bin].append(pat)
    parts: dict[int, list[PatternShare]] = defaultdict(list)
    for ps in b.c.pattern_shares:
        parts[ps.share].append(ps)
    classed: dict[tuple[int, str], list[ClassedShare]] = defaultdict(list)
    for x in b.c.classed:
        if x.bin in by_bin:
            classed[(x.bin, x.cls)].append(x)
    for bi, patterns in by_bin.items():
        rows.add_pattern_choice(b, bi, patterns)
    if b.prune is None:
        # Identical virtual bins (no pruning): order them by pattern.
        for opens in rows.virtual_bins(b).values():
            bins = [bi for bi, x in enumerate(b.c.bins) if x.open_var in set(opens)]
            for first, second in itertools.pairwise(bins):
                if first in by_bin and second in by_bin and [
                        p.counts for p in by_bin[first]] == [p.counts for p in by_bin[second]]:
                    rows.add_pattern_order(b, first, second, by_bin)
    for (bi, cls), xs in classed.items():
        if not any(x.var in parts for x in xs):
            rows.add_pattern_count(b, bi, cls, xs, by_bin[bi])
            continue
        for x in xs:
            rows.add_pattern_split(b, x.var, parts[x.var])
        of_pattern: dict[int, list[PatternShare]] = defaultdict(list)
        for x in xs:
            for ps in parts[x.var]:
                of_pattern[ps.pattern].append(ps)
        for pat in by_bin[bi]:
            if dict(pat.counts).get(cls, 0):
                rows.add_pattern_class_count(b, pat, cls, of_pattern.get(pat.var, []))
