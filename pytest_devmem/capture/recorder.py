"""The per-test event sink every capture writes to."""

from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ..model.trace import ALLOCATE, FREE, TraceEvent


class TraceRecorder:
    """Collects the allocation events of one test window, from any thread, in the order they happen.

    A capture calls `allocate` when its framework takes device memory and keeps the id it gets
    back; `free` with that id when the memory goes. Outside a window (or while paused, as during
    a module-scoped fixture's setup) nothing is recorded and `allocate` returns 0, so memory that
    existed before a test never enters its trace and its later free is ignored: a test's figures
    do not depend on which tests ran before it. `end()` numbers the buffers 1, 2, 3... in the order
    they were allocated and the threads 0, 1, 2... in the order they first allocated, so the same
    work gives the same trace in any process.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._events: list[TraceEvent] | None = None
        self._live: dict[int, tuple[int, str, str]] = {}  # id -> (bytes, source, label), allocated in this window
        self._mark = 0  # ids above this were allocated after mark()
        self._paused = 0
        self._started = 0.0

    @property
    def recording(self) -> bool:
        return self._events is not None and not self._paused

    def begin(self) -> None:
        """Open a window; events from before are forgotten."""
        with self._lock:
            self._events = []
            self._live = {}
            self._mark = 0
            self._paused = 0
            self._started = self._clock()

    def end(self) -> list[TraceEvent]:
        """Close the window and return its events, with buffers numbered in allocation order."""
        with self._lock:
            events, self._events = self._events or [], None
            self._live = {}
        numbers: dict[int, int] = {}
        threads: dict[int, int] = {}
        renumbered = []
        for event in events:
            if event.action == ALLOCATE:
                numbers[event.pointer] = len(numbers) + 1
            thread = threads.setdefault(event.thread, len(threads))
            renumbered.append(TraceEvent(event.action, numbers[event.pointer], event.size, event.time, thread, event.stream, event.source, event.label))
        return renumbered

    def mark(self) -> None:
        """From now on allocations count as the test's own (its call, after its fixtures' setup)."""
        with self._lock:
            self._mark = next(self._ids)

    def held_since_mark(self, source: str) -> dict[str, int]:
        """Bytes still live that `source` allocated after mark(), by label: what a test kept."""
        held: dict[str, int] = {}
        with self._lock:
            for buffer_id, (size, owner, label) in self._live.items():
                if buffer_id > self._mark and owner == source:
                    held[label or owner] = held.get(label or owner, 0) + size
        return held

    def elapsed(self) -> float | None:
        """Seconds since the window opened, on the events' clock; None outside a window or while paused."""
        if self._events is None or self._paused:
            return None
        return self._clock() - self._started

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside (a fixture shared with other tests is set up here, say)."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1

    def allocate(self, size: int, source: str, label: str = "") -> int:
        """Record an allocation of `size` bytes; its id, or 0 when nothing is being recorded."""
        with self._lock:
            if self._events is None or self._paused or size <= 0:
                return 0
            buffer_id = next(self._ids)
            self._live[buffer_id] = (int(size), source, label)
            self._events.append(TraceEvent(ALLOCATE, buffer_id, int(size), self._clock() - self._started, threading.get_ident(), 0, source, label))
            return buffer_id

    def free(self, buffer_id: int, size: int, source: str, label: str = "") -> None:
        """Record that the buffer `allocate` numbered `buffer_id` was freed; ignored if it is not of this window."""
        if not buffer_id:
            return
        with self._lock:
            if self._events is None or buffer_id not in self._live:
                return
            del self._live[buffer_id]
            self._events.append(TraceEvent(FREE, buffer_id, int(size), self._clock() - self._started, threading.get_ident(), 0, source, label))
