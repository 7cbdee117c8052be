"""Fast constructive planners and local search over the contract's whole domain.

A heuristic returns a `HeuristicResult` (placements, final MIG layouts, reasons); the solver
package turns it into a validated Plan. Nothing here imports `solver`.

- `plan_greedy(request, order=, seed=, deadline=, keep_running=)`: value-density best fit,
  each job ranked net of per-model GPU prices (heuristics/prices.py: `model_prices`);
- `improve(request, result, deadline=, seed=)`: ruin-and-recreate local search, never worse;
- `plan_heuristic(request, deadline=, seed=)`: both, until the deadline;
- `fragmentation(request, placements)`: the share of free capacity typical jobs cannot use.
"""

from heuristics.fragmentation import fragmentation
from heuristics.greedy import plan_greedy
from heuristics.local_search import improve
from heuristics.portfolio import plan_heuristic
from heuristics.result import HeuristicResult

__all__ = ["HeuristicResult", "fragmentation", "improve", "plan_greedy", "plan_heuristic"]
