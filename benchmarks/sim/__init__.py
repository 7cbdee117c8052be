"""A trace-driven cluster simulator: gpuplan against FIFO, Tiresias and Gavel.

- `engine`: the discrete-event simulator (`Simulator`, `RoundView`, `SchedulingPolicy`);
- `occupancy`: the capacity ledger every decision is checked against;
- `policies`: one module per policy, registry `POLICIES`;
- `workloads`: ITP, Alibaba PAI 2023 and synthetic traces, speeds from Gavel's measurements;
- `cluster`: cluster spec files (`benchmarks/clusters/*.json`);
- `metrics`, `plots`, `runner`, `report`: figures, PNGs, comparison, merged tables.

Entry point: `gpuplan simulate` (api/cli/simulate.py); see benchmarks/SIMULATION.md.
"""
