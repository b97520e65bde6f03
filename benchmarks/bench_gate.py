"""Gate stability and overhead on a third-party JAX suite: optax's own tests, run as its CI would.

    python -m benchmarks.bench_gate [--repeat 1] [--files N] [--json FILE] [--breakdown]

One session records baselines (`--devmem-update`); the unchanged suite then runs again in the same
order, in reverse order, and under pytest-xdist `-n 2`. Every memory-gate failure on those reruns
is a false failure: nothing changed. Then every selection must give the same record: a session
that measures only every other test (marked, no `--devmem-mode`) and one pytest-split shard give
each of their tests the figures and trace events of the session that measured all. Wall time with the plugin off, on, and on with `-n 2` is
measured alternately in the same run (best of --repeat), and reported as ratios against off, with
the CPU time of the session's processes beside it (steadier than wall time on a busy machine).
`--breakdown` runs the suite once more with the plugin on and prints where its per-test work goes
(`benchmarks/gate_breakdown.py`: the window's collections, thaws, the replay, ...).

The suite is optax's source distribution (its tests are not in the wheel): fetched once with
`pip download` into `.bench-cache/` and run against the installed optax of the same version
(`pip install -e '.[bench]'`). Test files that need packages optax's tests use but this
environment lacks (flax, say) are left out and listed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

OPTAX_VERSION = "0.2.8"
ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".bench-cache"
TEST_FILES = (
    "optax/_src/numerics_test.py",
    "optax/_src/update_test.py",
    "optax/_src/combine_test.py",
    "optax/_src/utils_test.py",
    "optax/_src/lookahead_test.py",
    "optax/_src/factorized_test.py",
    "optax/_src/transform_test.py",
    "optax/_src/base_test.py",
)
REVERSE_PLUGIN = "def pytest_collection_modifyitems(items):\n    items.reverse()\n"
MARK_HALF_PLUGIN = (
    "import pytest\n\n\n"
    "def pytest_collection_modifyitems(items):\n"
    "    for item in items[1::2]:  # every other test marked: a suite where only some tests are measured\n"
    "        item.add_marker(pytest.mark.devmem)\n"
)
COMMON = ["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-W", "ignore::DeprecationWarning"]


def suite_directory() -> Path:
    """optax's sdist, unpacked under .bench-cache/ (downloaded on first use)."""
    unpacked = CACHE / f"optax-{OPTAX_VERSION}"
    if unpacked.is_dir():
        return unpacked
    CACHE.mkdir(exist_ok=True)
    archive = CACHE / f"optax-{OPTAX_VERSION}.tar.gz"
    if not archive.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"optax=={OPTAX_VERSION}",
                "-d",
                str(CACHE),
            ],
            check=True,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(CACHE, filter="data")
    return unpacked


def check_installed() -> None:
    try:
        import optax  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        raise SystemExit(f"optax is not installed: pip install -e '.[bench]' (optax=={OPTAX_VERSION})") from None


def run(
    suite: Path, files: list[str], extra: list[str], report: Path | None, environment: dict[str, str]
) -> tuple[float, dict[str, object]]:
    """One pytest session over the suite; its wall time and its report (or its outcome counts)."""
    command = [sys.executable, "-m", "pytest", *COMMON, *extra, *files]
    if report is not None:
        command.append(f"--devmem-report={report}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=suite, capture_output=True, text=True, env=environment, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode not in (0, 1):
        raise SystemExit(
            f"the suite did not run ({' '.join(command)}):\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        )
    data: dict[str, object] = {
        "returncode": completed.returncode,
        "tail": completed.stdout.strip().splitlines()[-1:],
        "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,  # the session's, its workers' too
        "stdout": completed.stdout,
    }
    if report is not None and report.exists():
        data["report"] = json.loads(report.read_text())
    return wall, data


def moved(data: dict[str, object]) -> int:
    """Tests whose peak differs from its baseline at all, within tolerance or not."""
    report = data.get("report") or {}
    count = 0
    for record in report.get("records", []):  # type: ignore[union-attr]
        change = ((record.get("baseline") or {}).get("metrics") or {}).get("peak_bytes_in_use") or {}
        if change.get("delta"):
            count += 1
    return count


def records_that_differ(reference: dict[str, object], data: dict[str, object]) -> list[str]:
    """Tests whose record in `data` differs from the reference session's: a peak, the bytes requested,
    or the number of trace events (a selection that changes a figure, silently)."""

    def figures(run: dict[str, object]) -> dict[str, tuple[object, ...]]:
        report = run.get("report") or {}
        return {
            f"{r['test_id']} [{r['regime']}]": (
                r.get("peak_bytes_in_use"),
                r.get("peak_bytes_requested"),
                (r.get("trace") or {}).get("events"),
            )
            for r in report.get("records", [])  # type: ignore[union-attr]
        }

    expected = figures(reference)
    return [test for test, found in sorted(figures(data).items()) if expected.get(test) != found]


def gate_failures(data: dict[str, object]) -> list[str]:
    """Tests the memory gate failed: regressions against the baselines (and replayed OOMs)."""
    report = data.get("report") or {}
    failures = []
    for record in report.get("records", []):  # type: ignore[union-attr]
        baseline = record.get("baseline") or {}
        if baseline.get("status") == "regressed" or (record.get("trace") or {}).get("out_of_memory"):
            failures.append(f"{record['test_id']} [{record['regime']}]")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="Timed runs of each configuration, alternated; the fastest counts (default 1)",
    )
    parser.add_argument(
        "--files", type=int, default=len(TEST_FILES), help=f"Use the first N test files (default all {len(TEST_FILES)})"
    )
    parser.add_argument("--mode", default="prealloc", help="Regime of the measured runs (default prealloc)")
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures as JSON")
    parser.add_argument(
        "--breakdown", action="store_true", help="Also run once with the plugin's per-test work timed, piece by piece"
    )
    args = parser.parse_args(argv)
    check_installed()
    suite = suite_directory()
    files = list(TEST_FILES[: args.files])
    with tempfile.TemporaryDirectory(prefix="devmem-gate-") as scratch:
        work = Path(scratch)
        (work / "devmem_bench_reverse.py").write_text(REVERSE_PLUGIN)
        (work / "devmem_bench_mark_half.py").write_text(MARK_HALF_PLUGIN)
        environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work), environment.get("PYTHONPATH", "")]))
        measured = [f"--devmem-mode={args.mode}", f"--devmem-baselines={work / 'baselines'}"]
        _, recorded = run(suite, files, [*measured, "--devmem-update"], work / "update.json", environment)
        tested = len((recorded.get("report") or {}).get("records", []))  # type: ignore[union-attr]
        reruns = {
            "rerun, same order": measured,
            "rerun, reverse order": [*measured, "-p", "devmem_bench_reverse"],
            "rerun, -n 2": [*measured, "-n", "2"],
        }
        results: dict[str, list[str]] = {}
        changed: dict[str, int] = {}
        for name, extra in reruns.items():
            _, data = run(suite, files, extra, work / f"{len(results)}.json", environment)
            results[name] = gate_failures(data)
            changed[name] = moved(data)
        # every selection gives the same record: only every other test measured (marked, no
        # --devmem-mode), and one pytest-split shard, against the session that measured all
        selections = {
            "every other test marked": ["-p", "devmem_bench_mark_half", f"--devmem-baselines={work / 'baselines'}"],
            "shard 1 of 2": [*measured, "--splits", "2", "--group", "1"],
        }
        differing: dict[str, list[str]] = {}
        for name, extra in selections.items():
            _, data = run(suite, files, extra, work / f"selection-{len(differing)}.json", environment)
            differing[name] = records_that_differ(recorded, data)
        timings = {"off": ["-p", "no:devmem"], "on": measured, "on, -n 2": [*measured, "-n", "2"]}
        best = {name: float("inf") for name in timings}
        best_cpu = {name: float("inf") for name in timings}
        for _ in range(args.repeat):
            for name, extra in timings.items():
                wall, data = run(suite, files, extra, None, environment)
                best[name] = min(best[name], wall)
                best_cpu[name] = min(best_cpu[name], float(data["cpu"]))  # type: ignore[arg-type]
        breakdown = ""
        if args.breakdown:
            _, data = run(suite, files, [*measured, "-p", "benchmarks.gate_breakdown"], None, environment)
            text = str(data["stdout"])
            breakdown = text[text.find("devmem breakdown") :]
    print(f"optax {OPTAX_VERSION}: {len(files)} test files, {tested} measured tests, regime {args.mode}")
    print(f"{'run':<24} {'gate failures':>14} {'peaks that moved at all':>24}")
    for name, failures in results.items():
        print(f"{name:<24} {len(failures):>14} {changed[name]:>24}")
        for failure in failures[:10]:
            print(f"    {failure}")
    print(f"\n{'selection':<24} {'records that differ from the all-measured run':>46}")
    for name, tests in differing.items():
        print(f"{name:<24} {len(tests):>46}")
        for test in tests[:10]:
            print(f"    {test}")
    print(f"\n{'configuration':<24} {'wall s':>8} {'ratio':>8} {'CPU s':>8} {'ratio':>8}   (best of {args.repeat})")
    for name, wall in best.items():
        cpu = best_cpu[name]
        print(f"{name:<24} {wall:>8.2f} {wall / best['off']:>7.2f}x {cpu:>8.2f} {cpu / best_cpu['off']:>7.2f}x")
    print(f"load average at the end: {', '.join(f'{load:.2f}' for load in os.getloadavg())}")
    if breakdown:
        print("\n" + breakdown.rstrip())
    if args.json is not None:
        from pytest_devmem.files import write_atomic

        write_atomic(
            args.json,
            json.dumps(
                {
                    "tests": tested,
                    "false_failures": results,
                    "peaks_moved": changed,
                    "selections_differing": differing,
                    "wall_s": best,
                    "cpu_s": best_cpu,
                },
                indent=2,
            )
            + "\n",
        )
    return 1 if any(results.values()) or any(differing.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
