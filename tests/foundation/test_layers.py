"""The package layers point one way, and every module of the tree imports on its own.

Layers, lowest first: models < heuristics < solver < benchmarks < api. A module may import
its own layer and the ones below, never one above (every import statement counts: top
level, inside functions and under TYPE_CHECKING). `models` imports nothing of the project
outside `models`.

Importing each module alone catches import cycles that only bite when a module is the
first of the project to load (`python -c "import benchmarks.openb.cli"` used to fail on a
partially initialised module). Which module loads first matters only inside an import
cycle, so the check scans the import graph (every import statement, as the layer rule
does, plus each module's parent package) for its cycles. One fresh interpreter preloads
the third-party libraries the tree imports, then imports the components of the graph,
each after those it imports: a module outside every cycle in place, and each member of a
cycle first in a forked child that starts with everything below the cycle loaded and
nothing of the cycle (see `_RUNNER`).
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


def module_name(path: Path, root: Path = REPO) -> str:
    """`api/cli/__init__.py` -> `api.cli`, `models/plan.py` -> `models.plan`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
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


def import_graph(files: list[Path], root: Path = REPO) -> dict[str, set[str]]:
    """Module -> the project modules its import statements name (each resolved to the
    longest module of the tree it names, `from api import cli` -> `api.cli`), plus its
    parent package, which a fresh import of it runs first."""
    names = {module_name(p, root) for p in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        module = module_name(path, root)
        deps = set()
        for _, target in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            parts = target.split(".")
            for end in range(len(parts), 0, -1):
                if (name := ".".join(parts[:end])) in names:
                    deps.add(name)
                    break
        if (parent := module.rpartition(".")[0]) in names:
            deps.add(parent)
        deps.discard(module)
        graph[module] = deps
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of `graph` (Tarjan), each sorted, every component
    after all the components it imports (dependencies first)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        # iterative depth-first search: (node, its remaining successors)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return found


def test_the_import_graph_finds_cycles_in_dependency_order() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"a", "c"}, "c.x": {"c"},
             "e": {"e.y"}, "e.y": {"e"}}
    components = import_cycles(graph)
    assert sorted(components) == [["a", "b"], ["c"], ["c.x"], ["d"], ["e", "e.y"]]
    order = {m: i for i, component in enumerate(components) for m in component}
    assert all(order[dep] <= order[m] for m, deps in graph.items() for dep in deps)


#: Runs in a fresh interpreter: preload the third-party libraries, then import the
#: project's import cycles (strongly connected components of `import_graph`), each after
#: the components it imports. Where a module is imported first matters only inside a
#: cycle: a module outside every cycle runs its body with each module it imports already
#: complete, however the import began, so it is imported in the runner itself. A cycle's
#: members are each imported first in forked children: a child starts with every
#: component below the cycle loaded (complete, as a fresh import would find them when the
#: cycle reaches them) and nothing of the cycle, and imports exactly that member; a fresh
#: `import a.b.c` first imports `a` completely, then `a.b`, so a member whose parent
#: package is in the cycle is forked from its package's child, right after the package's
#: import (and checked in place when the package's import already loaded it). Then the
#: runner imports the whole cycle and goes on. Prints one JSON line per module.
_RUNNER = r"""
import collections, importlib, json, os, sys, traceback

third_party, components = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in third_party:
    try:
        importlib.import_module(name)
    except Exception:  # optional extras (ray) may be absent: the child will say so
        pass
project = {m.split(".")[0] for component in components for m in component}
assert not [m for m in sys.modules if m.split(".")[0] in project], "project preloaded"

def emit(fd, module, error):
    line = json.dumps({"module": module, "error": error}) + "\n"
    os.write(fd, line.encode())

def attempt(module):
    try:
        importlib.import_module(module)
        return ""
    except BaseException:
        return traceback.format_exc(limit=-3)

def fail_below(fd, kids, package, error):
    # a fresh import of anything in `package` imports `package` first and fails as it did
    for kid in kids[package]:
        emit(fd, kid, f"its package {package} does not import:\n{error}")
        fail_below(fd, kids, kid, error)

def visit(module, kids, fd):
    error = attempt(module)
    emit(fd, module, error)
    if error:
        fail_below(fd, kids, module, error)
        return
    for kid in kids[module]:
        if kid in sys.modules:  # its package's import loaded it: a fresh import is this
            visit(kid, kids, fd)
        else:
            fork(kid, kids, fd)

def fork(module, kids, out):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            visit(module, kids, write)
        finally:
            os._exit(0)
    os.close(write)
    while chunk := os.read(read, 65536):
        os.write(out, chunk)
    os.close(read)
    os.waitpid(pid, 0)

out = sys.stdout.fileno()
for component in components:
    if len(component) == 1:
        emit(out, component[0], attempt(component[0]))
        continue
    members = set(component)
    early = sorted(members & set(sys.modules))
    if early:  # an import the scan does not see loaded these: the order is unknown
        for module in component:
            emit(out, module, f"loaded before its cycle was checked: {early}")
        continue
    kids = collections.defaultdict(list)
    for module in component:
        kids[module.rpartition(".")[0] if module.rpartition(".")[0] in members else ""
             ].append(module)
    for top in kids[""]:
        fork(top, kids, out)
    for module in component:
        attempt(module)
"""
def _third_party(files: list[Path], root: Path = REPO) -> list[str]:
    """The non-project, non-stdlib names the tree imports (`matplotlib.pyplot`, ... and
    `fastapi.FastAPI`, which the runner's preload skips as not a module)."""
    project = {module_name(path, root).split(".")[0] for path in files}
    names = set()
    for path in files:
        for _, target in imported_modules(path.read_text(), module_name(path, root)):
            top = target.split(".")[0]
            if top and top not in project and top not in sys.stdlib_module_names:
                names.add(target)
    return sorted(names)


def run_import_check(files: list[Path], root: Path = REPO) -> dict[str, str]:
    """Module -> its error (empty: it imports) for each of `files` (the tree under
    `root`), by `_RUNNER`; each module reported exactly once."""
    modules = [module_name(p, root) for p in files]
    components = import_cycles(import_graph(files, root))
    res = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(_third_party(files, root)),
         json.dumps(components)],
        cwd=root, capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["module"] for r in results) == sorted(modules)  # each exactly once
    return {r["module"]: r["error"] for r in results}


def test_every_module_imports_on_its_own() -> None:
    files = [p for p in module_files() if p.name != "__main__.py"]
    failed = {m: e for m, e in run_import_check(files).items() if e}
    assert failed == {}, "\n".join(f"{m}:\n{e}" for m, e in failed.items())


#: A cycle that bites only when `cyc.first` (or, renamed, the member sorted last) is the
#: first of the two to load: `cyc.second` defines `f` before it imports `cyc.first`.
_PLANTED = {
    "first": "from cyc.second import f\n\ndef g():\n    return f()\n",
    "second": "def f():\n    return 1\n\nfrom cyc.first import g\n",
}


@pytest.mark.parametrize("first", ["a_first", "z_first"])
def test_the_import_check_catches_a_cycle_that_bites_one_way(tmp_path: Path,
                                                             first: str) -> None:
    # The member that fails sorts before its partner, then after it: neither the order
    # of the children nor the runner's own import of the cycle may hide it.
    names = {"first": first, "second": "m_second"}
    package = tmp_path / "cyc"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for role, source in _PLANTED.items():
        for other, name in names.items():
            source = source.replace(f"cyc.{other}", f"cyc.{name}")
        (package / f"{names[role]}.py").write_text(source)
    # and a module outside the cycle that enters it by the side that works
    (tmp_path / "user.py").write_text("import cyc.m_second\n")
    files = sorted(tmp_path.rglob("*.py"))
    assert import_cycles(import_graph(files, tmp_path)) == [
        ["cyc"], sorted([f"cyc.{first}", "cyc.m_second"]), ["user"]]
    errors = run_import_check(files, tmp_path)
    assert {m for m, e in errors.items() if e} == {f"cyc.{first}"}
    assert "partially initialized module" in errors[f"cyc.{first}"]


@pytest.mark.parametrize("module", ["benchmarks.openb.cli", "benchmarks.scale",
                                    "benchmarks.load"])
def test_former_cycle_modules_import_in_a_plain_interpreter(module: str) -> None:
    # No preloading, no fork: exactly the command from the issue.
    res = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
