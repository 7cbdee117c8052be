"""Fixtures shared by every test package."""

from __future__ import annotations

import compileall
import inspect
import json
import os
import re
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


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the project's packages once, in the controlling process, before any
    worker starts: where PYTHONDONTWRITEBYTECODE is set, every interpreter the suite
    starts (the servers, the CLI runs, the import check's children) would otherwise
    compile the sources again (the import check: 30 -> 21 CPU s; a server start about
    0.4 CPU s less). Python checks each .pyc against its source; a tree that cannot be
    written is left as it is."""
    if hasattr(config, "workerinput"):
        return
    for package in sorted(REPO.iterdir()):
        if package.name != "tests" and (package / "__init__.py").is_file():
            compileall.compile_dir(package, quiet=2, workers=0, rx=re.compile(r"/\."))


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


#: Modules whose tests (or some of them) took 15 s or more each in a loaded run (load 9-10
#: on the 2 cores, session 13), longest first: they are handed out first, in this order
#: (`pytest_collection_modifyitems`). The import check (test_layers.py) forks only for
#: the members of import cycles since session 14 (runner 13 -> 4 CPU s): last.
LONG_MODULES = (
    "tests/solver/test_bruteforce.py",
    "tests/sim/test_invariants.py",
    "tests/solver/test_limits.py",
    "tests/solver/test_interference.py",
    "tests/api/test_sessions.py",
    "tests/solver/test_agreement.py",
    "tests/openb/test_cli.py",
    "tests/k8s/test_replay.py",
    "tests/solver/test_topology.py",
    "tests/solver/test_elastic.py",
    "tests/solver/test_level_search.py",
    "tests/api/test_boundary.py",
    "tests/slurm/test_e2e.py",
    "tests/benchmarks/test_curve.py",
    "tests/batch/test_cli.py",
    "tests/api/test_restart.py",
    "tests/foundation/test_layers.py",
)
_LONG_RANK = {module: rank for rank, module in enumerate(LONG_MODULES)}


def _shared_resources(item: pytest.Item) -> list[str]:
    """Keys of the module- or session-scoped yield fixtures `item` uses: the servers,
    browsers, databases and clusters a test shares with others (a fixture that tears
    something down holds a process; one that returns a value is cheap data)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    keys = []
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name)
        if not defs or defs[-1].scope not in ("module", "session"):
            continue
        fixture = defs[-1]
        if not inspect.isgeneratorfunction(fixture.func):
            continue
        owner = (fixture.baseid if fixture.scope == "session"
                 else item.path.relative_to(item.config.rootpath).as_posix())
        keys.append(f"{owner}::{name}")
    return keys


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that share a started resource (see `_shared_resources`), directly or through
    a chain of them, go to the same xdist worker (`--dist loadgroup`), so that each
    resource starts once per run, not once on each worker."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    uses = [(item, _shared_resources(item)) for item in items]
    for _, keys in uses:
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    for item, keys in uses:
        if keys:
            item.add_marker(pytest.mark.xdist_group(root(keys[0])))
    # Longest first: xdist hands out the groups (largest first) and then single tests in
    # this order, one at a time as a worker runs dry; a long test drawn last keeps one
    # worker busy while the other idles. The sort is stable: within each part, the
    # collection order stays.
    items.sort(key=lambda item: _LONG_RANK.get(
        item.path.relative_to(item.config.rootpath).as_posix(), len(LONG_MODULES)))


def load_request(path: Path) -> PlanRequest:
    return PlanRequest.model_validate(json.loads(path.read_text()))
