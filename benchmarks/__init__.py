"""Benchmarks, instance generators, the trace simulator and data loaders."""
