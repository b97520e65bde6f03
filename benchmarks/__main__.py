"""`python -m benchmarks`: the pool benchmark, then the plugin-overhead benchmark.

Flags go to the pool benchmark; `--quick` also shortens the overhead benchmark.
"""

from __future__ import annotations

import sys

from . import bench_plugin, bench_pool

if __name__ == "__main__":
    arguments = sys.argv[1:]
    status = bench_pool.main(arguments)
    print()
    quick = ["--tests", "20", "--repeat", "1"] if "--quick" in arguments else []
    raise SystemExit(status or bench_plugin.main(quick))
