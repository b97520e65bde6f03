"""`python -m benchmarks`: run every benchmark with its defaults."""

from __future__ import annotations

import sys

from .bench_pool import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
