"""A long test's trace stays small in memory: the recorder writes each event into the trace's columns
(about 64 bytes an event) and keeps nothing per event besides the buffers still live."""

from __future__ import annotations

import sys
import tracemalloc

from pytest_devmem.capture.recorder import TraceRecorder
from pytest_devmem.model.trace import NUMBER_COLUMNS, Trace

MAX_BYTES_PER_EVENT = 80
"""61 bytes of column values an event (the site's name code among them), plus what the columns
over-allocate as they grow."""


def record(recorder: TraceRecorder, events: int) -> None:
    allocate, free = recorder.allocate, recorder.free
    for _ in range(events // 2):
        free(allocate(16384, "jax", "jit(step)", "cpu:0"))


def column_bytes(trace: Trace) -> int:
    columns = (trace.actions, *(getattr(trace, name) for name in NUMBER_COLUMNS))
    return sum(sys.getsizeof(column) for column in columns)


def test_a_million_events_record_in_small_memory() -> None:
    recorder = TraceRecorder()
    recorder.begin()
    record(recorder, 1_000_000)
    trace = recorder.end()
    held = column_bytes(trace)
    assert len(trace) == 1_000_000 and len(trace.names) == 4  # "", the source, the label, the device
    assert held / 1_000_000 <= MAX_BYTES_PER_EVENT, held


def test_the_columns_are_all_a_recording_holds_per_event() -> None:
    """What tracemalloc sees the recording hold, and at most while it ends, against its columns alone
    (fewer events: tracing every Python allocation is slow)."""
    recorder = TraceRecorder()
    tracemalloc.start()
    try:
        recorder.begin()
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        record(recorder, 100_000)
        trace = recorder.end()
        held, peak = tracemalloc.get_traced_memory()
        columns = column_bytes(trace)
    finally:
        tracemalloc.stop()
    assert held - before <= columns + 64 * 1024, (held - before, columns)  # nothing else grows with the events
    assert peak - before <= columns * 1.2, (peak - before, columns)  # nor while the window ends
