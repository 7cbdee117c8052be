"""The GPU capacity summary of a cluster: how many GPUs each node, domain and model has.

One pass over the cluster's GPUs counts, per node and per pool (model, MIG mode), the GPUs
that *count*: by default the usable ones (healthy, on a schedulable node: they alone take
new placements); a caller may count others (the LP bound also counts the GPUs a running job
holds now, since only a kept placement may use them). It also records, per node, the pools
present at all and, per (model, profile), how many counted MIG GPUs hold an instance of that
profile now. The planners' capacity questions are answered from it: how many GPUs of a pool
the cluster, its largest node or its largest topology domain has.

A node without a topology domain is a domain of its own (`domain_of`), as in the
formulation and the validator.

Topology levels (contract 5.5): `Topology` names the domain of every node at every level,
`cluster.topology_levels` widest first, then the implicit ones: "host" (the node itself)
and "domain" (v1's `topology_domain`, as `domain_of`). A domain at a listed level is keyed
by its path, the node's domains from the widest level down to that one, so rack "r1" of
block "b1" and rack "r1" of block "b2" are two racks and every domain lies in one domain of
each wider level. `CapacitySummary.most_in_one(level, pool)` is the capacity per domain
per level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from models.cache import per_request
from models.request import Cluster, Gpu, Node, PlanRequest

#: A GPU pool: (model name, MIG enabled).
Pool = tuple[str, bool]
#: Which GPUs a summary counts.
Counted = Callable[[Node, Gpu], bool]


def usable(node: Node, gpu: Gpu) -> bool:
    """A GPU that may take a new placement: healthy, on a schedulable node."""
    return node.schedulable and gpu.healthy


def domain_of(node: str, domain: str | None) -> str:
    """The topology domain of node `node`: its own when it names none."""
    return domain if domain is not None else f"\x00{node}"


#: The implicit topology levels (models.request.IMPLICIT_LEVELS): the node itself, and v1's
#: `topology_domain`.
HOST = "host"
DOMAIN = "domain"


def _path_key(parts: Iterable[str]) -> str:
    """A domain's path as one string ("/" separated, "/" and "\\" escaped: unique)."""
    return "/".join(p.replace("\\", "\\\\").replace("/", "\\/") for p in parts)


def node_domains(node: Node, levels: Iterable[str]) -> dict[str, str]:
    """level -> the domain key of `node` at that level, for `levels` (the cluster's
    `topology_levels`, widest first) and the implicit "host" and "domain"."""
    out = {HOST: node.name, DOMAIN: domain_of(node.name, node.topology_domain)}
    path: list[str] = []
    for level in levels:
        path.append(node.topology.get(level, ""))
        out[level] = _path_key(path)
    return out


class Topology:
    """The domain of every node of a cluster at every topology level (module doc)."""

    def __init__(self, cluster: Cluster) -> None:
        self.levels: tuple[str, ...] = tuple(cluster.topology_levels)
        self._of: dict[str, dict[str, str]] = {
            n.name: node_domains(n, self.levels) for n in cluster.nodes}

    def domain(self, node: str, level: str) -> str:
        """The domain key of the node named `node` at `level`."""
        return self._of[node][level]

    def domains(self, nodes: Iterable[str], level: str) -> set[str]:
        """The domains at `level` that the nodes named `nodes` lie in."""
        return {self._of[n][level] for n in nodes}

    def nested(self, narrow: str, wide: str) -> bool:
        """Whether every domain of level `narrow` lies in one domain of level `wide`:
        "host" in every level, a listed level in itself and every wider listed one."""
        if narrow in (wide, HOST):
            return True
        lv = self.levels
        return narrow in lv and wide in lv and lv.index(wide) <= lv.index(narrow)


@dataclass
class NodeCapacity:
    """One node: its counted GPUs per pool, the pools it has at all, its host capacity
    (None = unconstrained) and the counted MIG GPUs holding an instance of each profile."""

    name: str
    domain: str
    cpu: float | None
    mem: float | None
    gpus: dict[Pool, int] = field(default_factory=dict)
    present: set[Pool] = field(default_factory=set)
    #: (model, profile name) -> counted MIG GPUs with an instance of that profile now
    profiles: dict[tuple[str, str], int] = field(default_factory=dict)


def _count_profiles(profiles: dict[tuple[str, str], int], gpu: Gpu) -> None:
    """Count `gpu` once for each profile it holds an instance of now."""
    for prof in {i.profile for i in gpu.mig_instances}:
        key = (gpu.model, prof)
        profiles[key] = profiles.get(key, 0) + 1


class CapacitySummary:
    """Counted GPUs per node, topology domain and pool, from one pass over a cluster."""

    def __init__(self, cluster: Cluster, counted: Counted = usable) -> None:
        self.nodes: list[NodeCapacity] = []
        #: pool -> counted GPUs in the cluster
        self.totals: dict[Pool, int] = {}
        #: (domain, pool) -> counted GPUs in that domain
        self.domains: dict[tuple[str, Pool], int] = {}
        #: pool -> the most counted GPUs of it on one node
        self.node_most: dict[Pool, int] = {}
        #: (listed topology level, domain, pool) -> counted GPUs in that domain
        self.level_domains: dict[tuple[str, str, Pool], int] = {}
        #: pool -> the most counted GPUs of it in one topology domain (filled when asked)
        self._domain_most: dict[Pool, int] | None = None
        levels = tuple(cluster.topology_levels)
        totals, domains, node_most = self.totals, self.domains, self.node_most
        for node in cluster.nodes:
            s = NodeCapacity(node.name, domain_of(node.name, node.topology_domain),
                             node.cpu_millicores, node.memory_gib)
            gpus = s.gpus
            pools = [(gpu.model, gpu.mig_enabled) for gpu in node.gpus]
            s.present.update(pools)
            counts = [gpu for gpu in node.gpus if counted(node, gpu)]
            for gpu in counts:
                pool = (gpu.model, gpu.mig_enabled)
                gpus[pool] = gpus.get(pool, 0) + 1
            for gpu in counts:
                if gpu.mig_instances:
                    _count_profiles(s.profiles, gpu)
            for pool, c in gpus.items():
                totals[pool] = totals.get(pool, 0) + c
                dk = (s.domain, pool)
                domains[dk] = domains.get(dk, 0) + c
                if c > node_most.get(pool, 0):
                    node_most[pool] = c
            if levels:
                doms = node_domains(node, levels)
                for pool, c in gpus.items():
                    for level in levels:
                        lk = (level, doms[level], pool)
                        self.level_domains[lk] = self.level_domains.get(lk, 0) + c
            self.nodes.append(s)

    def total(self, pool: Pool) -> int:
        """Counted GPUs of `pool` in the cluster."""
        return self.totals.get(pool, 0)

    def most_on_one_node(self, pool: Pool) -> int:
        """The most counted GPUs of `pool` on one node."""
        return self.node_most.get(pool, 0)

    def most_in_one_domain(self, pool: Pool) -> int:
        """The most counted GPUs of `pool` in one topology domain."""
        most = self._domain_most
        if most is None:
            most = self._domain_most = {}
            for (_, p), c in self.domains.items():
                if c > most.get(p, 0):
                    most[p] = c
        return most.get(pool, 0)

    def most_in_one(self, level: str, pool: Pool) -> int:
        """The most counted GPUs of `pool` in one domain of topology level `level` ("host"
        and "domain" included)."""
        if level == HOST:
            return self.most_on_one_node(pool)
        if level == DOMAIN:
            return self.most_in_one_domain(pool)
        return max((c for (lv, _, p), c in self.level_domains.items()
                    if lv == level and p == pool), default=0)

    def pools_present(self) -> set[Pool]:
        """Every pool the cluster has a GPU of (counted or not)."""
        return {p for s in self.nodes for p in s.present}


def usable_summary(request: PlanRequest) -> CapacitySummary:
    """The `CapacitySummary` of `request`'s usable GPUs, built once per request object
    (`models.cache.per_request`: the compiled jobs read the pools present from it, the
    static reasons the capacities). Shared: its users must not mutate it."""
    return per_request(request, "capacity", lambda r: CapacitySummary(r.cluster))
