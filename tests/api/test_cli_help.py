"""`gpuplan` help and start-up: what each command loads, and help text a user can read.

Start-up is checked by what a fresh interpreter has imported after the command ran
(`sys.modules`), not by a clock: a loaded machine must pass.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main
from typer._click import Context
from typer._click.core import Command as ClickCommand
from typer.testing import CliRunner

from api.cli import COMMANDS, app
from api.cli.bench import BENCH_COMMANDS
from api.cli.group import LazyGroup
from api.cli.solve import summary, unplaced_summary
from models import Plan, Policy, Unplaced

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
runner = CliRunner()

#: Libraries and project layers that only the commands needing them may load.
HEAVY = ("ortools", "matplotlib", "pandas", "numpy", "fastapi", "uvicorn", "highspy", "pulp",
         "solver.driver", "heuristics", "benchmarks", "api.app", "api.k8s", "api.batch")

#: Prints the sorted names in sys.modules after running `gpuplan ARGS` in this interpreter.
_PROBE = """
import json, sys
from api.cli import main
sys.argv = ["gpuplan", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after(*args: str) -> set[str]:
    """Module names a fresh interpreter holds after `gpuplan ARGS` (output discarded)."""
    res = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=REPO, text=True,
                         capture_output=True, timeout=300, check=False)
    assert "Traceback" not in res.stderr, res.stderr
    return set(json.loads(res.stdout.splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    """The HEAVY modules (or their sub-modules) among `modules`."""
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [["--help"], ["solve", "--help"], ["validate", "--help"],
                                  ["bench", "--help"]])
def test_help_loads_no_solver_simulator_or_plotting(args: list[str]) -> None:
    modules = loaded_after(*args)
    assert heavy(modules) == []
    assert "api.cli.group" in modules  # the probe did run the CLI


def test_validate_loads_the_validator_but_no_backend() -> None:
    modules = loaded_after("validate", str(EXAMPLES / "mig-puzzle.request.json"),
                           str(EXAMPLES / "mig-puzzle.plan.json"))
    assert "solver.validate" in modules
    assert heavy(modules) == []


def test_solve_loads_the_solver_only_when_it_solves(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"cluster": {"nodes": []}, "jobs": "nope"}')
    assert "solver.driver" not in loaded_after("solve", str(bad))
    good = loaded_after("solve", str(EXAMPLES / "mig-puzzle.request.json"),
                        "-o", str(tmp_path / "plan.json"))
    assert {"solver.driver", "ortools"} <= good
    assert not any(m.startswith("matplotlib") for m in good)


def commands() -> Iterator[tuple[str, ClickCommand, Context]]:
    """Every leaf command of the tree (bench and k8s sub-commands included), with a context."""
    root = typer.main.get_command(app)
    todo = [("gpuplan", root, Context(root, info_name="gpuplan"))]
    while todo:
        path, cmd, ctx = todo.pop(0)
        if isinstance(cmd, LazyGroup):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, f"{path} {name} does not load"
                todo.append((f"{path} {name}", sub, Context(sub, info_name=name, parent=ctx)))
        else:
            yield path, cmd, ctx


ALL = list(commands())


def test_every_table_entry_is_a_command() -> None:
    names = {path for path, _, _ in ALL}
    assert {f"gpuplan {n}" for n in COMMANDS if n not in ("bench", "k8s")} <= names
    assert {f"gpuplan bench {n}" for n in BENCH_COMMANDS} <= names
    assert {"gpuplan k8s snapshot", "gpuplan k8s export"} <= names


@pytest.mark.parametrize(("path", "cmd", "ctx"), ALL, ids=[p for p, _, _ in ALL])
def test_help_is_plain_and_complete(path: str, cmd: ClickCommand, ctx: Context) -> None:
    text = cmd.get_help(ctx)
    usage = text.splitlines()[0]
    assert usage.startswith(f"Usage: {path} [OPTIONS]")
    assert "{" not in usage and "<" not in usage, usage
    for arg in (p for p in cmd.params if p.param_type_name == "argument"):
        assert (arg.metavar or "").isupper(), f"{path}: argument {arg.name} not in capitals"
        assert arg.metavar in usage
    assert "<bool>" not in text and "╭" not in text, text
    undocumented = [p.name for p in cmd.params
                    if p.param_type_name == "option" and not getattr(p, "help", None)]
    assert undocumented == [], f"{path}: options without a description: {undocumented}"


def test_solve_options_are_described_and_enums_list_their_choices() -> None:
    res = runner.invoke(app, ["solve", "--help"], terminal_width=200)
    assert res.exit_code == 0
    lines = {line.split()[0]: line for line in res.output.splitlines()
             if line.strip().startswith("--")}
    for option, field in (("--solver", "solver"), ("--objective", "objective"),
                          ("--milp-backend", "milp_backend")):
        allowed = typing.get_args(Policy.model_fields[field].annotation)
        shown = re.search(r"<([^>]*)>", lines[option])
        assert shown is not None and sorted(shown.group(1).split("|")) == sorted(allowed)
    for option in ("--threads", "--seed", "--time-limit", "--milp-backend"):
        assert "Override policy." in lines[option]
    assert "Usage: gpuplan solve [OPTIONS] REQUEST" in res.output


def test_the_listing_shows_each_summary_whole_on_one_line() -> None:
    for args, table in (([], COMMANDS), (["bench"], BENCH_COMMANDS)):
        res = runner.invoke(app, [*args, "--help"], terminal_width=80)
        assert res.exit_code == 0
        listed = res.output.split("Commands:")[1].splitlines()
        for name, entry in table.items():
            line = next(x for x in listed if x.split() and x.split()[0] == name)
            assert line.split(None, 1)[1] == entry.summary  # whole, on the name's line
    k8s = runner.invoke(app, ["k8s", "--help"], terminal_width=80).output.split("Commands:")[1]
    assert "..." not in k8s and "listed\n            on stderr." in k8s


def test_usage_errors_are_one_line() -> None:
    for args, expect in ((["solv"], "Did you mean solve?"),
                         (["--bogus"], "No such option: --bogus"),
                         (["solve", str(EXAMPLES / "mig-puzzle.request.json"), "--bogus"],
                          "No such option: --bogus"),
                         (["solve", "x.json", "--milp-backend", "glpk"], "'--milp-backend'"),
                         (["bench", "load", "--clients", "a,b"], "--clients")):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.count("\n") == 1 and expect in res.stderr, (args, res.stderr)
        assert res.stderr.startswith("gpuplan: error: ")


def test_summary_lists_unplaced_reasons_with_counts() -> None:
    plan = Plan(status="feasible", solver="cp_sat", objective_value=2.0, unplaced=[
        Unplaced(job="a", reason="insufficient_capacity"),
        Unplaced(job="b", reason="no_eligible_gpu"),
        Unplaced(job="c", reason="insufficient_capacity")])
    assert unplaced_summary(plan) == "unplaced=3 (insufficient_capacity 2, no_eligible_gpu 1)"
    assert " unplaced=3 (insufficient_capacity 2, no_eligible_gpu 1) " in summary(plan)
    assert unplaced_summary(plan.model_copy(update={"unplaced": []})) == "unplaced=0"


def test_solve_prints_the_reasons_of_a_real_plan(tmp_path: Path) -> None:
    request = json.loads((EXAMPLES / "small-mixed.request.json").read_text())
    models = {g["model"] for n in request["cluster"]["nodes"] for g in n["gpus"]}
    assert "T4-16GB" not in models  # a catalog model the cluster does not have
    request["jobs"].append({"name": "wants-t4", "gpus": 1, "allowed_models": ["T4-16GB"]})
    path = tmp_path / "r.json"
    path.write_text(json.dumps(request))
    res = subprocess.run([sys.executable, "-m", "api.cli", "solve", str(path), "-o",
                          str(tmp_path / "p.json"), "--time-limit", "5"], cwd=REPO,
                         text=True, capture_output=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    plan = json.loads((tmp_path / "p.json").read_text())
    reasons = [u["reason"] for u in plan["unplaced"]]
    assert "no_eligible_gpu" in reasons
    line = res.stderr.strip().splitlines()[-1]
    assert f"unplaced={len(reasons)} (" in line
    assert f"no_eligible_gpu {reasons.count('no_eligible_gpu')}" in line
