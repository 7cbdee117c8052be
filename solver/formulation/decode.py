"""Read a solution back: variable values to concrete placements (GPU indices, MIG instances).

The model counts; decoding names. Kept jobs keep their placements; count variables take
their group's members in priority order; whole GPUs come from each pool's free usable GPUs
in index order, virtual share bins take a free GPU each, and MIG jobs take the instances of
their GPU's final layout that kept jobs do not hold (by start). New MIG placements are then
right-sized (solver/formulation/right_size.py).
"""

from __future__ import annotations

from heuristics.result import HeuristicResult
from models import Instance, MigInstance, Placement
from solver.formulation.right_size import right_size_mig
from solver.formulation.tables import Compiled, PoolKey


class _Decoder:
    """The free GPUs, bins and MIG instances a solution leaves, handed out in order."""

    def __init__(self, c: Compiled, values: list[int]):
        self.c = c
        self.values = values
        jobs = c.request.jobs
        self.kept = {r for r, k in c.keep.items() if values[k] >= 1}
        self.out: dict[str, list[Placement]] = {
            jobs[r].name: [p.model_copy() for p in jobs[r].current or []] for r in self.kept}
        self.used: dict[int, int] = {}
        self.free = self._free_gpus()
        self.bin_gpu: dict[int, int] = {}
        self.avail: dict[tuple[int, str], list[Instance]] = {}

    def _free_gpus(self) -> dict[PoolKey, list[int]]:
        """Free usable GPUs per pool after kept whole jobs and open concrete share bins."""
        free: dict[PoolKey, list[int]] = {}
        for key, pool in self.c.pools.items():
            busy: set[int] = set()
            for gpu, rs in pool.whole_occ.items():
                if any(r in self.kept for r in rs):
                    busy.add(gpu)
            for b in self.c.bins:
                if b.pool == key and b.gpu is not None and self.values[b.open_var] >= 1:
                    busy.add(b.gpu)
            free[key] = [g for g in sorted(pool.usable) if g not in busy]
        return free

    def take(self, key: PoolKey, n: int) -> list[int]:
        """The first `n` free GPUs of pool `key`."""
        got, self.free[key] = self.free[key][:n], self.free[key][n:]
        if len(got) < n:
            raise AssertionError(f"decode: pool {key} short of GPUs")
        return got

    def members(self, gi: int, n: int) -> list[int]:
        """The next `n` members of group `gi` (priority order)."""
        start = self.used.get(gi, 0)
        self.used[gi] = start + n
        return self.c.groups[gi].members[start:start + n]

    def take_instance(self, mg_i: int, prof: str) -> Placement:
        """The first free instance of profile `prof` on MIG GPU `mg_i`."""
        lst = self.avail.get((mg_i, prof), [])
        if not lst:
            raise AssertionError("decode: MIG instance short")
        inst = lst.pop(0)
        mg = self.c.mig_gpus[mg_i]
        return Placement(node=mg.node, gpu=mg.gpu,
                         mig=MigInstance(profile=inst.profile, start=inst.start))

    def whole(self) -> None:
        """Whole GPUs: single-node gangs (groups, then moved running jobs), then gangs."""
        jobs, values, out = self.c.request.jobs, self.values, self.out
        for v, gi, key in self.c.whole:
            if values[v]:
                for j in self.members(gi, values[v]):
                    out[jobs[j].name] = [Placement(node=key[0], gpu=x)
                                         for x in self.take(key, jobs[j].gpus or 1)]
        for v, r, key in self.c.whole_running:
            if values[v]:
                out[jobs[r].name] = [Placement(node=key[0], gpu=x)
                                     for x in self.take(key, jobs[r].gpus or 1)]
        for j, gang in self.c.gangs.items():
            if values[gang.new]:
                out[jobs[j].name] = [Placement(node=key[0], gpu=x) for y, key in gang.parts
                                     for x in self.take(key, values[y])]

    def shared(self) -> None:
        """Open virtual bins take a free GPU each; shared jobs go to their bins' GPUs."""
        jobs, values, out, c = self.c.request.jobs, self.values, self.out, self.c
        for bi, b in enumerate(c.bins):
            if b.gpu is not None:
                self.bin_gpu[bi] = b.gpu
            elif values[b.open_var]:
                self.bin_gpu[bi] = self.take(b.pool, 1)[0]
        for v, gi, bi in c.share:
            if values[v]:
                for j in self.members(gi, values[v]):
                    out[jobs[j].name] = [Placement(node=c.bins[bi].pool[0],
                                                   gpu=self.bin_gpu[bi],
                                                   fraction=jobs[j].gpu_share)]
        for v, r, bi in c.share_running:
            if values[v]:
                out[jobs[r].name] = [Placement(node=c.bins[bi].pool[0], gpu=self.bin_gpu[bi],
                                               fraction=jobs[r].gpu_share)]

    def mig(self) -> None:
        """The final layout's instances, minus those kept jobs hold, go to new placements."""
        jobs, values, out, c = self.c.request.jobs, self.values, self.out, self.c
        for mg_i, mg in enumerate(c.mig_gpus):
            if mg.pos_vars is None:
                layout = set(mg.current)
            else:
                layout = {p for p, v in mg.pos_vars.items() if values[v]}
            held = {p.mig.key() for r in self.kept for p in jobs[r].current or []
                    if p.mig is not None and (p.node, p.gpu) == (mg.node, mg.gpu)}
            for inst in sorted(layout - held, key=lambda i: (i.start, i.profile)):
                self.avail.setdefault((mg_i, inst.profile), []).append(inst)
        for v, gi, mg_i, prof in c.mig:
            if values[v]:
                for j in self.members(gi, values[v]):
                    out[jobs[j].name] = [self.take_instance(mg_i, prof)]
        for v, r, mg_i, prof in c.mig_running:
            if values[v]:
                out[jobs[r].name] = [self.take_instance(mg_i, prof)]


def decode(c: Compiled, values: list[int]) -> HeuristicResult:
    """Turn variable values into concrete placements (GPU indices, MIG instances)."""
    d = _Decoder(c, values)
    d.whole()
    d.shared()
    d.mig()
    jobs = c.request.jobs
    right_size_mig(c.request, d.out, kept={jobs[r].name for r in d.kept})
    return HeuristicResult(placements=d.out)
