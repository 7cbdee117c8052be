"""`GET /v1/catalog/gpus[/{model}]`: the built-in GPU catalog and MIG geometry."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.errors import NotFound, error_responses
from models import BUILTIN_CATALOG, GpuModel, MigInstance, MigProfileSpec, valid_layouts

router = APIRouter(prefix="/catalog", tags=["catalog"])


class GpuModelInfo(BaseModel):
    """A catalog GPU model: memory, relative speed and MIG profiles."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(examples=["A100-SXM4-80GB"])
    memory_gib: float | None
    relative_speed: float
    mig_capable: bool
    compute_slices: int
    memory_slices: int
    mig_profiles: list[MigProfileSpec]


class GpuModelDetail(GpuModelInfo):
    """A catalog GPU model with every valid MIG layout (the empty one first)."""

    valid_layouts: list[list[MigInstance]] = Field(
        description="Every set of MIG instances that can coexist on one GPU of this model."
    )


def _info(name: str, spec: GpuModel) -> GpuModelInfo:
    return GpuModelInfo(
        model=name, memory_gib=spec.memory_gib, relative_speed=spec.relative_speed,
        mig_capable=spec.mig_capable, compute_slices=spec.compute_slices,
        memory_slices=spec.memory_slices, mig_profiles=list(spec.mig_profiles),
    )


@router.get("/gpus", response_model=list[GpuModelInfo], summary="List GPU models")
async def list_gpus() -> list[GpuModelInfo]:
    """Every model of the built-in catalog."""
    return [_info(name, spec) for name, spec in BUILTIN_CATALOG.items()]


@router.get("/gpus/{model}", response_model=GpuModelDetail, summary="One GPU model",
            responses=error_responses(404))
async def get_gpu(model: str) -> GpuModelDetail:
    """One model with its MIG profiles and valid layouts (404 when not in the catalog)."""
    spec = BUILTIN_CATALOG.get(model)
    if spec is None:
        raise NotFound(f"no GPU model {model!r} in the catalog")
    layouts = sorted(
        (sorted(layout) for layout in valid_layouts(spec) if spec.mig_capable),
        key=lambda lay: (len(lay), lay),
    )
    return GpuModelDetail(
        **_info(model, spec).model_dump(),
        valid_layouts=[[MigInstance(profile=i.profile, start=i.start) for i in lay]
                       for lay in layouts],
    )
