"""`gpuplan validate` (check a plan against its request) and `gpuplan catalog` (GPU models).

`validate` exits 0 when the plan is valid, 1 when it breaks an invariant (one line per
violation: rule, location, message) and 2 on unreadable or invalid input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from api.cli.common import fail, load_plan, load_request
from models import BUILTIN_CATALOG, GpuModel, is_maximal_layout, valid_layouts
from solver.validate import validate_plan


def validate(
    request: Annotated[Path, typer.Argument(help="PlanRequest JSON file ('-' = stdin).")],
    plan: Annotated[Path, typer.Argument(help="Plan JSON file.")],
) -> None:
    """Check PLAN against REQUEST for every invariant of the contract (section 3)."""
    req = load_request(request)
    pln = load_plan(plan)
    violations = validate_plan(req, pln)
    if not violations:
        typer.echo("valid")
        return
    for v in violations:
        typer.echo(f"{v.rule}\t{v.where()}\t{v.message}")
    typer.echo(f"{len(violations)} violation(s)", err=True)
    raise typer.Exit(1)


def _model_row(name: str, model: GpuModel) -> dict[str, object]:
    return {
        "model": name,
        "memory_gib": model.memory_gib,
        "relative_speed": model.relative_speed,
        "mig_capable": model.mig_capable,
        "layouts": len(valid_layouts(model)) if model.mig_capable else 0,
    }


def _model_detail(name: str, model: GpuModel) -> dict[str, object]:
    layouts = valid_layouts(model)
    return {
        "model": name,
        "memory_gib": model.memory_gib,
        "relative_speed": model.relative_speed,
        "compute_slices": model.compute_slices,
        "memory_slices": model.memory_slices,
        "profiles": [p.model_dump() for p in model.mig_profiles],
        "valid_layouts": len(layouts) if model.mig_capable else 0,
        "maximal_layouts": sum(is_maximal_layout(model, lay) for lay in layouts)
        if model.mig_capable else 0,
    }


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def _fmt_mem(mem: object) -> str:
    return "-" if mem is None else f"{mem:g}"


def catalog(
    model: Annotated[str | None, typer.Argument(help="Show this model's MIG profiles.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the built-in GPU catalog, or one model's MIG profiles and layout counts."""
    if model is None:
        rows = [_model_row(n, m) for n, m in BUILTIN_CATALOG.items()]
        if as_json:
            typer.echo(json.dumps(rows, indent=1))
            return
        table = [["model", "memory_gib", "relative_speed", "mig", "layouts"]]
        table += [[str(r["model"]), _fmt_mem(r["memory_gib"]), f"{r['relative_speed']:g}",
                   "yes" if r["mig_capable"] else "no", str(r["layouts"])] for r in rows]
        typer.echo(_table(table))
        return
    spec = BUILTIN_CATALOG.get(model)
    if spec is None:
        fail(f"unknown GPU model {model!r}; known: {', '.join(BUILTIN_CATALOG)}")
    detail = _model_detail(model, spec)
    if as_json:
        typer.echo(json.dumps(detail, indent=1))
        return
    typer.echo(f"{model}: {_fmt_mem(spec.memory_gib)} GiB, relative speed "
               f"{spec.relative_speed:g}")
    if not spec.mig_capable:
        typer.echo("not MIG-capable (whole or shared GPUs only)")
        return
    table = [["profile", "compute", "mem_slices", "memory_gib", "max", "starts"]]
    table += [[p.name, str(p.compute_slices), str(p.memory_slices), f"{p.memory_gib:g}",
               str(p.max_count), ",".join(map(str, p.starts))] for p in spec.mig_profiles]
    typer.echo(_table(table))
    typer.echo(f"{spec.compute_slices} compute slices, {spec.memory_slices} memory slices; "
               f"{detail['valid_layouts']} valid layouts ({detail['maximal_layouts']} maximal)")
