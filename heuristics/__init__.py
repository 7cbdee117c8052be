"""Fast constructive planners and local search over the contract's whole domain.

A heuristic returns a `HeuristicResult` (placements, final MIG layouts, reasons); the solver
package turns it into a validated Plan. Nothing here imports `solver`.
"""

from heuristics.result import HeuristicResult

__all__ = ["HeuristicResult"]
