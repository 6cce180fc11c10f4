"""Benchmarks: timing primitives (timing.py) and one sweep module per chapter."""
