"""The one registry of online policies: name -> factory(typical shapes) -> policy."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.openb.frag import TypicalShapes
from benchmarks.openb.lookahead import LookaheadPolicy
from benchmarks.openb.policies import (
    BestFitPolicy,
    DotProdPolicy,
    FgdPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    GpuplanPolicy,
    Policy,
    RandomPolicy,
)

POLICIES: dict[str, Callable[[TypicalShapes], Policy]] = {
    "random": lambda shapes: RandomPolicy(),
    "dotprod": lambda shapes: DotProdPolicy(),
    "gpuclustering": lambda shapes: GpuClusteringPolicy(),
    "gpupacking": lambda shapes: GpuPackingPolicy(),
    "bestfit": lambda shapes: BestFitPolicy(),
    "fgd": FgdPolicy,
    "gpuplan": GpuplanPolicy,
    "lookahead": LookaheadPolicy,
}
