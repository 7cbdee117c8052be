"""What every planner below the solver returns: placements and final MIG layouts."""

from __future__ import annotations

from dataclasses import dataclass, field

from models import Placement


@dataclass
class HeuristicResult:
    """A plan before it is dressed as a wire Plan.

    - `placements`: job name -> its placements, for placed jobs only (kept running jobs
      included, with exactly their `current` placements).
      A MIG GPU's final layout is implied: the instances that host placed jobs, plus the
      current instances that still fit beside them (see solver/build.py).
    - `reasons`: unplaced job -> (reason code, detail), for jobs the planner leaves out.
    """

    placements: dict[str, list[Placement]] = field(default_factory=dict)
    reasons: dict[str, tuple[str, str]] = field(default_factory=dict)
