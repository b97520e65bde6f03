"""`python -m benchmarks`: the pool benchmark, the machine benchmark, the plugin-overhead benchmark,
the step-loop benchmark, TensorFlow's capture on a small Keras/TensorFlow suite (skipped where
TensorFlow is not installed), a JAX suite sized by the TPU compiler against the CPU's (skipped where
libtpu is not installed), then the performance targets' table (`benchmarks/targets.py`: each figure
beside its target and its reference; docs/performance.md holds one as printed).

Flags go to the pool benchmark; `--quick` also shortens the others and leaves out the targets'
table (run `python -m benchmarks.targets --quick` for a check of that one).
"""

from __future__ import annotations

import importlib
import sys

from . import QUICK_ARGUMENTS, bench_pool, targets

if __name__ == "__main__":
    arguments = sys.argv[1:]
    quick = "--quick" in arguments
    status = bench_pool.main(arguments)
    for name, quick_arguments in QUICK_ARGUMENTS.items():
        print()
        status = status or importlib.import_module(f"benchmarks.{name}").main(list(quick_arguments) if quick else [])
    if not quick:
        print()
        status = status or targets.main([])
    raise SystemExit(status)
