"""Benchmarks (`make bench`). Each `bench/*_bench.py` module exposes `run(quick: bool) -> dict`."""
