"""Readers of the shared real data: derived curves and factors, each with its provenance."""
