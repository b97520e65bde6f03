"""Reading traces: `devmem replay` of a recorded trace end to end, and the memory reading one takes.

    python -m benchmarks.bench_read [--events 1000000] [--memory-events 2000000] [--repeat 3] [--quick]

A JAX step loop of `--events` events is recorded through TraceRecorder (as a capture records one)
and written in both of a trace's forms: its Arrow IPC file (`Trace.write_arrow`, the columnar form)
and its CSV (for people, pandas and RMM). `devmem replay` of each is then timed in this process
(what the command does after Python starts: read the trace, replay it on the model of the machine,
make its table), the fastest of `--repeat`, as events/s; the Arrow file's is the figure the target
names. Beside it, in the same run: the CSV read by column (pyarrow's CSV reader), the row-by-row
reader (what reads a CSV where pyarrow is missing; once, it is slow), pyarrow's own parse of the
CSV into a table (the floor any column reader of the CSV stands on), and the replay alone on the
trace already read (what is left once reading costs nothing).

Memory: a trace of `--memory-events` events (10,000,000 for the figure the target names) is read
from each form in a fresh process, and the growth of its resident memory at its peak while
reading (Linux's VmHWM, reset before the read where the kernel allows) is compared with the bytes
of the trace it made (its columns). pyarrow and numpy are imported before, so their libraries are
not counted.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_devmem.model.trace import ACTIONS, HEADER, Trace

TARGET_EVENTS_PER_SECOND = 1_000_000
"""A trace read and replayed end to end at a million events a second or more (two cores)."""
TARGET_MEMORY_RATIO = 2.0
"""Memory while reading within twice the trace's own size."""
ROOT = Path(__file__).resolve().parents[1]


def write_trace_csv(trace: Trace, path: Path) -> None:
    """`trace` as a trace CSV, by column with pyarrow (Trace.write_csv takes some 1.4 s of CPU
    a million events): the same columns and texts, numbers in their shortest form."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    def texts(codes: object, names: list[str]) -> pa.Array:
        return pa.DictionaryArray.from_arrays(
            pa.array(np.frombuffer(codes, dtype=np.uint32).astype(np.int32)), pa.array(names)
        ).cast(pa.string())  # type: ignore[arg-type]

    def hexadecimal(values: object) -> pa.Array:
        numbers = np.frombuffer(values, dtype=np.uint64)  # type: ignore[call-overload]
        nibbles = ((numbers[:, None] >> (4 * np.arange(15, -1, -1, dtype=np.uint64))) & 15).astype(np.uint8)
        digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles]
        padded = pa.Array.from_buffers(
            pa.string(),
            len(numbers),
            [
                None,
                pa.py_buffer(np.arange(0, 16 * len(numbers) + 1, 16, dtype=np.int32).tobytes()),
                pa.py_buffer(digits.tobytes()),
            ],
        )
        import pyarrow.compute as pc

        trimmed = pc.utf8_ltrim(padded, "0")
        return pc.binary_join_element_wise("0x", pc.if_else(pc.equal(trimmed, ""), "0", trimmed), "")

    actions = np.frombuffer(bytes(trace.actions), dtype=np.uint8)
    table = pa.table(
        {
            "Thread": pa.array(np.frombuffer(trace.threads, dtype=np.uint64)),
            "Time": pa.array(np.frombuffer(trace.times, dtype=np.float64)),
            "Action": pa.DictionaryArray.from_arrays(pa.array(actions.astype(np.int32)), pa.array(list(ACTIONS))).cast(
                pa.string()
            ),
            "Pointer": hexadecimal(trace.pointers),
            "Size": pa.array(np.frombuffer(trace.sizes, dtype=np.int64)),
            "Stream": hexadecimal(trace.streams),
            "Source": texts(trace.sources, trace.names),
            "Label": texts(trace.labels, trace.names),
            "Device": texts(trace.devices, trace.names),
            "Process": pa.array(np.frombuffer(trace.processes, dtype=np.uint32)),
        }
    )
    with open(path, "wb") as handle:
        handle.write((",".join(HEADER) + "\n").encode())
        pacsv.write_csv(table, handle, write_options=pacsv.WriteOptions(include_header=False, quoting_style="needed"))


def recorded_trace(events: int) -> Trace:
    """A JAX step loop of about `events` events on one GPU, as the capture records one."""
    from .bench_machine import record_steps

    trace = record_steps(events)
    trace.devices = type(trace.devices)("I", [trace.name_code("gpu:0")]) * len(trace)
    return trace


def model_seconds(path: Path, repeat: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of `repeat` replays of the trace at `path`, already read,
    on the machine `devmem replay --mode prealloc` builds for it (80 GiB devices, the trace's GPU):
    the part of the end-to-end figure that is not reading."""
    from pytest_devmem.model.device import DEFAULT_COMPUTE_CAPABILITY
    from pytest_devmem.model.frameworks import setups_for
    from pytest_devmem.model.machine import MachineSpec, run_machine
    from pytest_devmem.model.pool import Policy

    trace = Trace.read(path)
    capacity = 80 * 2**30
    spec = MachineSpec(capacity, "sim:80GiB", DEFAULT_COMPUTE_CAPABILITY[0], default_device="gpu:0")
    setups = setups_for(Policy.of("prealloc", None), capacity)
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        run_machine(trace, setups, spec)
        best = min(best, (time.perf_counter() - start, time.process_time() - start_cpu))
    return best


def replay_seconds(path: Path, repeat: int, by_row: bool = False) -> float:
    """The fastest of `repeat` runs of what `devmem replay PATH --mode prealloc` does once Python
    has started; with `by_row`, read row by row as where pyarrow is missing."""
    return replay_times(path, repeat, by_row)[0]


def replay_times(path: Path, repeat: int, by_row: bool = False) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process, all its threads) of the fastest of `repeat` runs
    of `replay_seconds`: CPU time is what a machine busy with other work inflates least."""
    from pytest_devmem.cli import common
    from pytest_devmem.cli.replay import replay_trace
    from pytest_devmem.model.trace import csv_columns as trace_arrow

    available, note_from = trace_arrow.available, common.SLOW_READ_BYTES
    common.SLOW_READ_BYTES = 2**63  # no note on how to read faster: this is the slow way on purpose
    best = (float("inf"), float("inf"))
    try:
        if by_row:
            trace_arrow.available = lambda: False  # type: ignore[assignment]
        for _ in range(repeat):
            gc.collect()
            start, start_cpu = time.perf_counter(), time.process_time()
            replay_trace(path, "prealloc", None, "sim:80GiB").markdown()
            best = min(best, (time.perf_counter() - start, time.process_time() - start_cpu))
    finally:
        trace_arrow.available = available  # type: ignore[assignment]
        common.SLOW_READ_BYTES = note_from
    return best


def parse_seconds(path: Path, repeat: int) -> float:
    """pyarrow's own parse of the file into a table, columns typed as the reader types them."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from pytest_devmem.model.trace.csv_columns import column_types

    types = column_types(pa)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=types))
        best = min(best, time.perf_counter() - start)
    return best


# -- memory, in a fresh process --------------------------------------------------------------


def _status(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def measure_reading_memory(path: str) -> dict[str, float | int | None]:
    """Read the trace at `path` in this process: the growth of resident memory at its peak while
    reading, the trace's own bytes, and the seconds. Run it in a fresh process."""
    import numpy  # noqa: F401  (the libraries' own memory is not the reading's)
    import pyarrow.csv  # noqa: F401
    import pyarrow.ipc  # noqa: F401

    from pytest_devmem.model.trace import arrow_file, csv_columns  # noqa: F401

    from .bench_machine import trace_bytes

    gc.collect()
    reset = False
    try:
        with open("/proc/self/clear_refs", "w") as handle:  # resets VmHWM to the current RSS
            handle.write("5")
        reset = True
    except OSError:
        pass
    before = _status("VmRSS") if reset else _status("VmHWM")
    start = time.perf_counter()
    trace = Trace.read(path)
    seconds = time.perf_counter() - start
    peak = _status("VmHWM")
    return {
        "events": len(trace),
        "trace_bytes": trace_bytes(trace),
        "growth_bytes": None if before is None or peak is None else peak - before,
        "seconds": seconds,
        "peak_reset": reset,
    }


def memory_in_fresh_process(path: Path) -> dict[str, float | int | None]:
    code = f"import json; from benchmarks.bench_read import measure_reading_memory; print(json.dumps(measure_reading_memory({str(path)!r})))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- the figures -----------------------------------------------------------------------------


def figures(events: int, memory_events: int, repeat: int) -> dict[str, float | int | None]:
    """Every figure of this benchmark, as `python -m benchmarks` prints it beside its target."""
    with tempfile.TemporaryDirectory(prefix="devmem-read-") as scratch:
        path, columnar = Path(scratch) / "trace.csv", Path(scratch) / "trace.arrow"
        trace = recorded_trace(events)
        count = len(trace)
        write_trace_csv(trace, path)
        start = time.perf_counter()
        trace.write_arrow(columnar)
        write_seconds = time.perf_counter() - start
        del trace
        seconds, cpu_seconds = replay_times(columnar, repeat)
        csv_seconds, csv_cpu_seconds = replay_times(path, repeat)
        alone, alone_cpu = model_seconds(columnar, repeat)
        row_seconds = replay_seconds(path, 1, by_row=True)
        parse = parse_seconds(path, repeat)
        size, columnar_size = path.stat().st_size, columnar.stat().st_size
        if memory_events != events:
            trace = recorded_trace(memory_events)
            write_trace_csv(trace, path)
            trace.write_arrow(columnar)
            del trace
        memory = memory_in_fresh_process(columnar)
        csv_memory = memory_in_fresh_process(path)
    return {
        "events": count,
        "file_bytes": size,
        "arrow_file_bytes": columnar_size,
        "arrow_write_seconds": write_seconds,
        "replay_events_per_second": count / seconds,
        "replay_events_per_cpu_second": count / cpu_seconds,
        "csv_replay_events_per_second": count / csv_seconds,
        "csv_replay_events_per_cpu_second": count / csv_cpu_seconds,
        "model_events_per_second": count / alone,
        "model_events_per_cpu_second": count / alone_cpu,
        "row_reader_events_per_second": count / row_seconds,
        "pyarrow_parse_events_per_second": count / parse,
        "memory_events": memory["events"],
        "memory_trace_bytes": memory["trace_bytes"],
        "memory_growth_bytes": memory["growth_bytes"],
        "memory_seconds": memory["seconds"],
        "csv_memory_trace_bytes": csv_memory["trace_bytes"],
        "csv_memory_growth_bytes": csv_memory["growth_bytes"],
        "csv_memory_seconds": csv_memory["seconds"],
    }


def print_figures(found: dict[str, float | int | None]) -> None:
    from pytest_devmem.units import format_size

    def rate(key: str) -> float:
        return float(found[key] or 0)

    speed, events = rate("replay_events_per_second"), int(found["events"] or 0)
    print(
        f"devmem replay of a recorded JAX step loop of {events:,} events, in process: its Arrow file"
        f" ({format_size(int(found['arrow_file_bytes'] or 0))}, written in {rate('arrow_write_seconds'):.2f} s)"
        f" and its CSV ({format_size(int(found['file_bytes'] or 0))})"
    )
    print(
        f"  Arrow file: read + replay + table  {speed:>12,.0f} events/s  target >= {TARGET_EVENTS_PER_SECOND:,}  {'yes' if speed >= TARGET_EVENTS_PER_SECOND else 'no'}"
    )
    print(
        f"    by CPU time                      {rate('replay_events_per_cpu_second'):>12,.0f} events per CPU second (every thread of the process)"
    )
    print(
        f"  CSV: read + replay + table         {rate('csv_replay_events_per_second'):>12,.0f} events/s  ({rate('csv_replay_events_per_cpu_second'):,.0f} per CPU second; pyarrow's CSV reader)"
    )
    print(
        f"  CSV, row-by-row reader             {rate('row_reader_events_per_second'):>12,.0f} events/s  (read + replay where pyarrow is missing)"
    )
    print(
        f"  pyarrow's CSV parse alone          {rate('pyarrow_parse_events_per_second'):>12,.0f} events/s  (the CSV into a table, no trace made)"
    )
    print(
        f"  replay alone, trace already read   {rate('model_events_per_second'):>12,.0f} events/s  ({rate('model_events_per_cpu_second'):,.0f} per CPU second; the model's loops)"
    )
    memory_events = int(found["memory_events"] or 0)
    for form, growth, size, seconds in (
        ("Arrow file", found["memory_growth_bytes"], int(found["memory_trace_bytes"] or 1), found["memory_seconds"]),
        (
            "CSV",
            found["csv_memory_growth_bytes"],
            int(found["csv_memory_trace_bytes"] or 1),
            found["csv_memory_seconds"],
        ),
    ):
        if growth is None:
            print(f"  reading {memory_events:,} events ({form}): memory not measured (no VmHWM on this platform)")
            continue
        ratio = growth / size
        print(
            f"  reading {memory_events:,} events ({form}): {format_size(int(growth))} peak RSS growth for a trace of {format_size(size)} = {ratio:.2f}x"
            f"  target <= {TARGET_MEMORY_RATIO:g}x  {'yes' if ratio <= TARGET_MEMORY_RATIO else 'no'}  ({float(seconds or 0):.1f} s)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--events", type=int, default=1_000_000, help="Events of the trace replayed end to end (default a million)"
    )
    parser.add_argument(
        "--memory-events",
        type=int,
        default=2_000_000,
        help="Events of the trace whose reading memory is measured (10000000: the target's size; default 2000000)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="Runs per timing; the fastest counts (default 3)")
    parser.add_argument("--quick", action="store_true", help="100,000 events, one run: checks the benchmark runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.memory_events, args.repeat = 100_000, 100_000, 1
    print_figures(figures(args.events, args.memory_events, args.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
