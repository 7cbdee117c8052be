"""Scheduling policies for the simulator, one module each, all behind `SchedulingPolicy`
(`schedule(view: RoundView) -> Decision`). `POLICIES` maps a name to a factory."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.sim.engine import SchedulingPolicy
from benchmarks.sim.policies.afs_elastic import AfsElastic
from benchmarks.sim.policies.fifo_firstfit import FifoFirstFit
from benchmarks.sim.policies.gavel_maxmin import GavelMaxMin
from benchmarks.sim.policies.gpuplan import GpuPlan
from benchmarks.sim.policies.kueue_like import KueueLike
from benchmarks.sim.policies.tiresias_las import TiresiasLas
from benchmarks.sim.policies.within_limits import FifoWithinLimits, SrptWithinLimits

#: Policy name -> factory of a fresh policy object (policies may keep per-run state).
POLICIES: dict[str, Callable[[], SchedulingPolicy]] = {
    "fifo_firstfit": FifoFirstFit,
    "tiresias_las": TiresiasLas,
    "gavel_maxmin": GavelMaxMin,
    "gpuplan": GpuPlan,
    "afs_elastic": AfsElastic,
    "gpuplan_fixed": lambda: GpuPlan(elastic=False, name="gpuplan_fixed"),
    "kueue_like": KueueLike,
    "fifo_limits": FifoWithinLimits,
    "srpt_limits": SrptWithinLimits,
}

__all__ = ["POLICIES", "AfsElastic", "FifoFirstFit", "FifoWithinLimits", "GavelMaxMin",
           "GpuPlan", "KueueLike", "SrptWithinLimits", "TiresiasLas"]
