"""`python -m benchmarks`: the pool benchmark, the machine benchmark, the plugin-overhead benchmark,
the step-loop benchmark, TensorFlow's capture on a small Keras/TensorFlow suite (skipped where
TensorFlow is not installed), a JAX suite sized by the TPU compiler against the CPU's (skipped where
libtpu is not installed), then the performance targets' table (`benchmarks/targets.py`: each figure
beside its target and its reference; docs/performance.md holds one as printed).

Flags go to the pool benchmark; `--quick` also shortens the others and leaves out the targets'
table (run `python -m benchmarks.targets --quick` for a check of that one).
"""

from __future__ import annotations

import sys

from . import bench_machine, bench_plugin, bench_pool, bench_steps, bench_tensorflow, bench_tpu, targets

if __name__ == "__main__":
    arguments = sys.argv[1:]
    quick = "--quick" in arguments
    status = bench_pool.main(arguments)
    print()
    status = status or bench_machine.main(["--quick"] if quick else [])
    print()
    status = status or bench_plugin.main(["--tests", "20", "--repeat", "1"] if quick else [])
    print()
    status = status or bench_steps.main(["--quick"] if quick else [])
    print()
    status = status or bench_tensorflow.main(["--quick"] if quick else [])
    print()
    status = status or bench_tpu.main(["--quick", "--suite", "examples"] if quick else [])
    if not quick:
        print()
        status = status or targets.main([])
    raise SystemExit(status)
