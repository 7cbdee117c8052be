"""The formulation's data: the hardware it sees, its variable tables and the compiled model.

Every variable the builder creates is listed in one of the tables below, a named row per
variable (`GroupOnPool`, `RunningOnBin`, ...) that says which job or group it places where.
Decoding (solver/formulation/decode.py) and hint encoding (solver/formulation/hints.py)
read these tables and nothing else of the builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from models import Instance, PlanRequest
from solver.linear import LinearModel, Terms

#: A pool's key: (node name, GPU model).
PoolKey = tuple[str, str]


@dataclass
class Pool:
    """Non-MIG GPUs of one model on one node."""

    node: str
    model: str
    #: every GPU index of this model on the node
    gpus: list[int]
    #: the GPUs a plan may use: healthy, on a schedulable node
    usable: list[int]
    #: GPU -> the running jobs (request indices) holding it whole now
    whole_occ: dict[int, list[int]] = field(default_factory=dict)
    #: GPU -> the running jobs (request indices) sharing it now
    share_occ: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class Bin:
    """A GPU in share mode: a concrete one (already hosting shared jobs) or a virtual one."""

    pool: PoolKey
    #: the GPU index; None for a virtual bin, mapped to a free GPU of its pool on decode
    gpu: int | None
    #: open[b] = 1 iff the bin's GPU is in share mode in the plan
    open_var: int
    usable: bool


@dataclass
class MigGpu:
    """A MIG-enabled GPU and its layout variables (or fixed layout)."""

    node: str
    gpu: int
    model: str
    usable: bool
    #: every (profile, start) instance the GPU's model allows
    positions: list[Instance]
    #: v[g, i] per position; None when the layout stays the current one
    pos_vars: dict[Instance, int] | None
    current: frozenset[Instance]


@dataclass
class Group:
    """Identical new jobs (request indices), members in priority order."""

    members: list[int]
    shape: str


class GroupRank(NamedTuple):
    """Where a new job sits: its group and its rank among the group's members."""

    group: int
    rank: int


class GroupOnPool(NamedTuple):
    """c[G, p]: members of group G placed as whole single-node gangs in pool p."""

    var: int
    group: int
    pool: PoolKey


class RunningOnPool(NamedTuple):
    """mv[r, p]: running job r moves, as a whole single-node gang, to pool p."""

    var: int
    job: int
    pool: PoolKey


class GangPart(NamedTuple):
    """y[j, p]: GPUs of multi-node gang j in pool p."""

    var: int
    pool: PoolKey


@dataclass
class Gang:
    """The variables of one gang that may span nodes (new or running, never grouped)."""

    #: new[j] = 1 iff the gang gets a new placement
    new: int
    #: y[j, p] per pool where the gang is eligible
    parts: list[GangPart] = field(default_factory=list)
    #: u[j, m] per eligible model: the gang runs on model m
    models: dict[str, int] = field(default_factory=dict)
    #: elastic gangs: z[j, m, n] per eligible model m and allowed size n (the gang runs on
    #: n GPUs of m), keyed (m, n); empty for a fixed gang
    sizes: dict[tuple[str, int], int] = field(default_factory=dict)
    #: d[j, L, D] per required topology level L (v1's same_domain: L = "domain"; "host"
    #: for a single-node elastic gang) and domain D of it: the gang runs in domain D of L
    required: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the preferred level where the gang pays topology costs (None: it pays none)
    span_level: str | None = None
    #: s[j, D] per domain D of `span_level`: the gang uses domain D
    spans: dict[str, int] = field(default_factory=dict)


class GroupOnBin(NamedTuple):
    """a[G, b]: members of group G sharing bin b."""

    var: int
    group: int
    bin: int


class RunningOnBin(NamedTuple):
    """ms[r, b]: running shared job r moves to bin b."""

    var: int
    job: int
    bin: int


class GroupOnMig(NamedTuple):
    """m[G, g, pi]: members of group G on instances of profile pi of MIG GPU g."""

    var: int
    group: int
    mig_gpu: int
    profile: str


class RunningOnMig(NamedTuple):
    """mm[r, g, pi]: running MIG job r moves to an instance of profile pi of MIG GPU g."""

    var: int
    job: int
    mig_gpu: int
    profile: str


class ClassedShare(NamedTuple):
    """A share variable x that puts jobs of interference class `cls` on bin b: a[G, b],
    ms[r, b], or keep[r] of a running job sharing b's GPU now (contract 5.2)."""

    var: int
    bin: int
    cls: str
    #: request index of the job (a group's first member)
    job: int


class BinPattern(NamedTuple):
    """p[b, n] in {0, 1}: bin b hosts exactly n_c jobs of each interference class c;
    `counts` lists the (class, n_c) with n_c > 0, sorted by class."""

    var: int
    bin: int
    counts: tuple[tuple[str, int], ...]


class PatternShare(NamedTuple):
    """s[x, n] = x * p[b, n]: the jobs of share variable x when their bin has pattern n."""

    var: int
    share: int
    pattern: int


@dataclass
class Compiled:
    """The model plus everything needed to decode a solution into placements."""

    request: PlanRequest
    model: LinearModel
    pools: dict[PoolKey, Pool]
    bins: list[Bin]
    mig_gpus: list[MigGpu]
    groups: list[Group]
    #: running job -> keep[r] (1 iff it stays exactly where it runs)
    keep: dict[int, int]
    # Variable tables, in creation order.
    whole: list[GroupOnPool] = field(default_factory=list)
    whole_running: list[RunningOnPool] = field(default_factory=list)
    gangs: dict[int, Gang] = field(default_factory=dict)
    share: list[GroupOnBin] = field(default_factory=list)
    share_running: list[RunningOnBin] = field(default_factory=list)
    mig: list[GroupOnMig] = field(default_factory=list)
    mig_running: list[RunningOnMig] = field(default_factory=list)
    #: running job -> terms whose sum is 1 iff it is placed (kept or moved)
    placed_terms: dict[int, Terms] = field(default_factory=dict)
    #: group -> terms whose sum is the number of its members placed
    group_terms: dict[int, Terms] = field(default_factory=dict)
    #: new job -> its group and rank
    group_of: dict[int, GroupRank] = field(default_factory=dict)
    #: tenant -> throughput value terms of its jobs (the fairness objective's shares)
    tenant_terms: dict[str, Terms] = field(default_factory=dict)
    #: the throughput objective (whatever the compiled objective is), and its constant
    throughput_terms: Terms = field(default_factory=dict)
    throughput_const: float = 0.0
    #: whether pruning dropped any target (the model is then not exact)
    pruned: bool = False
    # Co-location interference (contract 5.2; empty without `interference` pairs).
    classed: list[ClassedShare] = field(default_factory=list)
    patterns: list[BinPattern] = field(default_factory=list)
    pattern_shares: list[PatternShare] = field(default_factory=list)
    #: Levels of contract 5.3 / 5.4 (filled only for requests with quotas or several
    #: priority classes; objective.py: `add_level_terms`): per priority class the
    #: objective's terms and constant over its own jobs, the same with throughput values,
    #: and per tenant its throughput value terms (the class's fairness shares).
    class_terms: dict[int, Terms] = field(default_factory=dict)
    class_const: dict[int, float] = field(default_factory=dict)
    class_throughput: dict[int, Terms] = field(default_factory=dict)
    class_tenant_terms: dict[int, dict[str, Terms]] = field(default_factory=dict)
    #: (tenant, model or "*") -> usage terms, in units of 1 / quota_scale GPU
    quota_terms: dict[tuple[str, str], Terms] = field(default_factory=dict)
    #: usage terms are multiplied by this (the lcm of the MIG models' compute slices), so
    #: that MIG sizes (k / 7, k / 4) are integers in the rows CP-SAT sees
    quota_scale: int = 1

    def placed_expr(self, job_index: int) -> tuple[Terms, float]:
        """(terms, threshold): the job is placed iff sum(terms) >= threshold."""
        if job_index in self.placed_terms:
            return self.placed_terms[job_index], 1.0
        g, rank = self.group_of[job_index]
        return self.group_terms[g], float(rank + 1)
