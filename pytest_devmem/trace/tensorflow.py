"""TensorFlow's device memory as trace events.

TensorFlow's allocators report allocation events only to its profiler, and on CPU its allocator
emits none (TensorFlow 2.21: a profiler session around CPU ops holds no `MemoryAllocation`
event), so the capture uses what TensorFlow reports everywhere: `get_memory_info`'s peak over the
test. That peak becomes one allocation held for the whole test, an upper bound of what its
allocator held at any moment, and the record says so.
"""

from __future__ import annotations

from ..pool.trace import ALLOCATE, TraceEvent
from ..sources.base import Reading

SOURCE = "tensorflow"
PEAK_LABEL = "peak of TensorFlow's allocator over the test (get_memory_info), held throughout"
NOTE = "TensorFlow reports only its peak, which the trace holds for the whole test"


def tensorflow_events(reading: Reading) -> list[TraceEvent]:
    """The trace events a TensorFlow reading stands for: its peak as one allocation at the start."""
    if not reading.available or not reading.peak_bytes_in_use:
        return []
    return [TraceEvent(ALLOCATE, 1, int(reading.peak_bytes_in_use), 0.0, 0, 0, SOURCE, PEAK_LABEL)]
