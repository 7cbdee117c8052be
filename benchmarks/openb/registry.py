"""The one registry of online policies: name -> factory(typical shapes) -> policy."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.openb.frag import TypicalShapes
from benchmarks.openb.lookahead import LookaheadPolicy
from benchmarks.openb.policies import (
    BestFitPolicy,
    FgdPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    GpuplanPolicy,
    Policy,
    RandomPolicy,
)

POLICIES: dict[str, Callable[[TypicalShapes], Policy]] = {
    "random": lambda shapes: RandomPolicy(),
    "gpuclustering": lambda shapes: GpuClusteringPolicy(),
    "gpupacking": lambda shapes: GpuPackingPolicy(),
    "bestfit": lambda shapes: BestFitPolicy(),
    "fgd": FgdPolicy,
    "gpuplan": GpuplanPolicy,
    "lookahead": LookaheadPolicy,
}
