"""The generator's topology option: the same instance with a zone / block / rack hierarchy
and required / preferred levels on gangs spanning nodes, planned validly."""

from __future__ import annotations

from benchmarks.generator import generate_custom
from models.capacity import Topology
from solver import plan
from solver.validate import validate_plan

LEVELS = ("zone", "block", "rack")


def test_topology_option_adds_levels_only() -> None:
    plain = generate_custom(1024, 300, seed=3)
    topo = generate_custom(1024, 300, seed=3, topology=LEVELS)
    assert topo.cluster.topology_levels == list(LEVELS)
    # the same nodes and job demands (the running state is built under the topology rules)
    assert [(n.name, [g.model for g in n.gpus]) for n in topo.cluster.nodes] == [
        (n.name, [g.model for g in n.gpus]) for n in plain.cluster.nodes]
    demand = ("gpus", "single_node", "same_domain", "mig", "gpu_share", "throughput", "weight")
    assert [j.model_dump(include=set(demand)) for j in topo.jobs] == [
        j.model_dump(include=set(demand)) for j in plain.jobs]
    t = Topology(topo.cluster)
    names = [n.name for n in topo.cluster.nodes]
    assert len(t.domains(names, "rack")) == len(names) // 16
    assert len(t.domains(names, "block")) == len(names) // 64
    assert all(t.nested("rack", lv) for lv in LEVELS)
    gangs = [j for j in topo.jobs if not j.single_node]
    assert any(j.topology and j.topology.required == "block" for j in gangs)
    assert any(j.topology and j.topology.preferred == "rack" for j in gangs)
    assert all(j.topology is None for j in topo.jobs if j.single_node)


def test_topology_instance_plans_validly() -> None:
    req = generate_custom(256, 120, seed=1, topology=LEVELS)
    req = req.model_copy(update={"policy": req.policy.model_copy(
        update={"solver": "heuristic", "time_limit_s": 5.0})})
    result = plan(req)
    assert validate_plan(req, result) == []
