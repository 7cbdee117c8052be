"""External arrival orders: replay another simulator's pod sequence (`--order FILE`).

An order file lists pod names in arrival order:

- text: one name per line (blank lines and lines starting with `#` are skipped);
- JSON: a list of names, or an object `{"pods": [...], "node_tie_ranks": {node: rank}}`
  whose optional ranks fix the node preference among equal scores (lower first; every
  node of the cluster must have one). Without ranks the run draws them from the seed.

A name is an original pod of the workload, or a copy `NAME-tuned-K` of original NAME
(K any integer: the paper's simulator numbers its copies 0, 1, ...). A name may appear
once. `write_order` writes the JSON form, ranks included, so any sequence the harness
builds can be fed to another simulator and back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.openb.inflation import COPY_MARK, Arrivals
from benchmarks.openb.loader import OpenbNodes, OpenbPods


def parse_order(text: str) -> tuple[list[str], dict[str, int] | None]:
    """The pod names and optional node ranks of an order file's content (ValueError)."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            data: Any = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON: {e.msg} at line {e.lineno}") from None
        ranks = None
        if isinstance(data, dict):
            unknown = set(data) - {"pods", "node_tie_ranks"}
            if unknown or "pods" not in data:
                raise ValueError("a JSON order object has `pods` and optional "
                                 "`node_tie_ranks`, nothing else")
            raw_ranks = data.get("node_tie_ranks")
            data = data["pods"]
            if raw_ranks is not None:
                if not isinstance(raw_ranks, dict) or not all(
                        isinstance(v, int) and not isinstance(v, bool)
                        for v in raw_ranks.values()):
                    raise ValueError("`node_tie_ranks` maps node names to integers")
                ranks = {str(k): int(v) for k, v in raw_ranks.items()}
        if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
            raise ValueError("`pods` is a list of pod names")
        return [n.strip() for n in data], ranks
    names = [line.strip() for line in text.splitlines()]
    return [n for n in names if n and not n.startswith("#")], None


def original_of(name: str, known: dict[str, int]) -> int:
    """Index of the original pod `name` stands for (itself or NAME-tuned-K); ValueError."""
    if name in known:
        return known[name]
    base, mark, k = name.rpartition(COPY_MARK)
    if mark and k.lstrip("-").isdigit() and base in known:
        return known[base]
    raise ValueError(f"pod {name!r} is neither a pod of the workload nor NAME{COPY_MARK}K")


def arrivals_from_order(names: list[str], ranks: dict[str, int] | None, pods: OpenbPods,
                        nodes: OpenbNodes) -> Arrivals:
    """The arrival sequence `names` over the original `pods` (and node ranks); ValueError."""
    if not names:
        raise ValueError("the order lists no pod")
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"pod {n!r} appears twice")
        seen.add(n)
    known = {n: i for i, n in enumerate(pods.names)}
    index = [original_of(n, known) for n in names]
    tie_rank = None
    if ranks is not None:
        node_ix = {n: i for i, n in enumerate(nodes.names)}
        extra = sorted(set(ranks) - set(node_ix))
        missing = [n for n in nodes.names if n not in ranks]
        if extra:
            raise ValueError(f"node_tie_ranks names unknown node {extra[0]!r}")
        if missing:
            raise ValueError(f"node_tie_ranks has no rank for node {missing[0]!r} "
                             f"({len(missing)} missing)")
        tie_rank = np.array([ranks[n] for n in nodes.names], dtype=np.int64)
    return Arrivals(pods.take(index).renamed(list(names)), tie_rank)


def read_order(path: Path, pods: OpenbPods, nodes: OpenbNodes) -> Arrivals:
    """Read an order file (module docstring); ValueError / OSError on bad input."""
    names, ranks = parse_order(path.read_text(encoding="utf-8"))
    return arrivals_from_order(names, ranks, pods, nodes)


def write_order(arrivals: Arrivals, nodes: OpenbNodes, path: Path) -> None:
    """Write `arrivals` as a JSON order file (with its node ranks when it has them)."""
    data: dict[str, Any] = {"pods": list(arrivals.pods.names)}
    if arrivals.tie_rank is not None:
        data["node_tie_ranks"] = {n: int(r) for n, r in
                                  zip(nodes.names, arrivals.tie_rank, strict=True)}
    path.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
