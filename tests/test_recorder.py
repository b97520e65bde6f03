"""The recorder numbers each window's buffers and threads from the start, in order of first use, so
the same work gives the same trace in any process and after any earlier window."""

from __future__ import annotations

import threading

from pytest_devmem.capture.recorder import TraceRecorder


def test_buffers_and_threads_are_numbered_per_window_in_order_of_first_use() -> None:
    recorder = TraceRecorder()
    recorder.begin()
    recorder.allocate(10, "jax")  # an earlier window's buffer: its later free is not this window's
    earlier = recorder.allocate(20, "jax")
    recorder.end()
    recorder.begin()
    first = recorder.allocate(1, "jax", "a", "cpu:0")
    other = threading.Thread(target=lambda: recorder.free(recorder.allocate(2, "jax", "b", "cpu:1")))
    other.start()
    other.join()
    recorder.free(earlier)
    recorder.free(first)
    trace = recorder.end()
    assert [(e.action, e.pointer, e.size, e.thread, e.device) for e in trace] == [
        ("allocate", 1, 1, 0, "cpu:0"),
        ("allocate", 2, 2, 1, "cpu:1"),
        ("free", 2, 2, 1, "cpu:1"),
        ("free", 1, 1, 0, "cpu:0"),
    ]
