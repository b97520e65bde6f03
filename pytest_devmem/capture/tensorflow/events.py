"""TensorFlow's allocator events turned into one test window's trace events.

Sizes are the bytes requested (the model of the machine rounds them as the allocator would). A
deallocation frees the latest live allocation at its allocator and address; one without any (the
buffer was allocated before the window, or while it was paused) is left out, and so is everything
allocated while the window was paused. The profiler runs from the window's opening until after it
closes, when only the plugin runs, so an event the clocks place outside the window is kept at its
edge. Devices come from allocator names:
`GPU_<k>_bfc` (TensorFlow's GPU allocator, tensorflow/core/common_runtime/gpu/gpu_device.cc) is
`gpu:<k>`; on a machine where TensorFlow has no GPU its CPU allocator is `cpu:0`; where it has one,
its host allocators (pinned staging memory, `gpu_host_bfc`, and the CPU's) are not device memory
and are left out. So is what a tf.function's first call makes outside its run (`xspace.FIRST_CALL`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ...model.trace import ALLOCATE_CODE, FREE_CODE, Trace
from .xspace import AllocatorEvent

SOURCE = "tensorflow"
NO_OP = "(no op)"
_GPU_ALLOCATOR = re.compile(r"^(?:GPU_(\d+)_bfc|gpu_async_(\d+))$")
ONEDNN_CPU = "mklcpu"  # oneDNN's CPU allocator: traces only its large allocations


def allocator_device(allocator: str, tensorflow_has_gpu: bool) -> str | None:
    """The device an allocator's memory is on, or None for host memory beside a GPU."""
    match = _GPU_ALLOCATOR.match(allocator)
    if match:
        return f"gpu:{match.group(1) or match.group(2)}"
    return None if tensorflow_has_gpu else "cpu:0"


def label(event: AllocatorEvent) -> str:
    """What made an allocation: its op, and the function it ran in where known."""
    if event.op:
        return f"{event.op} in {event.function}" if event.function else event.op
    return event.function or NO_OP


@dataclass(frozen=True)
class WindowClock:
    """TensorFlow's clock (the wall clock, in ns) onto the window's (seconds from its start), from
    one reading of each taken together."""

    wall_ns: int
    window_s: float

    def seconds(self, time_ns: int) -> float:
        return self.window_s + (time_ns - self.wall_ns) / 1e9

    @classmethod
    def read(
        cls, window_now: Callable[[], float], wall_ns: Callable[[], int] = time.time_ns, tries: int = 5
    ) -> WindowClock:
        """The wall clock read between two readings of the window's; of a few tries, the one whose
        two readings are closest, paired with their midpoint. A single pair read one after the other
        is off by however long the thread was held between them (another thread took the
        interpreter, the machine was busy), and every event of the window with it."""
        best: tuple[float, int, float] | None = None
        for _ in range(tries):
            before = window_now()
            wall = wall_ns()
            after = window_now()
            if best is None or after - before < best[2] - best[0]:
                best = (before, wall, after)
        assert best is not None
        return cls(best[1], (best[0] + best[2]) / 2)


@dataclass
class Converted:
    """One window's trace events and what was left out of them."""

    events: Trace = field(default_factory=Trace)
    host_allocators: set[str] = field(default_factory=set)  # left out: host memory beside a GPU
    allocators: set[str] = field(default_factory=set)  # every allocator that allocated in the window
    origins: list[AllocatorEvent] = field(default_factory=list)  # the allocator event behind each trace event
    # (time, device, bytes, kept: not freed inside a pause) of each allocation made while the window
    # was paused (a shared fixture's: what it keeps, whatever the test does with it later)
    paused: list[tuple[float, str, int, bool]] = field(default_factory=list)
    first_calls_kept: int = 0  # chunk bytes of a tf.function's first call not freed in the window


def _paused(time: float, spans: Sequence[tuple[float, float]]) -> bool:
    return any(start <= time <= end for start, end in spans)


def trace_events(
    events: Iterable[AllocatorEvent],
    clock: WindowClock,
    *,
    end: float,
    tensorflow_has_gpu: bool,
    paused: Sequence[tuple[float, float]] = (),
    site_of: Callable[[str, str], str] = lambda function, op: "",
) -> Converted:
    """The window's allocations and frees in time order (at equal times, frees first: an address
    freed and taken again in the same nanosecond was freed first), numbered 1, 2, 3...; each made at
    `site_of(runtime function, op)`, the op's Python line ("" where not known)."""
    converted = Converted()
    live: dict[tuple[str, int], list[int]] = {}  # (allocator, address) -> ids, latest last; 0: not the window's
    allocations: dict[int, tuple[int, str, str, str]] = {}  # id -> (bytes, label, device, site)
    threads: dict[int, int] = {}
    first_calls: dict[tuple[str, int], int] = {}  # (allocator, address) -> chunk bytes of first-call allocations live
    ordered = sorted(events, key=lambda event: (event.time_ns, event.allocate))
    for event in ordered:
        # the profiler runs from the window's start until after its end, when only the plugin runs: an
        # event placed outside the window is the clocks' disagreement, and is kept at its edge
        time = min(max(0.0, clock.seconds(event.time_ns)), end)
        key = (event.allocator, event.address)
        if event.allocate:
            device = allocator_device(event.allocator, tensorflow_has_gpu)
            if device is None:
                converted.host_allocators.add(event.allocator)
                continue
            if event.first_call:  # a tf.function's first call in the process, outside its run (xspace.FIRST_CALL)
                live.setdefault(key, []).append(0)
                first_calls[key] = event.chunk_bytes
                continue
            was_paused = _paused(time, paused)
            if was_paused and event.requested_bytes > 0:  # numbered -1, -2...: its free marks it
                converted.paused.append((time, device, event.requested_bytes, True))
                live.setdefault(key, []).append(-len(converted.paused))
                continue
            in_window = not was_paused and event.requested_bytes > 0
            buffer_id = len(allocations) + 1 if in_window else 0
            live.setdefault(key, []).append(buffer_id)
            if not buffer_id:
                continue
            converted.allocators.add(event.allocator)
            name = label(event)
            site = site_of(event.runtime_function, event.op) if event.runtime_function else ""
            allocations[buffer_id] = (event.requested_bytes, name, device, site)
            thread = threads.setdefault(event.thread, len(threads))
            converted.events.add(
                ALLOCATE_CODE, buffer_id, event.requested_bytes, time, thread, 0, SOURCE, name, device, 0, site
            )
            converted.origins.append(event)
            continue
        stack = live.get(key)
        if not stack:
            continue  # allocated before the window (or by a host allocator): not the window's
        buffer_id = stack.pop()
        first_calls.pop(key, None)
        if buffer_id < 0:  # a paused allocation's free: not kept where freed inside a pause (its fixture's)
            if _paused(time, paused):
                converted.paused[-buffer_id - 1] = (*converted.paused[-buffer_id - 1][:3], False)
            continue
        if not buffer_id:
            continue
        size, name, device, site = allocations[buffer_id]
        thread = threads.setdefault(event.thread, len(threads))
        converted.events.add(FREE_CODE, buffer_id, size, time, thread, 0, SOURCE, name, device, 0, site)
        converted.origins.append(event)
    converted.first_calls_kept = sum(first_calls.values())
    return converted
