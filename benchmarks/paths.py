"""Where the shared workload data lives.

The real traces sit in `../shared/data` beside the repository (see its README for
provenance). Set `GPUPLAN_SHARED_DIR` to point elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The shared folder (contract, data), `$GPUPLAN_SHARED_DIR` or `../shared`."""
    env = os.environ.get("GPUPLAN_SHARED_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared"


def data_dir() -> Path:
    """The shared data folder with the ITP, PAI, Gavel and VBP files."""
    return shared_dir() / "data"
