"""What the cluster imports share (Kubernetes `api.k8s`, Slurm `api.slurm`).

- `ImportIssue`: one object that could not be mapped as it stands, reported, never guessed;
- `SnapshotError`: the input as a whole is unusable (a 422 / CLI exit 2);
- `wire_gpu`: a GPU with its MIG layout as the request's `Gpu`;
- `assemble_request`: the `PlanRequest` of an import, its first validation error raised as
  a `SnapshotError` with the field path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from models import Cluster, Gpu, Instance, Job, MigInstance, PlanRequest, Policy


class ImportIssue(BaseModel):
    """One imported object (or field) that gpuplan could not map as it stands.

    `skipped` is true when the object was left out of the request; false when it was kept
    without the field named in `message` (e.g. host CPU left unconstrained).
    """

    model_config = ConfigDict(extra="forbid")

    object: str = Field(description="`node/<name>`, `pod/<ns>/<name>`, `group/<ns>/<name>`, "
                                    "`job/<id>` or `<kind>/<name>` of a queue object.")
    skipped: bool
    message: str

    def line(self) -> str:
        """One human line: `pod/ns/x skipped: why`."""
        return f"{self.object} {'skipped' if self.skipped else 'adjusted'}: {self.message}"


class SnapshotError(ValueError):
    """The input as a whole is unusable (not a list, wrong types): a 422 / exit 2."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(f"{'.'.join(map(str, loc))}: {message}")
        self.loc = loc
        self.message = message


class ImportedGpu(Protocol):
    """A GPU as an import holds it while it assembles the request."""

    index: int
    healthy: bool
    mig_enabled: bool
    instances: list[Instance]


def wire_gpu(gpu: ImportedGpu, model: str) -> Gpu:
    """The request's `Gpu` of an imported device of `model`, with its MIG instances."""
    return Gpu(index=gpu.index, model=model, healthy=gpu.healthy, mig_enabled=gpu.mig_enabled,
               mig_instances=[MigInstance(profile=i.profile, start=i.start)
                              for i in gpu.instances])


def assemble_request(cluster: dict[str, Any], jobs: Sequence[Job], policy: Policy
                     ) -> PlanRequest:
    """`PlanRequest(cluster=Cluster(**cluster), jobs, policy)`; raises SnapshotError with
    the path of the first error when the assembled request is invalid."""
    try:
        return PlanRequest(cluster=Cluster(**cluster), jobs=list(jobs), policy=policy)
    except ValidationError as e:
        err = e.errors()[0]
        raise SnapshotError(tuple(err["loc"]), err["msg"]) from e
