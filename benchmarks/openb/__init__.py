"""The OpenB fragmentation benchmark (Alibaba PAI 2023 trace, the FGD paper's workload).

Modules: `loader` (CSV -> arrays and the wire contract), `inflation` (workload inflation and
arrival order), `state` (incremental numpy cluster state), `frag` (FGD's node
fragmentation), `policies` (single-pod online policies), `lookahead` (CP-SAT on windows),
`registry` (the policy registry), `online` (the experiment loop), `batch` (`solver.plan` on
all pods at once), `curve` (binning, CSV, PNG) and `cli` (`gpuplan bench openb`).
"""
