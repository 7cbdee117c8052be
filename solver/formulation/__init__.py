"""Compile a PlanRequest into one solver-neutral integer model, and decode its solutions.

Notation (each variable family and row family states its math in its docstring):
- pool p = (node, model) of non-MIG GPUs; U_p its usable GPUs (healthy, node schedulable).
- groups G: identical new jobs (same shape, eligibility, values, host request, tenant) are
  aggregated: integer variables count how many members go to each target, so a queue of a
  thousand identical 1-GPU jobs costs one variable per pool, not per GPU. Members are taken
  in priority order (weight desc, submitted_at asc, name) when decoding.
- running jobs r are never aggregated: keep[r] (stay exactly), new-placement variables
  (migrate) and neither (preempt).
- whole single-node gangs: c[G,p] = members of G placed as g-GPU gangs in pool p.
- multi-node gangs: y[j,p] = GPUs of j in pool p, u[j,m] = model chosen, d[j,D] = domain.
- shared jobs: bins = GPUs in share mode; virtual bins per pool (symmetric, opened in order)
  plus the GPUs that already host shared jobs; a[G,b] = members of G on bin b.
- MIG GPUs: v[g,i] = instance position i (profile, start) in g's final layout;
  m[G,g,pi] = members of G on instances of profile pi of g.
Identical nodes and identical MIG GPUs are ordered by load to break symmetry.

Modules, in the order of a compile (compile.py runs them):
- tables.py: the data types, the variable tables (one named row per variable) and
  `Compiled`, the model with everything needed to read a solution back;
- builder.py: the working state of one compile, its data stage and the shared rules
  (values, eligibility, host fit, pruning), the usage ledgers;
- variables.py: one `new_*` function per variable family;
- constraints.py: one `add_*` function per row family, its formula in its docstring;
- objective.py: the objective, written once;
- hints.py: the current state as the default hint, and any plan encoded as a hint;
- decode.py: variable values to placements; right_size.py: MIG right-sizing after it.
"""

from models.rules import priority_key
from solver.formulation.compile import compile_request
from solver.formulation.decode import decode
from solver.formulation.hints import encode_hints
from solver.formulation.objective import FAIRNESS_STEPS
from solver.formulation.right_size import right_size_mig
from solver.formulation.tables import Compiled

__all__ = [
    "FAIRNESS_STEPS",
    "Compiled",
    "compile_request",
    "decode",
    "encode_hints",
    "priority_key",
    "right_size_mig",
]
