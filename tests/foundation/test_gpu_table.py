"""The cluster's GPU columns (models/gpu_table.py) say what the node and GPU objects say,
GPU by GPU in cluster order, repeated keys included; the validator's own GPU lookup keeps
the first GPU of a repeated key."""

from __future__ import annotations

import random

import pytest

from models.capacity import usable
from models.gpu_table import gpu_table
from models.request import Cluster, PlanRequest
from solver.validate import _GpuTable
from tests.solver.strategies import random_request


@pytest.mark.parametrize("seed", range(6))
def test_the_columns_are_the_gpus_in_cluster_order(seed: int) -> None:
    """Every column at position i is GPU i of the cluster, node by node; a request that
    repeats a node keeps both copies, and the validator's own lookup the first."""
    request = random_request(random.Random(seed), max_gpus=10, max_nodes=3)
    nodes = request.cluster.nodes
    if seed % 2:   # a repeated node (not a valid request, but the validator reads any)
        twin = nodes[0].model_copy(update={"gpus": [
            g.model_copy(update={"healthy": not g.healthy}) for g in nodes[0].gpus]})
        cluster = Cluster.model_construct(**{**dict(request.cluster), "nodes": [*nodes, twin]})
        request = PlanRequest.model_construct(**{**dict(request), "cluster": cluster})
        nodes = request.cluster.nodes
    table = gpu_table(request)
    want = [((n.name, g.index), g, i, g.model, usable(n, g), g.mig_enabled)
            for i, n in enumerate(nodes) for g in n.gpus]
    got = list(zip(table.keys, table.gpus, table.nodes, table.models, table.usable,
                   table.mig, strict=True))
    assert got == want
    catalog = request.cluster.catalog()
    lookup = _GpuTable(nodes, catalog)
    first: dict[tuple[str, int], object] = {}
    for n in nodes:
        for g in n.gpus:
            first.setdefault((n.name, g.index), (g, g.model, catalog.get(g.model),
                                                 g.mig_enabled))
    assert [(k, lookup[k]) for k in lookup] == list(first.items())
    assert all(lookup[k][0] is v[0] for k, v in first.items())  # type: ignore[index]
