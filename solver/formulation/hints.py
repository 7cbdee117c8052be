"""Hints: variable values that reproduce a plan, to warm-start the exact backends.

`current_state_hints` is the model's default hint (compile.py sets it): every running job
kept, every MIG GPU in its current layout, every GPU that hosts shared jobs still in share
mode. `encode_hints` turns any plan (the starting plan of the driver's portfolio) into
values of every variable.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from models import Instance, Placement
from models.capacity import Topology
from models.objective import same_placement
from solver.formulation.builder import Builder
from solver.formulation.tables import Compiled, PoolKey


def current_state_hints(b: Builder) -> None:
    """Hint the current state: v[g, i] = 1 iff i is in g's current layout, keep[r] = 1,
    open[b] = 1 for the concrete share bins."""
    for mg in b.mig_gpus:
        if mg.pos_vars is not None:
            for p, v in mg.pos_vars.items():
                b.m.hints[v] = int(p in mg.current)
    for k in b.c.keep.values():
        b.m.hints[k] = 1
    for x in b.c.bins:
        if x.gpu is not None:
            b.m.hints[x.open_var] = 1
    pattern_hints(b.c, b.m.hints)


def pattern_hints(c: Compiled, hints: dict[int, int]) -> None:
    """Complete `hints` with the co-location patterns (contract 5.2) their share
    variables imply: p[b, n] = 1 for the class counts the hint puts on bin b, and
    s[x, n] = x for that pattern (0 elsewhere). A bin whose counts match no pattern gets
    none (the hint is then partial there)."""
    if not c.patterns:
        return
    counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for x in c.classed:
        counts[x.bin][x.cls] += hints.get(x.var, 0)
    chosen: set[int] = set()
    for pat in c.patterns:
        want = {cls: n for cls, n in counts[pat.bin].items() if n}
        hit = dict(pat.counts) == want
        hints[pat.var] = int(hit)
        if hit:
            chosen.add(pat.var)
    for ps in c.pattern_shares:
        hints[ps.var] = hints.get(ps.share, 0) if ps.pattern in chosen else 0


def _share_bins(c: Compiled, placements: Mapping[str, list[Placement]],
                model_of: dict[tuple[str, int], str]) -> dict[tuple[str, int], int]:
    """(node, GPU) -> bin for the GPUs `placements` shares: concrete bins for theirs,
    virtual bins of the pool (in GPU order) for the others, while bins last."""
    concrete = {(x.pool[0], x.gpu): bi for bi, x in enumerate(c.bins) if x.gpu is not None}
    virtual: dict[PoolKey, list[int]] = defaultdict(list)
    for bi, x in enumerate(c.bins):
        if x.gpu is None:
            virtual[x.pool].append(bi)
    share_gpus: dict[PoolKey, list[int]] = defaultdict(list)
    for pls in placements.values():
        for p in pls:
            if p.fraction is not None and (p.node, p.gpu) not in concrete:
                key = (p.node, model_of[(p.node, p.gpu)])
                if p.gpu not in share_gpus[key]:
                    share_gpus[key].append(p.gpu)
    bin_of: dict[tuple[str, int], int] = dict(concrete)
    for key, gpus in share_gpus.items():
        for gpu, bi in zip(sorted(gpus), virtual.get(key, []), strict=False):
            bin_of[(key[0], gpu)] = bi
    return bin_of


class _Encoder:
    """The lookups `encode_hints` needs, built once per call."""

    def __init__(self, c: Compiled, placements: Mapping[str, list[Placement]]):
        req = c.request
        self.c = c
        self.hints: dict[int, int] = dict.fromkeys(range(c.model.num_vars), 0)
        self.whole = {(x.group, x.pool): x.var for x in c.whole}
        self.whole_running = {(x.job, x.pool): x.var for x in c.whole_running}
        self.share = {(x.group, x.bin): x.var for x in c.share}
        self.share_running = {(x.job, x.bin): x.var for x in c.share_running}
        self.mig = {(x.group, x.mig_gpu, x.profile): x.var for x in c.mig}
        self.mig_running = {(x.job, x.mig_gpu, x.profile): x.var for x in c.mig_running}
        self.mig_of = {(mg.node, mg.gpu): i for i, mg in enumerate(c.mig_gpus)}
        self.model_of = {(n.name, g.index): g.model for n in req.cluster.nodes for g in n.gpus}
        self.bin_of = _share_bins(c, placements, self.model_of)
        self.used_instances: dict[int, set[Instance]] = defaultdict(set)
        self.topology = Topology(req.cluster)

    def bump(self, var: int | None) -> None:
        """One more on `var` (up to its upper bound); None: not in the model."""
        if var is not None:
            self.hints[var] = min(self.c.model.ubs[var], self.hints[var] + 1)

    def gang(self, i: int, pls: list[Placement]) -> None:
        """The variables of gang i placed as `pls`."""
        gang = self.c.gangs[i]
        self.hints[gang.new] = 1
        model = self.model_of[(pls[0].node, pls[0].gpu)]
        if model in gang.models:
            self.hints[gang.models[model]] = 1
        z = gang.sizes.get((model, len(pls)))
        if z is not None:
            self.hints[z] = 1
        nodes = {q.node for q in pls}
        for level, doms in gang.required.items():
            used = self.topology.domains(nodes, level)
            for dm, v in doms.items():
                self.hints[v] = int(used == {dm})
        if gang.span_level is not None:
            used = self.topology.domains(nodes, gang.span_level)
            for dm, v in gang.spans.items():
                self.hints[v] = int(dm in used)
        for y, key in gang.parts:
            self.hints[y] = sum(1 for q in pls if q.node == key[0]
                                and self.model_of[(q.node, q.gpu)] == key[1])

    def placement(self, i: int, pls: list[Placement]) -> None:
        """The variables of job i placed anew as `pls` (running: moved; new: counted)."""
        p = pls[0]
        running = i in self.c.keep
        gi = -1 if running else self.c.group_of[i][0]
        if p.mig is not None:
            mg_i = self.mig_of.get((p.node, p.gpu))
            if mg_i is None:
                return
            self.used_instances[mg_i].add(p.mig.key())
            self.bump(self.mig_running.get((i, mg_i, p.mig.profile)) if running
                      else self.mig.get((gi, mg_i, p.mig.profile)))
        elif p.fraction is not None:
            share_bin = self.bin_of.get((p.node, p.gpu))
            if share_bin is not None:
                self.bump(self.share_running.get((i, share_bin)) if running
                          else self.share.get((gi, share_bin)))
        elif i in self.c.gangs:
            self.gang(i, pls)
        else:
            key = (p.node, self.model_of[(p.node, p.gpu)])
            self.bump(self.whole_running.get((i, key)) if running
                      else self.whole.get((gi, key)))


def encode_hints(c: Compiled, placements: Mapping[str, list[Placement]]) -> dict[int, int]:
    """Values of every variable that reproduce `placements` (a warm start for CP-SAT and
    CBC). Placements the model cannot express (a target pruned away, more share GPUs than
    virtual bins) are left out of the hint."""
    jobs = c.request.jobs
    idx = {j.name: i for i, j in enumerate(jobs)}
    enc = _Encoder(c, placements)
    hints = enc.hints
    for (node, gpu), bi in enc.bin_of.items():
        if any(p.fraction is not None and (p.node, p.gpu) == (node, gpu)
               for pls in placements.values() for p in pls):
            hints[c.bins[bi].open_var] = 1
    for name, pls in placements.items():
        i = idx.get(name)
        if i is None or not pls:
            continue
        job = jobs[i]
        if i in c.keep and job.current and same_placement(pls, job.current):
            hints[c.keep[i]] = 1
            for p in pls:
                if p.mig is not None and (p.node, p.gpu) in enc.mig_of:
                    enc.used_instances[enc.mig_of[(p.node, p.gpu)]].add(p.mig.key())
            continue
        enc.placement(i, pls)
    for mg_i, mg in enumerate(c.mig_gpus):
        if mg.pos_vars is None:
            continue
        layout = set(enc.used_instances.get(mg_i, set()))
        for inst, v in mg.pos_vars.items():
            hints[v] = int(inst in layout)
    pattern_hints(c, hints)
    return hints
