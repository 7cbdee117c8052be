"""The online experiment: place the arrival sequence one pod at a time, never moving one.

A `WindowPolicy` (the CP-SAT look-ahead) plans each window of consecutive arrivals jointly
against the current state; its placements are then committed one pod at a time, in
arrival order, exactly like single-pod decisions (a pod it left out is retried alone).

After each pod we record x = GPU milli requested by all arrived pods (failed ones
included) / capacity and y = used GPU milli / capacity, as the paper's simulator does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from benchmarks.openb.loader import OpenbNodes, OpenbPods
from benchmarks.openb.policies import Choice, Policy
from benchmarks.openb.state import ClusterState, PodReq, pod_reqs

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@runtime_checkable
class WindowPolicy(Protocol):
    """A policy that may also place a window of consecutive arrivals jointly."""

    window: int

    def choose(self, state: ClusterState, pod: PodReq, rng: np.random.Generator) -> Choice | None:
        ...

    def choose_window(self, state: ClusterState, pods: list[PodReq]) -> list[Choice | None]:
        ...


@dataclass
class RunResult:
    """One policy on one arrival sequence: the per-pod trace and totals."""

    policy: str
    seed: int
    x: FloatArray  # arrived GPU request / capacity, after each pod
    y: FloatArray  # allocation after each pod
    failed: int
    failed_gpu_pods: int
    wall_s: float
    placements: dict[str, Choice] = field(default_factory=dict)

    @property
    def final_allocation(self) -> float:
        """Allocation after the last pod."""
        return float(self.y[-1]) if len(self.y) else 0.0


def run_online(
    policy_name: str,
    policy: Policy,
    nodes: OpenbNodes,
    arrivals: OpenbPods,
    seed: int,
    keep_placements: bool = False,
    tie_rank: IntArray | None = None,
) -> tuple[RunResult, ClusterState]:
    """Place `arrivals` in order with `policy`.

    `tie_rank` is the node preference among equal scores (per node, lower first); without
    it a generator seeded with `seed` draws one (a random permutation, as the paper's
    simulator prefixes node names). That generator also serves any randomness the policy
    uses.
    """
    rng = np.random.default_rng([seed, 0x0B])
    drawn = rng.permutation(len(nodes))
    state = ClusterState(nodes, tie_rank=drawn if tie_rank is None else tie_rank)
    reqs = pod_reqs(arrivals, state.models)
    return _run(policy_name, policy, state, reqs, seed, rng, keep_placements), state


def _run(policy_name: str, policy: Policy, state: ClusterState, reqs: list[PodReq],
         seed: int, rng: np.random.Generator, keep: bool) -> RunResult:
    n = len(reqs)
    x = np.empty(n)
    y = np.empty(n)
    arrived = 0
    failed = failed_gpu = 0
    placements: dict[str, Choice] = {}
    start = time.perf_counter()
    window = max(1, int(getattr(policy, "window", 1)))
    for start_i in range(0, n, window):
        batch = reqs[start_i:start_i + window]
        planned: list[Choice | None] = (
            policy.choose_window(state, batch) if isinstance(policy, WindowPolicy) and window > 1
            else [None] * len(batch)
        )
        for j, pod in enumerate(batch):
            i = start_i + j
            arrived += pod.gpu_request
            choice = planned[j]
            if choice is None or not state.fits(choice[0], choice[1], pod):
                choice = policy.choose(state, pod, rng)
            if choice is None:
                failed += 1
                failed_gpu += pod.num_gpu > 0
            else:
                state.place(choice[0], choice[1], pod)
                if keep:
                    placements[pod.name] = choice
            x[i] = arrived / state.capacity_milli
            y[i] = state.used_milli / state.capacity_milli
    wall = time.perf_counter() - start
    return RunResult(policy_name, seed, x, y, failed, failed_gpu, wall, placements)
