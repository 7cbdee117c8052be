"""Contract rules shared by every planner: eligibility, job size and value (section 4).

A model is eligible for a job when (a) the job's throughput map is empty/absent or lists the
model, (b) `allowed_models` is absent or lists it, (c) its memory covers `gpu_memory_gib`
(unknown memory never constrains), and (d) the shape fits the hardware: whole and shared
jobs need a model that can run whole GPUs (any model), MIG jobs need a MIG profile that
covers their demand.
"""

from __future__ import annotations

from collections.abc import Mapping

from models.catalog import GpuModel, MigProfileSpec
from models.request import Job, speed


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
