"""Fixtures for the batch tests: the example directory and tiny generated requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parent / "data"

#: The example directory: 4 good requests (one on line 1 of queue.jsonl) and 4 bad ones.
GOOD = {"tiny", "small-mixed", "mig-puzzle", "queue-1"}
BAD = {"broken", "bad-gpus", "queue-3", "queue-4"}


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def mixed_dir() -> Path:
    return DATA / "mixed"


@pytest.fixture
def tiny_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "mixed" / "tiny.json").read_text())
    return doc


@pytest.fixture
def write_jsonl(tmp_path: Path, tiny_doc: dict[str, Any]) -> Callable[[int, str], Path]:
    """Write `n` tiny requests (job weights varying) to `<tmp>/<name>.jsonl`."""

    def write(n: int, name: str = "many") -> Path:
        path = tmp_path / f"{name}.jsonl"
        with path.open("w") as fh:
            for i in range(n):
                tiny_doc["jobs"][0]["weight"] = 1.0 + i % 7
                fh.write(json.dumps(tiny_doc) + "\n")
        return path

    return write
