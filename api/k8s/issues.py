"""What the import could not map: reported, never guessed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ImportIssue(BaseModel):
    """One Kubernetes object (or field) that gpuplan could not map as it stands.

    `skipped` is true when the object was left out of the request; false when it was kept
    without the field named in `message` (e.g. host CPU left unconstrained).
    """

    model_config = ConfigDict(extra="forbid")

    object: str = Field(description="`node/<name>`, `pod/<ns>/<name>` or `group/<ns>/<name>`.")
    skipped: bool
    message: str

    def line(self) -> str:
        """One human line: `pod/ns/x skipped: why`."""
        return f"{self.object} {'skipped' if self.skipped else 'adjusted'}: {self.message}"


class SnapshotError(ValueError):
    """The input as a whole is unusable (not a List, wrong types): a 422 / exit 2."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(f"{'.'.join(map(str, loc))}: {message}")
        self.loc = loc
        self.message = message
