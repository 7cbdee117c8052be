"""`gpuplan bench vbp`: vector bin packing instances with known optima, through the contract.

The instances are the VPSolver-format sets in `../shared/data/vbp` (Triplet, New,
Panigrahy; each archive has `.vbp` files, each summary CSV the lower bound and the known
optimum number of bins, -1 when unknown). A `.vbp` file is: the number of dimensions d,
the bin capacity per dimension, the number of item types, then one line per type with its
d weights and its count.

Mapping to a `PlanRequest` (instances of up to 4 dimensions):
- one node per bin, each with one GPU of a model `VBP` (relative speed 1);
- one dimension in which every item weighs strictly between 0 and the capacity becomes the
  GPU share: item weight w -> `gpu_share = w / C` (the contract's shares are in (0, 1));
- the others become, in order, host `cpu_millicores` (node capacity C), `host_memory_gib`
  (node `memory_gib` C) and `gpu_memory_gib` (the `VBP` model's `memory_gib` C);
- each item is a shared job of weight C / w, so that it is worth weight x share x speed =
  1 in the `throughput` objective, which then counts the items placed.

With as many nodes as the known optimum, the best plan places every item, so
`objective_value == number of items` means the solver found an optimal packing; anything
less is a miss, and the gap to the item count is how far off it stayed. The Triplet set's
optima are known by construction (every bin holds three items that fill it exactly) and no
classic heuristic reaches them, so they test whether the exact backends close the packing.
"""

from __future__ import annotations

import csv
import statistics
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.paths import data_dir
from models import Cluster, Gpu, GpuModel, Job, Node, PlanRequest, Policy
from solver import plan

#: the instance sets: name -> (archive, summary CSV)
FAMILIES = {
    "triplet": ("Triplet_instances.tar.gz", "Triplet_summary_known.csv"),
    "new": ("New_instances.tar.gz", "New_summary_known.csv"),
    "panigrahy": ("Panigrahy_instances.tar.gz", "Panigrahy_summary_known.csv"),
}
MODEL = "VBP"
MAX_DIMS = 4


@dataclass(frozen=True)
class VbpInstance:
    """One instance: bin capacity per dimension, item types with counts, known figures."""

    name: str
    capacity: tuple[int, ...]
    items: tuple[tuple[tuple[int, ...], int], ...]  # (weights, count)
    lower_bound: int | None = None
    optimum: int | None = None

    @property
    def dims(self) -> int:
        return len(self.capacity)

    @property
    def n_items(self) -> int:
        return sum(c for _, c in self.items)


def parse_vbp(name: str, text: str) -> VbpInstance:
    """A `.vbp` file's text as an instance (ValueError on malformed input)."""
    nums = [int(tok) for tok in text.split()]
    if len(nums) < 2:
        raise ValueError(f"{name}: empty instance")
    d = nums[0]
    if d < 1 or len(nums) < 2 + d:
        raise ValueError(f"{name}: bad dimension line")
    cap = tuple(nums[1:1 + d])
    m = nums[1 + d]
    body = nums[2 + d:]
    if len(body) != m * (d + 1):
        raise ValueError(f"{name}: expected {m} item types of {d + 1} numbers, "
                         f"got {len(body)} numbers")
    items = tuple((tuple(body[i * (d + 1):i * (d + 1) + d]), body[i * (d + 1) + d])
                  for i in range(m))
    if any(c < 0 for _, c in items) or any(x <= 0 for x in cap):
        raise ValueError(f"{name}: negative count or non-positive capacity")
    return VbpInstance(name, cap, items)


def _known(summary: Path) -> dict[str, tuple[int, int | None]]:
    out: dict[str, tuple[int, int | None]] = {}
    with summary.open(newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            opt = int(row["OPT"])
            out[row["instance_name"]] = (int(row["LB"]), opt if opt >= 0 else None)
    return out


def load_family(family: str, dims: int | None = None, root: Path | None = None
                ) -> list[VbpInstance]:
    """Every instance of `family` (of `dims` dimensions if given), with its known figures,
    sorted by name."""
    archive, summary = FAMILIES[family]
    folder = root or data_dir() / "vbp"
    known = _known(folder / summary)
    out: list[VbpInstance] = []
    with tarfile.open(folder / archive) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.endswith(".vbp"):
                continue
            name = Path(member.name).stem
            fh = tar.extractfile(member)
            assert fh is not None
            inst = parse_vbp(name, fh.read().decode())
            if dims is not None and inst.dims != dims:
                continue
            lb, opt = known.get(name, (None, None))
            out.append(VbpInstance(inst.name, inst.capacity, inst.items, lb, opt))
    return sorted(out, key=lambda i: i.name)


def share_dimension(inst: VbpInstance) -> int | None:
    """The first dimension in which every item weighs strictly between 0 and the capacity
    (it becomes the GPU share), or None."""
    for j, cap in enumerate(inst.capacity):
        if all(0 < w[j] < cap for w, c in inst.items if c > 0):
            return j
    return None


def unmappable(inst: VbpInstance) -> str | None:
    """Why `inst` has no contract form, or None when it has one."""
    if inst.dims > MAX_DIMS:
        return f"{inst.dims} dimensions (at most {MAX_DIMS} map)"
    if any(x < 0 for w, c in inst.items if c > 0 for x in w):
        # some generated Triplet files carry negative weights (an item that frees capacity)
        return "negative item weights"
    if share_dimension(inst) is None:
        return "no dimension has every item strictly inside (0, C)"
    return None


def to_request(inst: VbpInstance, bins: int, time_limit_s: float = 10.0,
               solver: str = "auto", seed: int = 0) -> PlanRequest:
    """The instance as a PlanRequest with `bins` nodes (module doc); ValueError when it
    has no contract form (`unmappable`)."""
    why = unmappable(inst)
    if why is not None:
        raise ValueError(f"{inst.name}: {why}")
    s = share_dimension(inst)
    assert s is not None
    rest = [j for j in range(inst.dims) if j != s]
    cpu_dim = rest[0] if len(rest) > 0 else None
    mem_dim = rest[1] if len(rest) > 1 else None
    gmem_dim = rest[2] if len(rest) > 2 else None
    cap = inst.capacity
    model = GpuModel(memory_gib=float(cap[gmem_dim]) if gmem_dim is not None else None,
                     relative_speed=1.0)
    nodes = [Node(name=f"bin{b}",
                  cpu_millicores=float(cap[cpu_dim]) if cpu_dim is not None else None,
                  memory_gib=float(cap[mem_dim]) if mem_dim is not None else None,
                  gpus=[Gpu(index=0, model=MODEL)])
             for b in range(bins)]
    jobs: list[Job] = []
    for t, (w, count) in enumerate(inst.items):
        for k in range(count):
            jobs.append(Job(
                name=f"t{t}_{k}",
                gpu_share=w[s] / cap[s],
                weight=cap[s] / w[s],
                cpu_millicores=float(w[cpu_dim]) if cpu_dim is not None else None,
                host_memory_gib=float(w[mem_dim]) if mem_dim is not None else None,
                gpu_memory_gib=float(w[gmem_dim]) if gmem_dim is not None else None,
            ))
    return PlanRequest(cluster=Cluster(nodes=nodes, gpu_models={MODEL: model}), jobs=jobs,
                       policy=Policy(solver=solver, time_limit_s=time_limit_s, seed=seed))


@dataclass
class VbpResult:
    """One instance solved with as many nodes as its known optimum."""

    name: str
    solver: str
    items: int
    bins: int
    placed: int
    status: str
    wall_s: float

    @property
    def optimal(self) -> bool:
        return self.placed == self.items


def solve_at_optimum(inst: VbpInstance, time_limit_s: float, solver: str = "auto"
                     ) -> VbpResult:
    """Solve `inst` with `inst.optimum` nodes and count the items placed."""
    if inst.optimum is None:
        raise ValueError(f"{inst.name}: no known optimum")
    req = to_request(inst, inst.optimum, time_limit_s, solver)
    t0 = time.perf_counter()
    result = plan(req)
    wall = time.perf_counter() - t0
    return VbpResult(inst.name, solver, inst.n_items, inst.optimum, len(result.assignments),
                     result.status, wall)


def vbp_command(
    family: Annotated[str, typer.Option(
        help=f"Instance set: {', '.join(FAMILIES)}.")] = "triplet",
    dims: Annotated[int, typer.Option(help="Dimensions (instances of up to 4 map).")] = 3,
    limit: Annotated[int, typer.Option(help="At most this many instances (0 = all).")] = 0,
    max_items: Annotated[int, typer.Option(
        help="Skip instances with more items (0 = no limit).")] = 0,
    time_limit: Annotated[float, typer.Option(help="solver.plan time limit (s).")] = 10.0,
    solvers: Annotated[str, typer.Option(
        help="Comma-separated policy.solver values.")] = "auto,heuristic",
    out: Annotated[Path | None, typer.Option(help="CSV of every run.")] = None,
) -> None:
    """Known-optimum vector bin packing (Triplet, New, Panigrahy) through the contract."""
    if family not in FAMILIES:
        raise typer.BadParameter(f"unknown family {family!r}; one of {', '.join(FAMILIES)}",
                                 param_hint="--family")
    if not 1 <= dims <= MAX_DIMS:
        raise typer.BadParameter(f"--dims must be 1..{MAX_DIMS}", param_hint="--dims")
    names = [s.strip() for s in solvers.split(",") if s.strip()]
    bad = [s for s in names if s not in ("auto", "cp_sat", "milp", "heuristic")]
    if bad or not names:
        raise typer.BadParameter(f"unknown solver(s) {bad}", param_hint="--solvers")
    try:
        known = [i for i in load_family(family, dims) if i.optimum is not None]
        insts = [i for i in known if unmappable(i) is None
                 and (max_items <= 0 or i.n_items <= max_items)]
    except (OSError, tarfile.TarError) as exc:
        typer.echo(f"error: cannot read the {family} instances: {exc}", err=True)
        raise typer.Exit(2) from None
    skipped = sum(unmappable(i) is not None for i in known)
    typer.echo(f"{family}, {dims} dimensions: {len(known)} instances with a known optimum, "
               f"{skipped} without a contract form (negative weights or no share "
               f"dimension), {len(insts)} run")
    if limit > 0:
        insts = insts[:limit]
    rows: list[VbpResult] = []
    per_solver: dict[str, list[VbpResult]] = {s: [] for s in names}
    for inst in insts:
        for s in names:
            r = solve_at_optimum(inst, time_limit, s)
            per_solver[s].append(r)
            rows.append(r)
            typer.echo(f"{inst.name:<22} {s:<9} items {r.items:4d} bins {r.bins:3d} "
                       f"placed {r.placed:4d} {r.status:<9} {r.wall_s:6.2f}s")
    typer.echo("")
    typer.echo("| solver | instances | optimum reached | items left out | median s | max s |")
    typer.echo("|---|---|---|---|---|---|")
    for s, rs in per_solver.items():
        if not rs:
            continue
        times = [r.wall_s for r in rs]
        typer.echo(f"| {s} | {len(rs)} | {sum(r.optimal for r in rs)} | "
                   f"{sum(r.items - r.placed for r in rs)} | {statistics.median(times):.2f} | "
                   f"{max(times):.2f} |")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["instance", "solver", "items", "bins", "placed", "status", "wall_s"])
            for r in rows:
                w.writerow([r.name, r.solver, r.items, r.bins, r.placed, r.status,
                            f"{r.wall_s:.3f}"])
