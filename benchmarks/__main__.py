"""`python -m benchmarks`: the pool benchmark, the machine benchmark, then the plugin-overhead benchmark.

Flags go to the pool benchmark; `--quick` also shortens the others.
"""

from __future__ import annotations

import sys

from . import bench_machine, bench_plugin, bench_pool

if __name__ == "__main__":
    arguments = sys.argv[1:]
    quick = "--quick" in arguments
    status = bench_pool.main(arguments)
    print()
    status = status or bench_machine.main(["--quick"] if quick else [])
    print()
    raise SystemExit(status or bench_plugin.main(["--tests", "20", "--repeat", "1"] if quick else []))
