"""Replay generated traces into each policy and the first-fit reference; print speed and footprint.

    python -m benchmarks.bench_pool [--quick] [--repeat N] [--capacity 80GiB]

ops/s counts every alloc and every free replayed. `held/live` is the peak the pool held from the
device (peak_pool_bytes, or peak_bytes_reserved for ondemand, which has no pool) over the peak of
live requested bytes: 1.00 is the least any allocator can hold. `vs first-fit` is the speed ratio
against the reference measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import time

from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.pool import Policy, make_pool, replay
from pytest_devmem.model.trace import Trace
from pytest_devmem.units import parse_size

from .reference import FirstFitPool
from .workloads import WORKLOADS, many_small_tensors, mixed_small_and_huge, training_loop

POLICIES = ("prealloc", "growth", "ondemand")


def best_time(run, repeat: int) -> tuple[float, object]:
    """Fastest of `repeat` runs (each on fresh state), and the last run's result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            result = run()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best, result


def measure(trace: Trace, capacity: int, repeat: int) -> list[tuple[str, float, float, bool]]:
    rows = []
    seconds, reference = best_time(lambda: _replay_reference(trace, capacity), repeat)
    rows.append(("first-fit (reference)", len(trace) / seconds, reference.peak_end / trace.peak_live_bytes(), True))
    for mode in POLICIES:
        seconds, result = best_time(
            lambda: replay(trace, make_pool(SimulatedDevice(capacity), Policy.of(mode))), repeat
        )
        held = result.stats["peak_pool_bytes"] or result.stats["peak_bytes_reserved"]
        rows.append((mode, len(trace) / seconds, held / result.peak_live_bytes, result.ok))
    return rows


def _replay_reference(trace: Trace, capacity: int) -> FirstFitPool:
    pool = FirstFitPool(capacity)
    replay(trace, pool)  # type: ignore[arg-type]
    return pool


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Small traces, one repeat: checks the benchmark runs")
    parser.add_argument("--repeat", type=int, default=3, help="Runs per measurement; the fastest counts (default 3)")
    parser.add_argument("--capacity", default="80GiB", help="Simulated device capacity (default 80GiB, an H100)")
    args = parser.parse_args(argv)
    capacity = parse_size(args.capacity)
    if args.quick:
        workloads = {
            "many-small": lambda: many_small_tensors(operations=5_000, live_target=200),
            "mixed-small-huge": lambda: mixed_small_and_huge(operations=5_000),
            "training-loop": lambda: training_loop(steps=5, layers=8),
        }
        repeat = 1
    else:
        workloads, repeat = WORKLOADS, args.repeat
    print(f"device sim:{args.capacity}, best of {repeat}")
    print(f"{'trace':<18} {'events':>8} {'policy':<22} {'ops/s':>12} {'vs first-fit':>13} {'held/live':>10}  ok")
    for name, make in workloads.items():
        trace = make()
        rows = measure(trace, capacity, repeat)
        reference_speed = rows[0][1]
        for policy, speed, held_over_live, ok in rows:
            print(
                f"{name:<18} {len(trace):>8} {policy:<22} {speed:>12,.0f} {speed / reference_speed:>12.2f}x "
                f"{held_over_live:>10.3f}  {'yes' if ok else 'OOM'}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
