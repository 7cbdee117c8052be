"""Fixtures shared by every test package."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

from benchmarks.paths import data_dir, shared_dir
from models import PlanRequest

# CI runs the property tests with a fixed seed so that a red run is reproducible; locally
# each run explores new examples.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def shared_data() -> Path:
    d = data_dir()
    if not d.exists():
        pytest.skip(f"shared data not found at {d}")
    return d


@pytest.fixture(scope="session")
def contract_dir() -> Path:
    return shared_dir() / "contract"


def load_request(path: Path) -> PlanRequest:
    return PlanRequest.model_validate(json.loads(path.read_text()))
