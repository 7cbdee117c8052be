"""gpuplan's domain: the wire contract (requests, plans) and the GPU catalog.

This package imports nothing of the rest of gpuplan.
"""

from models.catalog import (
    BUILTIN_CATALOG,
    GpuModel,
    Instance,
    MigProfileSpec,
    instance_positions,
    is_maximal_layout,
    is_valid_layout,
    layout_violations,
    valid_layouts,
)
from models.plan import Assignment, MigChange, Plan, PlanStats, PlanStatus, Unplaced
from models.request import (
    Cluster,
    Elastic,
    Gpu,
    Job,
    MigDemand,
    MigInstance,
    Node,
    Placement,
    PlanRequest,
    Policy,
    Quota,
    speed,
)
from models.rules import (
    allowed_sizes,
    eligible_models,
    job_size,
    job_value,
    mig_profiles_for,
    model_eligible,
)

__all__ = [
    "BUILTIN_CATALOG",
    "Assignment",
    "Cluster",
    "Elastic",
    "Gpu",
    "GpuModel",
    "Instance",
    "Job",
    "MigChange",
    "MigDemand",
    "MigInstance",
    "MigProfileSpec",
    "Node",
    "Placement",
    "Plan",
    "PlanRequest",
    "PlanStats",
    "PlanStatus",
    "Policy",
    "Quota",
    "Unplaced",
    "allowed_sizes",
    "eligible_models",
    "instance_positions",
    "is_maximal_layout",
    "is_valid_layout",
    "job_size",
    "job_value",
    "layout_violations",
    "mig_profiles_for",
    "model_eligible",
    "speed",
    "valid_layouts",
]
