"""Replay generated traces through the model of the machine; print its speed, and what a trace of a
million events costs in memory.

    python -m benchmarks.bench_machine [--quick] [--repeat N] [--capacity 80GiB] [--mode prealloc] [--events 1000000]
    python -m benchmarks.bench_machine --targets [--repeat 3]    # the model's rows of benchmarks.targets alone

events/s counts every event of a trace (allocations and frees) replayed by `run_machine`: every
device, allocator, peak, map and fragmentation figure of a test (the BFC rules compiled by numba).
`Python loop` is the same replay with the compiled loop off (the event loop, `DEVMEM_COMPILED=0`). `pool only` replays the same trace
into one BFC pool (`replay`, what `bench_pool` measures), and `vs pool` is the ratio of the two,
measured alternately in the same run (the fastest of `--repeat` runs each), so that a loaded machine
moves both alike.

The memory part runs in a fresh process: it records a JAX step loop of `--events` events through
`TraceRecorder` (what a capture does), then replays it. `trace` is the bytes per event of the
recorded `Trace` (its columns); `recording` and `replay` are the growth of the process's peak
resident memory while recording and while replaying, per event and in all.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.frameworks import setups_for
from pytest_devmem.model.machine import MachineSpec, run_machine
from pytest_devmem.model.machine.loops import compiled_bfc
from pytest_devmem.model.pool import Policy, make_pool, replay
from pytest_devmem.model.trace import NUMBER_COLUMNS, Trace
from pytest_devmem.units import format_size, parse_size

from .workloads import (
    MACHINE_WORKLOADS,
    jax_step_loop,
    many_small_tensors,
    mixed_small_and_huge,
    sharded_step_loop,
    training_loop,
)

TARGET_EVENTS_PER_SECOND = 2_000_000
"""The speed the model of the machine aims at on this kind of machine (one core; the compiled loop
where numba is installed)."""


def best_of_alternating(runs: list[Callable[[], object]], repeat: int) -> list[float]:
    """The fastest time of each run, the runs taken in turn `repeat` times (GC off while timed)."""
    best = [float("inf")] * len(runs)
    for _ in range(repeat):
        for position, run in enumerate(runs):
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                run()
                best[position] = min(best[position], time.perf_counter() - start)
            finally:
                gc.enable()
    return best


def measure_speed(
    workloads: dict[str, Callable[[], Trace]], capacity: int, mode: str, repeat: int
) -> list[tuple[str, int, int, int, float, float, float]]:
    """(workload, events, devices, allocators, machine events/s, Python loop's events/s, pool-only
    events/s) per workload."""
    spec, setups, policy = MachineSpec(capacity, "sim"), setups_for(Policy.of(mode), capacity), Policy.of(mode)
    rows = []
    compiled_bfc.available()  # loaded once a process (about half a second), before any timing
    for name, make in workloads.items():
        trace = make()
        run = run_machine(trace, setups, spec)
        allocators = sum(len(device.allocators) for device in run.devices)
        machine_seconds, python_seconds, pool_seconds = best_of_alternating(
            [
                lambda: run_machine(trace, setups, spec),
                lambda: python_loop(trace, setups, spec),
                lambda: replay(trace, make_pool(SimulatedDevice(capacity), policy)),
            ],
            repeat,
        )
        rows.append(
            (
                name,
                len(trace),
                len(run.devices),
                allocators,
                len(trace) / machine_seconds,
                len(trace) / python_seconds,
                len(trace) / pool_seconds,
            )
        )
    return rows


# -- memory of a million events, in a fresh process ------------------------------------------


def python_loop(trace: Trace, setups: Any, spec: MachineSpec) -> object:
    """The replay as a machine without numba runs it: the compiled loop's reference."""
    with compiled_bfc.python_only():
        return run_machine(trace, setups, spec)


def peak_rss() -> int | None:
    """This process's peak resident memory in bytes; None where the platform does not say.

    Linux's VmHWM belongs to the process image, so a child's starts afresh; getrusage's ru_maxrss
    would carry the parent's peak across exec."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def record_steps(events: int) -> Trace:
    """A JAX step loop recorded through TraceRecorder as the JAX capture records one: per step an
    output, the executable's temporary allocated and freed at once, the previous output freed."""
    from pytest_devmem.capture.recorder import TraceRecorder

    recorder = TraceRecorder()
    recorder.begin()
    allocate, free = recorder.allocate, recorder.free
    allocate(64 * 2**20, "jax", "params")
    previous = 0
    for _ in range(events // 4):
        output = allocate(16 * 2**10, "jax", "jit(step)")
        free(allocate(8 * 2**10, "jax", "jit(step) temp"))
        if previous:
            free(previous)
        previous = output
    return recorder.end()


def trace_bytes(trace: Trace) -> int:
    """The bytes a Trace's columns take (their buffers, as allocated)."""
    columns = (trace.actions, *(getattr(trace, name) for name in NUMBER_COLUMNS))
    return sum(sys.getsizeof(column) for column in columns) + sum(sys.getsizeof(name) for name in trace.names)


def measure_memory(events: int, capacity: int, kernel_first: bool = False) -> dict[str, float | int | None]:
    """Record and replay `events` events in this process; what each cost. Run it in a fresh one.
    With `kernel_first`, the compiled loop is loaded (numba and its kernel, once a process) by the
    replay of a short trace before anything is measured, and what that took is `kernel_load_bytes`:
    the replay's growth is then its own."""
    spec, setups = MachineSpec(capacity, "sim"), setups_for(Policy.of("prealloc"), capacity)
    loaded = None
    if kernel_first and compiled_bfc.available():
        start = peak_rss()
        run_machine(record_steps(4 * compiled_bfc.COMPILED_FROM_EVENTS), setups, spec)
        end = peak_rss()
        loaded = None if start is None or end is None else end - start
    gc.collect()
    before = peak_rss()
    trace = record_steps(events)
    recorded = peak_rss()
    gc.collect()
    start = time.perf_counter()  # the collector on, as in a session: numba's load makes garbage of its own
    run = run_machine(trace, setups, spec)
    seconds = time.perf_counter() - start
    replayed = peak_rss()
    return {
        "events": len(trace),
        "trace_bytes": trace_bytes(trace),
        "recording_bytes": None if before is None or recorded is None else recorded - before,
        "replay_bytes": None if recorded is None or replayed is None else replayed - recorded,
        "replay_events_per_second": len(trace) / seconds,
        "peak_bytes_in_use": run.devices[0].peak_bytes_in_use if run.devices else 0,
        "kernel_load_bytes": loaded,
    }


def memory_in_fresh_process(events: int, capacity: int, kernel_first: bool = False) -> dict[str, float | int | None]:
    """`measure_memory` in a child process, so that its peak memory is this measurement's alone."""
    code = f"import json; from benchmarks.bench_machine import measure_memory; print(json.dumps(measure_memory({events}, {capacity}, {kernel_first})))"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def shown_bytes(value: float | int | None, events: int) -> str:
    if value is None:
        return "not measured (no peak-memory counter on this platform)"
    return f"{format_size(max(0, int(value)))} ({max(0.0, value) / events:.1f} B/event)"


def print_target_rows(quick: bool, repeat: int) -> int:
    """The model's rows of the targets' table, as `benchmarks.targets` prints them."""
    import platform

    from .targets import model_rows, table

    started, started_cpu = time.perf_counter(), time.process_time()
    if quick:
        workloads: dict[str, Callable[[], Trace]] = {
            "many-small": lambda: many_small_tensors(operations=5_000, live_target=200),
            "sharded-steps": lambda: sharded_step_loop(steps=500),
        }
        repeat = 1
    else:
        workloads = MACHINE_WORKLOADS
    rows = model_rows(workloads, repeat)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(
        f"the model's targets: {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs"
        + (f", load average {load:.1f} at the end" if load is not None else "")
        + f", {time.perf_counter() - started:.0f} s ({time.process_time() - started_cpu:.0f} s CPU)"
    )
    print()
    print(table(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Small traces, one repeat: checks the benchmark runs")
    parser.add_argument(
        "--repeat", type=int, default=5, help="Runs per measurement, alternating; the fastest counts (default 5)"
    )
    parser.add_argument("--capacity", default="80GiB", help="Simulated device capacity (default 80GiB, an H100)")
    parser.add_argument("--mode", default="prealloc", help="Allocation regime of every allocator (default prealloc)")
    parser.add_argument(
        "--events",
        type=int,
        default=1_000_000,
        help="Events of the recorded trace of the memory part (default a million)",
    )
    parser.add_argument(
        "--targets",
        action="store_true",
        help="Only the model's rows of `benchmarks.targets` (every workload under every regime, beside its target)",
    )
    args = parser.parse_args(argv)
    if args.targets:
        return print_target_rows(args.quick, args.repeat if args.repeat != 5 else 3)
    capacity = parse_size(args.capacity)
    if args.quick:
        workloads: dict[str, Callable[[], Trace]] = {
            "jax-step-loop": lambda: jax_step_loop(steps=3_000),
            "many-small": lambda: many_small_tensors(operations=5_000, live_target=200),
            "mixed-small-huge": lambda: mixed_small_and_huge(operations=5_000),
            "training-loop": lambda: training_loop(steps=5, layers=8),
            "sharded-steps": lambda: sharded_step_loop(steps=500),
        }
        repeat, events = 1, 20_000
    else:
        workloads, repeat, events = MACHINE_WORKLOADS, args.repeat, args.events
    loop = "compiled (numba)" if compiled_bfc.available() else "Python (numba not installed)"
    print(
        f"model of the machine: device sim:{args.capacity}, regime {args.mode}, loop {loop}, best of {repeat}"
        " (alternating with the Python loop and the pool-only replay)"
    )
    print(
        f"{'trace':<18} {'events':>8} {'devices':>7} {'allocators':>10} {'events/s':>12} {'Python loop':>12} {'pool only':>12} {'vs pool':>8}  target {TARGET_EVENTS_PER_SECOND:,}"
    )
    rows = measure_speed(workloads, capacity, args.mode, repeat)
    for name, count, devices, allocators, speed, python_speed, pool_speed in rows:
        reached = "yes" if speed >= TARGET_EVENTS_PER_SECOND else "no"
        print(
            f"{name:<18} {count:>8} {devices:>7} {allocators:>10} {speed:>12,.0f} {python_speed:>12,.0f} {pool_speed:>12,.0f} {speed / pool_speed:>7.2f}x  {reached}"
        )
    memory = memory_in_fresh_process(events, capacity)
    count = int(memory["events"] or 1)
    print(f"a recorded JAX step loop of {count:,} events (fresh process):")
    print(
        f"  trace     {format_size(int(memory['trace_bytes'] or 0))} ({(memory['trace_bytes'] or 0) / count:.1f} B/event)"
    )
    print(f"  recording {shown_bytes(memory['recording_bytes'], count)} peak RSS growth")
    print(
        f"  replay    {shown_bytes(memory['replay_bytes'], count)} peak RSS growth, {memory['replay_events_per_second']:,.0f} events/s"
    )
    # the same with the compiled loop loaded first: the replay's own growth, and the load's
    if compiled_bfc.available():
        loaded = memory_in_fresh_process(events, capacity, kernel_first=True)
        print(
            f"  replay    {shown_bytes(loaded['replay_bytes'], count)} peak RSS growth, {loaded['replay_events_per_second']:,.0f} events/s,"
            f" the compiled loop loaded before (its load: {shown_bytes(loaded['kernel_load_bytes'], 1).split(' (')[0]}, once a process)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
