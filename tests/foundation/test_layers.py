"""The package layers point one way, and every module of the tree imports on its own.

Layers, lowest first: models < heuristics < solver < benchmarks < api. A module may import
its own layer and the ones below, never one above (every import statement counts: top
level, inside functions and under TYPE_CHECKING). `models` imports nothing of the project
outside `models`.

Importing each module alone catches import cycles that only bite when a module is the
first of the project to load (`python -c "import benchmarks.openb.cli"` used to fail on a
partially initialised module). One fresh interpreter preloads the third-party libraries
the tree imports, then forks one child per project module; each child starts with only
the module's parent packages loaded (as a fresh import of it would have them, see
`_RUNNER`) and imports exactly that module.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Project packages, lowest layer first.
LAYERS = ("models", "heuristics", "solver", "benchmarks", "api")
RANK = {name: i for i, name in enumerate(LAYERS)}

#: Files that are not importable modules of the tree (`__main__` runs the CLI when imported).
NOT_MODULES = ("api/static/",)


def module_files() -> list[Path]:
    """Every Python file of the five packages, sorted."""
    files = []
    for package in LAYERS:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if not rel.startswith(NOT_MODULES):
                files.append(path)
    return files


def module_name(path: Path) -> str:
    """`api/cli/__init__.py` -> `api.cli`, `models/plan.py` -> `models.plan`."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool = False
                     ) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import statement in `source`, the text of
    `module` (a package's `__init__` when `is_package`)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from api import cli` may import api.cli
                yield node.lineno, f"{target}.{alias.name}"


def layer_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """`line: target` for each import of `module` that reaches a layer above its own."""
    own = module.split(".")[0]
    bad = {(line, target) for line, target in imported_modules(source, module, is_package)
           if RANK.get(target.split(".")[0], -1) > RANK[own]}
    return [f"{line}: {target}" for line, target in sorted(bad)]


def file_violations(path: Path) -> list[str]:
    """The layer violations of one file of the tree, each prefixed with its path."""
    found = layer_violations(path.read_text(), module_name(path), path.name == "__init__.py")
    return [f"{path.relative_to(REPO)}:{v}" for v in found]


def test_the_tree_is_found() -> None:
    names = {module_name(p) for p in module_files()}
    assert {"models.plan", "solver.validate", "heuristics.greedy", "api.cli.group",
            "benchmarks.openb.cli"} <= names


def test_the_import_scanner_sees_every_kind_of_import() -> None:
    # The rule below is only as good as the scanner: check it on a made-up module.
    probe = textwrap.dedent("""
        from typing import TYPE_CHECKING
        import models.plan
        from . import sim
        from .openb import cli
        if TYPE_CHECKING:
            from api.cli.common import fail
        def f():
            import solver.validate
            from api import app
    """)
    found = {t for _, t in imported_modules(probe, "benchmarks.probe")}
    assert {"models.plan", "benchmarks.sim", "benchmarks.openb.cli", "api.cli.common",
            "solver.validate", "api.app"} <= found
    assert layer_violations(probe, "benchmarks.probe") == [
        "7: api.cli.common", "7: api.cli.common.fail", "10: api", "10: api.app"]
    assert layer_violations(probe, "api.probe") == []
    assert layer_violations("from ..api import x", "benchmarks.sim.engine") == []  # relative
    assert layer_violations("from solver import plan", "heuristics.greedy") == [
        "1: solver", "1: solver.plan"]
    assert layer_violations("import api.cli", "models.plan") == ["1: api.cli"]


def test_layers_point_one_way() -> None:
    violations = [v for path in module_files() for v in file_violations(path)]
    assert violations == [], "\n".join(violations)


#: Runs in a fresh interpreter: preload the third-party libraries, then walk the tree of
#: project packages in forked children. A child imports one module (package) and reports
#: it; a package's child then forks one grandchild per module of the package. A fresh
#: `import a.b.c` first imports `a` completely, then `a.b`, then `a.b.c`; a child forked
#: right after its package's import starts from exactly that state, so it checks the same
#: thing as a fresh interpreter, without importing the package again for each module.
#: Prints one JSON line per module.
_RUNNER = r"""
import collections, importlib, json, os, sys, traceback

third_party, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in third_party:
    try:
        importlib.import_module(name)
    except Exception:  # optional extras (ray) may be absent: the child will say so
        pass
project = ("models", "heuristics", "solver", "benchmarks", "api")
assert not [m for m in sys.modules if m.split(".")[0] in project], "project preloaded"

wanted = set(modules)
nodes = {".".join(m.split(".")[:i]) for m in modules for i in range(1, m.count(".") + 2)}
kids = collections.defaultdict(list)
for node in sorted(nodes):
    kids[node.rpartition(".")[0]].append(node)

def emit(fd, module, error):
    if module in wanted:
        line = json.dumps({"module": module, "error": error}) + "\n"
        os.write(fd, line.encode())

def fail_below(fd, package, error):
    # a fresh import of anything in `package` imports `package` first and fails as it did
    for kid in kids[package]:
        emit(fd, kid, f"its package {package} does not import:\n{error}")
        fail_below(fd, kid, error)

def visit(module, fd):
    try:
        importlib.import_module(module)
        error = ""
    except BaseException:
        error = traceback.format_exc(limit=-3)
    emit(fd, module, error)
    if error:
        fail_below(fd, module, error)
        return
    for kid in kids[module]:
        fork(kid, fd)

def fork(module, out):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            visit(module, write)
        finally:
            os._exit(0)
    os.close(write)
    while chunk := os.read(read, 65536):
        os.write(out, chunk)
    os.close(read)
    os.waitpid(pid, 0)

for top in kids[""]:
    fork(top, sys.stdout.fileno())
"""


def _third_party(files: list[Path]) -> list[str]:
    """The non-project, non-stdlib names the tree imports (`matplotlib.pyplot`, ... and
    `fastapi.FastAPI`, which the runner's preload skips as not a module)."""
    names = set()
    for path in files:
        for _, target in imported_modules(path.read_text(), module_name(path)):
            top = target.split(".")[0]
            if top and top not in RANK and top not in sys.stdlib_module_names:
                names.add(target)
    return sorted(names)


def test_every_module_imports_on_its_own() -> None:
    files = [p for p in module_files() if p.name != "__main__.py"]
    modules = [module_name(p) for p in files]
    res = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(_third_party(files)), json.dumps(modules)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["module"] for r in results) == sorted(modules)  # each exactly once
    failed = {r["module"]: r["error"] for r in results if r["error"]}
    assert failed == {}, "\n".join(f"{m}:\n{e}" for m, e in failed.items())


@pytest.mark.parametrize("module", ["benchmarks.openb.cli", "benchmarks.scale",
                                    "benchmarks.load"])
def test_former_cycle_modules_import_in_a_plain_interpreter(module: str) -> None:
    # No preloading, no fork: exactly the command from the issue.
    res = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
