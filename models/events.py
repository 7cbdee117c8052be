"""Deltas of a planning session: what changed in the cluster or the queue since the snapshot.

An event is one of a closed set told apart by its `kind` (a pydantic discriminated union,
unknown fields forbidden), so a client sends only what changed between two planning cycles
instead of the whole snapshot:

- jobs: `job_submitted` (a new Job), `job_finished` (a running job ended), `job_cancelled`
  (a pending or running job withdrawn), `job_resized` (a new whole-GPU count or GPU share),
  `job_updated` (the job as it now is: a new weight, remaining work, or where it actually
  runs when that is not where the last plan put it);
- nodes: `node_added` (a new Node), `node_removed`, `node_cordoned` (`cordoned: false`
  uncordons);
- GPUs: `gpu_unhealthy` / `gpu_healthy`, `mig_layout_changed` (the GPU's new MIG instances).

What an event does to the session's state, and when it does not apply, is
`solver.session`'s business; this module is only the wire format.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from models.request import Job, MigInstance, Node


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobSubmitted(_Event):
    """A new job joins the queue (pending, or running when it carries `current`)."""

    kind: Literal["job_submitted"] = "job_submitted"
    job: Job


class JobFinished(_Event):
    """A running job ended: it leaves the session and frees its GPUs."""

    kind: Literal["job_finished"] = "job_finished"
    job: str = Field(min_length=1)


class JobCancelled(_Event):
    """A pending or running job is withdrawn."""

    kind: Literal["job_cancelled"] = "job_cancelled"
    job: str = Field(min_length=1)


class JobResized(_Event):
    """A job asks for another size: a whole-GPU count or a GPU share (exactly one)."""

    kind: Literal["job_resized"] = "job_resized"
    job: str = Field(min_length=1)
    gpus: int | None = Field(default=None, ge=1, le=4096)
    gpu_share: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_size(self) -> JobResized:
        if (self.gpus is None) == (self.gpu_share is None):
            raise PydanticCustomError("resize_shape",
                                      "a resize gives exactly one of gpus or gpu_share")
        return self


class JobUpdated(_Event):
    """A job changed in another way than its size: the whole job as it now is."""

    kind: Literal["job_updated"] = "job_updated"
    job: Job


class NodeAdded(_Event):
    """A node joins the cluster."""

    kind: Literal["node_added"] = "node_added"
    node: Node


class NodeRemoved(_Event):
    """A node leaves the cluster; the jobs running on it lose their placement."""

    kind: Literal["node_removed"] = "node_removed"
    node: str = Field(min_length=1)


class NodeCordoned(_Event):
    """A node stops (or, with `cordoned: false`, resumes) taking new placements."""

    kind: Literal["node_cordoned"] = "node_cordoned"
    node: str = Field(min_length=1)
    cordoned: bool = True


class GpuUnhealthy(_Event):
    """A GPU is found unhealthy: it takes no new placements."""

    kind: Literal["gpu_unhealthy"] = "gpu_unhealthy"
    node: str = Field(min_length=1)
    gpu: int = Field(ge=0)


class GpuHealthy(_Event):
    """A GPU is healthy again."""

    kind: Literal["gpu_healthy"] = "gpu_healthy"
    node: str = Field(min_length=1)
    gpu: int = Field(ge=0)


class MigLayoutChanged(_Event):
    """A GPU's MIG mode or layout changed outside the planner (its new instances)."""

    kind: Literal["mig_layout_changed"] = "mig_layout_changed"
    node: str = Field(min_length=1)
    gpu: int = Field(ge=0)
    mig_enabled: bool = True
    mig_instances: list[MigInstance] = Field(default_factory=list)


#: One delta, told apart by `kind`.
Event = Annotated[
    JobSubmitted | JobFinished | JobCancelled | JobResized | JobUpdated | NodeAdded
    | NodeRemoved
    | NodeCordoned | GpuUnhealthy | GpuHealthy | MigLayoutChanged,
    Field(discriminator="kind"),
]


class EventBatch(_Event):
    """Deltas applied together: all of them or none."""

    events: list[Event] = Field(min_length=1, max_length=10_000)
