"""Contract rules shared by every planner: eligibility, job size and value (section 4).

A model is eligible for a job when (a) the job's throughput map is empty/absent or lists the
model, (b) `allowed_models` is absent or lists it, (c) its memory covers `gpu_memory_gib`
(unknown memory never constrains), and (d) the shape fits the hardware: whole and shared
jobs need a model that can run whole GPUs (any model), MIG jobs need a MIG profile that
covers their demand.

This module is the one home of the contract's domain rules that every planner shares (the
validator re-derives what it checks on purpose): eligibility, size and value, host fit with
its one tolerance (`HOST_TOL`), the strict priority order and the objectives' horizon.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from models.catalog import GpuModel, MigProfileSpec
from models.request import Job, speed

#: Tolerance of every capacity comparison (host CPU / memory, GPU fractions and memory): the
#: validator's, so that nothing a planner accepts is rejected later.
HOST_TOL = 1e-9

#: Normalising horizon of the `jct` and `makespan` objectives (seconds).
HORIZON_S = 3600.0


def host_fits(cpu: float, mem: float, cpu_free: float | None, mem_free: float | None) -> bool:
    """Whether `cpu` millicores and `mem` GiB fit in what a node has free (None = no limit)."""
    return not ((cpu_free is not None and cpu > cpu_free + HOST_TOL)
                or (mem_free is not None and mem > mem_free + HOST_TOL))


def host_room(cpu_each: float, mem_each: float, cpu_free: float | None,
              mem_free: float | None, limit: int = 1 << 30) -> int:
    """How many parts of (`cpu_each`, `mem_each`) fit in what a node has free (<= limit)."""
    room = limit
    if cpu_free is not None and cpu_each > 0:
        room = min(room, math.floor((cpu_free + HOST_TOL) / cpu_each))
    if mem_free is not None and mem_each > 0:
        room = min(room, math.floor((mem_free + HOST_TOL) / mem_each))
    return max(room, 0)


def priority_key(job: Job) -> tuple[float, float, str]:
    """The strict order of `priority_fifo` and of every FIFO pass: weight desc, submitted_at
    asc, name."""
    sub = job.submitted_at if job.submitted_at is not None else math.inf
    return (-job.weight, sub, job.name)


def mig_profiles_for(job: Job, model: GpuModel) -> list[MigProfileSpec]:
    """The profiles of `model` that can host MIG job `job` (smallest first)."""
    if job.mig_profile is not None:
        spec = model.profile(job.mig_profile)
        return [spec] if spec is not None else []
    if job.mig is None:
        return []
    need_c, need_m = job.mig.compute_slices, job.mig.memory_gib
    out = [p for p in model.mig_profiles
           if p.compute_slices >= need_c and p.memory_gib >= need_m - 1e-9]
    return sorted(out, key=lambda p: (p.compute_slices, p.memory_slices, p.media_extensions))


def model_eligible(job: Job, name: str, model: GpuModel) -> bool:
    """Whether `job` may be placed on GPUs of model `name` (ignoring capacity)."""
    if job.throughput and name not in job.throughput:
        return False
    if job.allowed_models is not None and name not in job.allowed_models:
        return False
    if job.shape == "mig":
        return bool(mig_profiles_for(job, model))
    need = job.gpu_memory_gib
    return not (need is not None and model.memory_gib is not None
                and model.memory_gib < need - 1e-9)


def eligible_models(job: Job, catalog: Mapping[str, GpuModel]) -> list[str]:
    """Names of every catalog model `job` may run on."""
    return [n for n, m in catalog.items() if model_eligible(job, n, m)]


def job_size(job: Job, model: GpuModel) -> float:
    """size_j: GPUs for a gang, demanded compute slices / total for MIG, the share else."""
    if job.gpus is not None:
        return float(job.gpus)
    if job.gpu_share is not None:
        return job.gpu_share
    if job.mig is not None:
        return job.mig.compute_slices / model.compute_slices
    spec = model.profile(job.mig_profile or "")
    return spec.compute_slices / model.compute_slices if spec is not None else 0.0


def job_value(job: Job, name: str, catalog: Mapping[str, GpuModel]) -> float:
    """weight_j * size_j * speed_j(model): the job's throughput value on model `name`."""
    model = catalog[name]
    return job.weight * job_size(job, model) * speed(job, name, catalog)
