"""gpuplan's interfaces: the FastAPI service (`api.app`) and the `gpuplan` command (`api.cli`).

Nothing here solves: every entry point calls `solver.plan`.
"""
