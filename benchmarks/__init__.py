"""Benchmarks of pytest-devmem; run `python -m benchmarks` from the repository root."""

QUICK_ARGUMENTS = {
    "bench_machine": ("--quick",),
    "bench_plugin": ("--tests", "20", "--repeat", "1"),
    "bench_steps": ("--quick",),
    "bench_tensorflow": ("--quick",),
    "bench_tpu": ("--quick", "--suite", "examples"),
}
"""Each benchmark `python -m benchmarks --quick` runs after the pool's, in this order, with these
arguments (tests/project/test_benchmarks.py runs each the same way)."""
