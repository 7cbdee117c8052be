"""Fixtures shared by the solver's tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def busy() -> Iterator[None]:
    """A helper process spinning on one core for the whole test: a loaded machine."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()
