"""Request examples shown in the OpenAPI documentation (and used by "Try it out").

The first example of each body is the playground's default and solves to a real plan:
the contract's small mixed cluster with MIG. The JSON files ship inside the package
(`api/static/examples/`), so an installed server has them.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

from fastapi.openapi.models import Example

EXAMPLES_DIR = Path(__file__).resolve().parent / "static" / "examples"


@cache
def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES_DIR / name).read_text())
    return data


def small_mixed_request() -> dict[str, Any]:
    """The contract's small mixed cluster (A100 with MIG, H100, V100) and its job queue."""
    req = copy.deepcopy(_load("small-mixed.request.json"))
    req["policy"]["time_limit_s"] = 2
    return req


def mig_puzzle_request() -> dict[str, Any]:
    """One empty MIG A100 and four inference slices that fit only in one layout."""
    return copy.deepcopy(_load("mig-puzzle.request.json"))


def mig_puzzle_plan() -> dict[str, Any]:
    """An answer to the MIG puzzle (for the validate example)."""
    return copy.deepcopy(_load("mig-puzzle.plan.json"))


def elastic_gangs_request() -> dict[str, Any]:
    """Elastic gangs (contract 5.1): a pretraining gang of 4-16 GPUs, a running 1-8 GPU
    job, a linear 1-2 GPU sweep, beside a fixed gang and a shared inference service."""
    return copy.deepcopy(_load("elastic-gangs.request.json"))


def colocation_request() -> dict[str, Any]:
    """Shared V100s, four training job types with Gavel's measured co-location factors."""
    return copy.deepcopy(_load("colocation.request.json"))


def quotas_priority_request() -> dict[str, Any]:
    """Tenant quotas with a parent (guarantees, limits, borrowing and reclaim) and three
    priority classes (contract 5.3 / 5.4)."""
    req = copy.deepcopy(_load("quotas-priority.request.json"))
    req["policy"] = {"solver": "auto", "time_limit_s": 2}
    return req


def gangs_and_slices_request() -> dict[str, Any]:
    """Two racks: training gangs (one spanning nodes) and inference MIG slices / shares."""
    def node(name: str, model: str, domain: str, mig: tuple[int, ...] = ()) -> dict[str, Any]:
        return {
            "name": name, "topology_domain": domain, "labels": {"rack": domain},
            "cpu_millicores": 96000, "memory_gib": 768,
            "gpus": [{"index": i, "model": model, "mig_enabled": i in mig} for i in range(8)],
        }

    return {
        "cluster": {"nodes": [
            node("h100-a", "H100-SXM5-80GB", "nvl-1"),
            node("h100-b", "H100-SXM5-80GB", "nvl-1"),
            node("a100-a", "A100-SXM4-80GB", "nvl-2", mig=(4, 5, 6, 7)),
            node("l40s-a", "L40S-48GB", "pcie-1"),
        ]},
        "jobs": [
            {"name": "llama-pretrain", "tenant": "llm", "weight": 2.0, "gpus": 16,
             "single_node": False, "same_domain": True, "gpu_memory_gib": 70,
             "throughput": {"H100-SXM5-80GB": 2.5, "A100-SXM4-80GB": 1.0}},
            {"name": "vit-finetune", "tenant": "vision", "gpus": 4, "gpu_memory_gib": 40},
            {"name": "diffusion-train", "tenant": "vision", "gpus": 4,
             "throughput": {"A100-SXM4-80GB": 1.0, "L40S-48GB": 0.8}},
            {"name": "asr-serving", "kind": "inference", "tenant": "speech", "weight": 3.0,
             "mig": {"compute_slices": 1, "memory_gib": 10}},
            {"name": "rerank-serving", "kind": "inference", "tenant": "search", "weight": 3.0,
             "mig": {"compute_slices": 2, "memory_gib": 20}},
            {"name": "chat-serving", "kind": "inference", "tenant": "llm", "weight": 3.0,
             "mig_profile": "3g.40gb"},
            {"name": "embed-serving", "kind": "inference", "tenant": "search", "weight": 2.0,
             "gpu_share": 0.5, "gpu_memory_gib": 16},
        ],
        "policy": {"objective": "throughput", "solver": "auto", "time_limit_s": 2},
    }


def topology_levels_request() -> dict[str, Any]:
    """A zone / block / rack hierarchy (contract 5.5): a gang that must stay in one block
    and prefers one rack, one that must stay in one rack, one that prefers one rack."""
    nodes = [{"name": f"h100-{k}", "topology": {"zone": "z1", "block": block, "rack": rack},
              "gpus": [{"index": i, "model": "H100-SXM5-80GB"} for i in range(4)]}
             for k, (block, rack) in enumerate((("b1", "r1"), ("b1", "r1"), ("b1", "r2"),
                                                ("b2", "r1"), ("b2", "r1"), ("b2", "r2")))]
    return {
        "cluster": {"topology_levels": ["zone", "block", "rack"], "nodes": nodes},
        "jobs": [
            {"name": "llm-pretrain", "tenant": "llm", "weight": 2.0, "gpus": 12,
             "single_node": False, "topology": {"required": "block", "preferred": "rack"}},
            {"name": "moe-finetune", "tenant": "llm", "gpus": 8, "single_node": False,
             "topology": {"required": "rack"}},
            {"name": "vit-train", "tenant": "vision", "gpus": 6, "single_node": False,
             "topology": {"preferred": "rack"}},
            {"name": "embed-serving", "kind": "inference", "tenant": "search",
             "gpu_share": 0.5, "gpu_memory_gib": 16},
        ],
        "policy": {"objective": "throughput", "solver": "auto", "time_limit_s": 2,
                   "topology_cost": 0.25},
    }


def plan_request_examples() -> dict[str, Example]:
    """Examples of a PlanRequest body, the default first."""
    return {
        "small-mixed": Example(
            summary="Small mixed cluster with MIG",
            description="A100 (two GPUs in MIG mode), H100 and V100 nodes; an 8-GPU gang, "
                        "sweeps, a non-preemptible running job, MIG inference and notebooks.",
            value=small_mixed_request(),
        ),
        "gangs-and-slices": Example(
            summary="Training gangs and inference slices",
            description="A 16-GPU gang across one NVLink domain, smaller gangs, and MIG / "
                        "shared inference services.",
            value=gangs_and_slices_request(),
        ),
        "elastic-gangs": Example(
            summary="Elastic gangs (v1.1)",
            description="The planner picks each elastic gang's size among its allowed "
                        "sizes, valued by its speedup curve; resizing a running one is a "
                        "migration.",
            value=elastic_gangs_request(),
        ),
        "mig-puzzle": Example(
            summary="MIG layout puzzle",
            description="Four slices that fit one A100-40GB only in one layout.",
            value=mig_puzzle_request(),
        ),
        "topology-levels": Example(
            summary="Topology levels (zone / block / rack)",
            description="Gangs that must stay in one block or rack, or prefer one rack "
                        "(policy.topology_cost per extra rack).",
            value=topology_levels_request(),
        ),
        "colocation": Example(
            summary="Co-location interference",
            description="Half-GPU training jobs with interference classes and Gavel's "
                        "measured pair factors (contract 5.2): the planner pairs the jobs "
                        "that slow each other least.",
            value=colocation_request(),
        ),
        "quotas-priority": Example(
            summary="Quotas with borrowing and reclaim, priority classes",
            description="Two tenants under a parent quota: research borrows idle H100s, "
                        "prod (a higher class) reclaims its guarantee; batch jobs of the "
                        "lowest class stay within their limit.",
            value=quotas_priority_request(),
        ),
    }


def validate_examples() -> dict[str, Example]:
    """Examples of a validate body (a request and a plan)."""
    broken = mig_puzzle_plan()
    broken["assignments"][1]["placements"][0]["mig"] = {"profile": "2g.10gb", "start": 4}
    return {
        "valid": Example(summary="A valid plan for the MIG puzzle",
                         value={"request": mig_puzzle_request(), "plan": mig_puzzle_plan()}),
        "overlap": Example(summary="A plan whose MIG instances overlap",
                           value={"request": mig_puzzle_request(), "plan": broken}),
    }
