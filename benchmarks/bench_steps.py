"""A training-loop-shaped test: 20,000 jitted steps on 64x64 arrays, with the plugin off and on.

    python -m benchmarks.bench_steps [--steps 20000] [--repeat 5] [--events 1000000] [--quick]

One pytest run per configuration, alternating so drift hits each equally; the fastest of each
counts. Configurations: the plugin off; off with JAX's Python dispatch forced (every call goes
through `pjit._get_fastpath_data` answering None, as a capture that cannot keep JAX's C++ fast
path would force it; for comparison only); on (`--devmem-mode=prealloc`, in-process); on with
traces written (`--devmem-traces=DIR`). The test reports its own loop time, so `µs/step` is the
loop alone, and `CPU µs/step` the CPU time of the test's thread in it (steadier than wall time on a
busy machine); `session` is the time pytest reports (collection, the test, its replay and record).
The capture's cost per executable run is the on loop's figures less the off loop's.

Then the recorder alone: one million events (allocations and their frees) into a TraceRecorder,
with the memory the finished trace holds and the most held at any time, by tracemalloc (bytes per
event), and the time per event (best of three, tracemalloc off).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

STEP_TEST = """
import os
import time

import jax
import jax.numpy as jnp

if os.environ.get("BENCH_PYTHON_DISPATCH"):
    from jax._src import pjit

    pjit._get_fastpath_data = lambda *args, **kwargs: None  # every call on JAX's Python dispatch path


@jax.jit
def step(x, w):
    return 0.9 * x + 0.1 * (x @ w)


def test_steps():
    x = jnp.ones((64, 64), jnp.float32)
    w = jnp.full((64, 64), 1 / 64, jnp.float32)
    for _ in range(100):  # compiled and warm before the timed loop
        x = step(x, w)
    x.block_until_ready()
    start, start_cpu = time.perf_counter(), time.thread_time()
    for _ in range({steps}):
        x = step(x, w)
    x.block_until_ready()
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - start_cpu
    with open(os.environ["BENCH_LOOP_FILE"], "w") as handle:
        handle.write(f"{elapsed!r} {cpu!r}")
"""

COMMON = ["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist"]
CONFIGURATIONS: dict[str, tuple[list[str], dict[str, str]]] = {
    "off": (["-p", "no:devmem"], {}),
    "off, Python dispatch": (["-p", "no:devmem"], {"BENCH_PYTHON_DISPATCH": "1"}),
    "on (prealloc)": (["--devmem-mode=prealloc"], {}),
    "on, traces written": (["--devmem-mode=prealloc", "--devmem-traces={traces}"], {}),
}


def run_once(directory: Path, extra: list[str], environment_extra: dict[str, str]) -> tuple[float, float, float, float]:
    """(wall, session, loop, loop CPU of the test's thread) seconds of one pytest run of the step test."""
    loop_file = directory / "loop.txt"
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    environment.update(environment_extra, BENCH_LOOP_FILE=str(loop_file))
    traces = directory / "traces"
    arguments = [argument.format(traces=traces) for argument in extra]
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", *COMMON, *arguments, str(directory / "test_steps.py")],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        cwd=directory,
    )
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"step benchmark failed:\n{completed.stdout}\n{completed.stderr}")
    session = float(re.findall(r" in ([0-9.]+)s", completed.stdout)[-1])
    loop, loop_cpu = (float(part) for part in loop_file.read_text().split())
    return wall, session, loop, loop_cpu


def recorder_figures(events: int = 1_000_000) -> tuple[float, float, float]:
    """(bytes held per event, peak bytes per event, µs per event) of recording `events` events: half
    allocations, half their frees."""
    from pytest_devmem.capture.recorder import TraceRecorder

    def record(recorder: TraceRecorder) -> None:
        allocate, free = recorder.allocate, recorder.free
        for _ in range(events // 2):
            free(allocate(16384, "jax", "jit(step)", "cpu:0"))

    best = float("inf")
    for _ in range(3):
        recorder = TraceRecorder()
        recorder.begin()
        gc.collect()
        start = time.perf_counter()
        record(recorder)
        best = min(best, time.perf_counter() - start)
        recorder.end()
    recorder = TraceRecorder()
    gc.collect()
    tracemalloc.start()
    recorder.begin()
    record(recorder)
    trace = recorder.end()
    held, peak = tracemalloc.get_traced_memory()  # the trace as the window hands it over, and the most at any time
    tracemalloc.stop()
    assert len(trace) == events
    return held / events, peak / events, best / events * 1e6


def measure(
    steps: int, repeat: int, configurations: dict[str, tuple[list[str], dict[str, str]]]
) -> dict[str, tuple[float, float, float, float]]:
    """(wall, session, loop, loop CPU) seconds of each configuration, the fastest of `repeat`
    runs taken in turn (off, on, off, on...), so that a loaded machine slows each alike."""
    with tempfile.TemporaryDirectory(prefix="devmem-steps-") as scratch:
        directory = Path(scratch)
        (directory / "test_steps.py").write_text(STEP_TEST.replace("{steps}", str(steps)))
        best = {name: (float("inf"),) * 4 for name in configurations}
        for _ in range(repeat):
            for name, (extra, environment) in configurations.items():
                figures = run_once(directory, extra, environment)
                best[name] = tuple(min(old, new) for old, new in zip(best[name], figures))  # type: ignore[assignment]
        if any("traces" in " ".join(extra) for extra, _ in configurations.values()) and not sorted(
            (directory / "traces").glob("*.csv")
        ):
            raise SystemExit("the traces configuration wrote no trace")
    return best  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000, help="Jitted steps in the loop (default 20000)")
    parser.add_argument(
        "--repeat", type=int, default=5, help="Runs of each configuration; the fastest counts (default 5)"
    )
    parser.add_argument(
        "--events", type=int, default=1_000_000, help="Events recorded for the recorder figures (default 1000000)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1,000 steps, plugin off and on with traces, 100,000 events: checks the benchmark runs",
    )
    args = parser.parse_args(argv)
    configurations = CONFIGURATIONS
    if args.quick:
        args.steps, args.repeat, args.events = 1_000, 1, 100_000
        configurations = {name: CONFIGURATIONS[name] for name in ("off", "on, traces written")}
    print(f"{args.steps} jitted steps on 64x64 arrays in one test, best of {args.repeat}")
    print(
        f"{'configuration':<22} {'µs/step':>8} {'loop ratio':>11} {'CPU µs/step':>12} {'session s':>10} {'session ratio':>14} {'wall s':>8}"
    )
    best = measure(args.steps, args.repeat, configurations)
    _, off_session, off_loop, off_cpu = best["off"]
    for name, (wall, session, loop, cpu) in best.items():
        print(
            f"{name:<22} {loop / args.steps * 1e6:>8.2f} {loop / off_loop:>10.2f}x {cpu / args.steps * 1e6:>12.2f} "
            f"{session:>10.3f} {session / off_session:>13.2f}x {wall:>8.3f}"
        )
    on = "on (prealloc)" if "on (prealloc)" in best else "on, traces written"
    cost = (best[on][2] - off_loop) / args.steps * 1e6
    cpu_cost = (best[on][3] - off_cpu) / args.steps * 1e6
    print(
        f"capture cost per executable run: {cost:.2f} µs wall, {cpu_cost:.2f} µs CPU of the test's thread ({on} less off)"
    )
    per_event_bytes, peak_bytes, per_event_us = recorder_figures(args.events)
    print(
        f"recorder, {args.events:,} events: {per_event_bytes:.1f} bytes held per event ({peak_bytes:.1f} at most), {per_event_us:.2f} µs per event"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
