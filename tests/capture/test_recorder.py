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
        ("free", 1, 1, 0, "cpu:0"),  # the frees that close the window: in allocation order (below)
        ("free", 2, 2, 1, "cpu:1"),
    ]


def test_the_frees_that_close_a_window_come_in_allocation_order_at_their_own_times() -> None:
    """Python lets go of what a test held as it finishes in an order that carries what ran before in
    the process; the pool's state between those frees (its fragmentation, sampled per event) carried
    it too. Only the frees after the last allocation are put in order; their times stay."""
    recorder = TraceRecorder()
    recorder.begin()
    a, b, c, d = (recorder.allocate(size, "jax", name) for size, name in ((1, "a"), (2, "b"), (3, "c"), (4, "d")))
    for buffer_id in (c, a):
        recorder.free(buffer_id)
    recorder.allocate(5, "jax", "e")  # an allocation: the frees before it keep their order
    for buffer_id in (d, b):
        recorder.free(buffer_id)
    trace = recorder.end()
    assert [(e.action, e.label) for e in trace][4:] == [
        ("free", "c"),
        ("free", "a"),
        ("allocate", "e"),
        ("free", "b"),
        ("free", "d"),
    ]
    assert list(trace.times) == sorted(trace.times)


def test_compact_steps_and_frees_keep_their_place_among_direct_events() -> None:
    """A run recorded as one compact record (its output over two devices, then its temp allocated
    and freed) and a free recorded later as another are written in the order they happened, among
    events recorded directly, with the same numbering: not all at the window's end."""
    recorder = TraceRecorder()
    step = recorder.step(
        ((8, "jax", "jit(f)", "cpu:0"), (8, "jax", "jit(f)", "cpu:1")), ((4, "jax", "jit(f) temp", "cpu:0"),)
    )
    recorder.begin()
    before = recorder.allocate(1, "pool", "x", "cpu:0")
    output = next(recorder.ids)
    assert recorder.step_record is not None
    recorder.step_record((step, output, recorder.clock(), threading.get_ident()))
    recorder.free_later(before)
    after = recorder.allocate(2, "pool", "y", "cpu:0")
    recorder.free_later(output)
    recorder.free(after)
    trace = recorder.end()
    assert [(e.action, e.pointer, e.size, e.label, e.device) for e in trace] == [
        ("allocate", 1, 1, "x", "cpu:0"),
        ("allocate", 2, 8, "jit(f)", "cpu:0"),
        ("allocate", 3, 8, "jit(f)", "cpu:1"),
        ("allocate", 4, 4, "jit(f) temp", "cpu:0"),
        ("free", 4, 4, "jit(f) temp", "cpu:0"),
        ("free", 1, 1, "x", "cpu:0"),
        ("allocate", 5, 2, "y", "cpu:0"),
        ("free", 2, 8, "jit(f)", "cpu:0"),
        ("free", 3, 8, "jit(f)", "cpu:1"),
        ("free", 5, 2, "y", "cpu:0"),
    ]
    assert recorder.steps_taken == {step: 1}
