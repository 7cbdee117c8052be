"""Co-location patterns of a share bin (contract 5.2): which multisets of interference
classes one GPU can host, and each class's speed factor in each.

Why patterns. A shared job's value is multiplied by the product of its co-residents'
factors, which is not linear in the placements. Pair variables z[j, k, g] = x[j, g] *
x[k, g] price a GPU exactly only while at most two classed jobs share it: with three, a
job's factor is s(a, b) * s(a, c), a product the pair terms can only add. Pattern
variables are exact for any number of co-residents: p[b, n] = 1 picks the count vector n
(jobs of each class on bin b), every factor is then a constant F_c(n), and the value
correction (F_c(n) - 1) * value is linear in p (a class whose jobs on b are all worth the
same) or in the split s[x, n] of a share variable x over the patterns (x = sum_n s[x, n],
sum_{x of class c} s[x, n] = n_c p[b, n]: the disaggregated form, whose LP relaxation is
tighter than big-M products of x and p). Their number is the number of count vectors
whose smallest shares fit one GPU, small for the shares that real co-location uses (two
to four jobs a GPU); past `MAX_PATTERNS` per bin or `MAX_MODEL_PATTERNS` in all the model
is refused (`PatternsTooMany`), before any variable is made, and the planners fall back to
their heuristics (`auto`: to the pruned model). Identical bins (the virtual bins of a pool)
share one enumeration. Per-GPU patterns grow fast with the classes: on the co-location
benchmark (`gpuplan bench colocation`, 26 classes, two shares a GPU) 24, 48 and 96 jobs
give 864-1,224, 5,184-6,408 and 17,568 patterns; CP-SAT found no solution at all in 5 s
on the last (19,170 variables, its limit overrun by 0.4 s on a loaded machine), while the
share re-pack (solver/share_packing.py, patterns per class of identical GPUs) reaches the
optimum in well under a second, hence the cap of 8,192. Measured: on random requests of up to 32
GPUs with most jobs shared and three classes the exact backends prove optima within
seconds up to about 16 jobs; with 40 jobs, 20 shared GPUs and speedups up to 2, the LP
relaxation lets fractional jobs chase the large factors and neither backend closes the
gap in a minute (tests/solver/test_interference.py).

Only classes in some pair with a speed other than 1 matter (`interference_table` drops the
others); a bin where every pattern has every factor 1 gets no pattern at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from models.rules import HOST_TOL, InterferenceTable, colocation_factor
from solver.linear import ModelTooLarge, check_deadline

#: Most patterns enumerated for one bin, and for one model (all bins together).
MAX_PATTERNS = 4096
MAX_MODEL_PATTERNS = 8192

#: (class, count) with count > 0, sorted by class.
Counts = tuple[tuple[str, int], ...]


class PatternsTooMany(ModelTooLarge):
    """A bin has more co-location patterns than `MAX_PATTERNS`."""


def class_caps(demand: Mapping[str, tuple[int, float]]) -> dict[str, int]:
    """Per class, the most of its jobs one GPU can hold: min(jobs that may go there,
    floor(1 / its smallest share)). `demand`: class -> (jobs, smallest share)."""
    return {c: min(n, math.floor((1.0 + HOST_TOL) / share))
            for c, (n, share) in demand.items() if n > 0 and share > 0}


def bin_patterns(demand: Mapping[str, tuple[int, float]], table: InterferenceTable
                 ) -> list[tuple[Counts, dict[str, float]]] | None:
    """Every count vector n of the classes in `demand` (class -> (jobs that may go on
    the bin, their smallest share)) whose smallest shares sum to <= 1, with the factor
    F_c(n) of each class present; None when no factor differs from 1 (the bin needs no
    pattern). The empty pattern comes first."""
    caps = class_caps(demand)
    classes = sorted(caps)
    share = {c: demand[c][1] for c in classes}
    out: list[tuple[Counts, dict[str, float]]] = []
    counts: list[tuple[str, int]] = []

    def walk(i: int, room: float) -> None:
        if i == len(classes):
            out.append((tuple(counts), {}))
            if len(out) > MAX_PATTERNS:
                raise PatternsTooMany(f"more than {MAX_PATTERNS} co-location patterns on "
                                      "one GPU")
            if len(out) % 256 == 0:
                check_deadline()
            return
        c = classes[i]
        for n in range(caps[c] + 1):
            if n and n * share[c] > room + HOST_TOL:
                break
            if n:
                counts.append((c, n))
            walk(i + 1, room - n * share[c])
            if n:
                counts.pop()

    walk(0, 1.0)
    changed = False
    for n, factors in out:
        members = [c for c, k in n for _ in range(k)]
        for c, _k in n:
            rest = list(members)
            rest.remove(c)
            f = colocation_factor(c, rest, table)
            factors[c] = f
            changed = changed or f != 1.0
    return out if changed else None
