"""Where the final lexicographic level's gap lies: in the plan or in its bound
(benchmarks/QUOTAS.md, session 11).

For one scale instance with quotas, priority classes and topology levels, it plans within
the time limit and reports, for the levels of the plan:

- each level's value, its bound (`solver.level_bound.level_bounds`, a bound of the
  lexicographic optimum's level) and gap (`solver.level_report.level_gap`);
- `held`: the LP bound of the final level with every level above held at the plan's
  values (`solver.level_bound.held_bound`). While a level above is not proven this is no
  bound of the lexicographic optimum (level_bound.py's module doc); it says how much of
  the bound comes from the room the unproven levels leave;
- `trade`: the LP bound of the final level with the level above it held at steps from
  the plan's value up to that level's own LP optimum (the levels above it held at the
  plan's values): what each unit of the level above is worth to the final one in the LP;
- `pinned`: the final level re-placed exactly beside the higher classes
  (`solver.level_polish.polish_final`, given `--polish-s` seconds): the best the lowest
  class reaches without moving a job of a higher class.

    python -m benchmarks.level_probe --size M --seed 0 --time-limit 5 --polish-s 60
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks.generator import generate
from heuristics.result import HeuristicResult
from models import PlanRequest
from models.objective import level_values
from solver import plan
from solver.context import Context
from solver.level_bound import held_bound, level_bounds
from solver.level_polish import polish_final
from solver.level_report import level_gap

#: Steps of the trade curve between the plan's value of the level above and its LP optimum
TRADE_STEPS = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)


def _with_limit(request: PlanRequest, seconds: float) -> PlanRequest:
    """`request` with `seconds` as its time limit."""
    return request.model_copy(update={"policy": request.policy.model_copy(
        update={"time_limit_s": seconds})})


def _fig(x: float | None) -> str:
    """A figure of the report (`-` for none)."""
    return "-" if x is None else f"{x:,.2f}"


def probe(size: str, seed: int, time_limit: float, polish_s: float,
          bound_s: float = 60.0) -> list[str]:
    """The report's lines (module doc)."""
    request = _with_limit(generate(size, seed, topology=("zone", "block", "rack"),
                                   tenants_quota=8, priority_classes=3), time_limit)
    t0 = time.perf_counter()
    out = plan(request)
    wall = time.perf_counter() - t0
    placements = {a.job: a.placements for a in out.assignments}
    values = level_values(request, placements)
    empty = dict(level_values(request, {}))
    lines = [f"{size} seed {seed}: planned in {wall:.2f} s at {time_limit:g} s"]
    for (name, v), b in zip(values, level_bounds(request, placements, bound_s),
                            strict=True):
        gap = "-" if b is None else f"{level_gap(v, b, empty[name]):.1%}"
        lines.append(f"  {name}: {v:,.2f} / {_fig(b)} ({gap})")
    final, above = values[-1][0], values[-2][0]
    higher = dict(values[:-1])
    got = held_bound(request, final, higher, bound_s)
    lines.append(f"  held (every level above at the plan's values): {final} <= {_fig(got)}")
    top = held_bound(request, above, dict(values[:-2]), bound_s)
    if top is not None:
        for step in TRADE_STEPS:
            at = higher[above] + step * (top - higher[above])
            got = held_bound(request, final, {**higher, above: at}, bound_s)
            lines.append(f"  trade: {above} held at {at:,.2f} -> {final} <= {_fig(got)}")
    ctx = Context.start(_with_limit(request, polish_s), None, None)
    t0 = time.perf_counter()
    pinned = polish_final(ctx, HeuristicResult(placements, {}))
    after = level_values(request, pinned.placements)
    lines.append(f"  pinned ({polish_s:g} s, {time.perf_counter() - t0:.1f} s): "
                 + ", ".join(f"{n} {v:,.2f}" for n, v in after))
    return lines


def main(argv: list[str] | None = None) -> int:
    """Command line: `python -m benchmarks.level_probe --size M --seed 0 ...`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="M")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--polish-s", type=float, default=60.0)
    parser.add_argument("--bound-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    lines = probe(args.size, args.seed, args.time_limit, args.polish_s, args.bound_s)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
