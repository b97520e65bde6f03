"""Wall time of a suite of small tests with the plugin off and on (in-process), measured in one run.

    python -m benchmarks.bench_plugin [--tests 200] [--repeat 5]

Runs alternate off/on so drift hits both equally; the fastest of each counts. `session` is the time
pytest itself reports (collection and tests), `wall` adds interpreter start-up and imports.
Bytecode caching is on for both (PYTHONDONTWRITEBYTECODE is cleared), as in a normal install.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SMALL_TEST = """
import time
import pytest

@pytest.mark.parametrize("n", range({count}))
def test_small(n):
    deadline = time.perf_counter() + {work_ms} / 1000
    values = [i * i for i in range(200)]
    while time.perf_counter() < deadline:
        values = [v + 1 for v in values]
    assert sum(values) > n
"""
WORK_MS = (0, 1)
"""Per-test work: a trivial test (the worst case for any plugin) and one doing ~1 ms, still a small test."""

COMMON = ["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist"]
CONFIGURATIONS = {
    "off": ["-p", "no:devmem"],
    "on (prealloc, in-process)": ["--devmem-mode=prealloc"],
}


def run_once(directory: Path, extra: list[str]) -> tuple[float, float]:
    # bytecode caching on, as in a normal install: otherwise the editable plugin's modules are compiled
    # from source on every run while pytest's come precompiled, which measures the compiler, not the plugin
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", *COMMON, *extra, str(directory)],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
    )
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"benchmark suite failed:\n{completed.stdout}\n{completed.stderr}")
    session = float(re.findall(r" in ([0-9.]+)s", completed.stdout)[-1])
    return wall, session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=200, help="Number of small tests (default 200)")
    parser.add_argument(
        "--repeat", type=int, default=5, help="Runs of each configuration; the fastest counts (default 5)"
    )
    args = parser.parse_args(argv)
    print(f"{args.tests} small tests per suite, best of {args.repeat}")
    print(
        f"{'work/test':>9} {'configuration':<28} {'wall s':>8} {'session s':>10} {'wall ratio':>11} {'session ratio':>14}"
    )
    for work_ms in WORK_MS:
        with tempfile.TemporaryDirectory(prefix="devmem-bench-") as scratch:
            directory = Path(scratch)
            (directory / "test_small.py").write_text(SMALL_TEST.format(count=args.tests, work_ms=work_ms))
            best = {name: (float("inf"), float("inf")) for name in CONFIGURATIONS}
            for _ in range(args.repeat):
                for name, extra in CONFIGURATIONS.items():
                    wall, session = run_once(directory, extra)
                    best[name] = (min(best[name][0], wall), min(best[name][1], session))
        off_wall, off_session = best["off"]
        for name, (wall, session) in best.items():
            print(
                f"{work_ms:>7} ms {name:<28} {wall:>8.3f} {session:>10.3f} {wall / off_wall:>10.3f}x {session / off_session:>13.3f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
