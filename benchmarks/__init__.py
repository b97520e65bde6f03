"""Benchmarks of pytest-devmem; run `python -m benchmarks` from the repository root."""
