"""The per-test event sink every capture writes to."""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..model.trace import ALLOCATE_CODE, FREE_CODE, Trace

get_ident = threading.get_ident


class TraceRecorder:
    """Collects the allocation events of one test window, from any thread, in the order they happen.

    A capture calls `allocate` when its framework takes device memory and keeps the id it gets
    back; `free` with that id when the memory goes. Outside a window (or while paused, as during
    a module-scoped fixture's setup) nothing is recorded and `allocate` returns 0, so memory that
    existed before a test never enters its trace and its later free is ignored: a test's figures
    do not depend on which tests ran before it. `end()` numbers the buffers 1, 2, 3... in the order
    they were allocated and the threads 0, 1, 2... in the order they first allocated, so the same
    work gives the same trace in any process. Events go straight into a columnar Trace, numbered
    as they are written (the window's ids are consecutive): about a microsecond and 60 bytes each,
    nothing more held per event, and nothing to redo at the end.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.RLock()  # a weak-reference callback freeing a buffer may run inside allocate
        self._next_id = 1  # ids are unique over the process: a buffer of an earlier window never matches
        self._first_id = 1  # the first id of this window
        self._base = 0
        self._threads: dict[int, int] = {}  # thread ident -> its number in this window
        self._trace: Trace | None = None
        self._live: dict[
            int, tuple[int, tuple[str, str, str, int, int, int]]
        ] = {}  # id -> (bytes, its names), allocated in this window
        self._names: dict[
            tuple[str, str, str], tuple[str, str, str, int, int, int]
        ] = {}  # (source, label, device) and their codes in the trace
        self._columns: tuple[Callable[[Any], None], ...] = ()  # the appends of the window's columns that vary
        self._mark = 0  # ids above this were allocated after mark()
        self._paused = 0
        self._started = 0.0
        self._ended = 0.0
        self._pause_began = 0.0
        self._pauses: list[tuple[float, float]] = []  # (from, to) of each pause of this window, on its clock

    @property
    def recording(self) -> bool:
        return self._trace is not None and not self._paused

    @property
    def started_at(self) -> float:
        """The window's start on the recorder's clock: events' times count from it."""
        return self._started

    @property
    def ended_at(self) -> float:
        """When the last window closed, in seconds from its start."""
        return self._ended

    @property
    def paused_spans(self) -> list[tuple[float, float]]:
        """The (from, to) seconds of each pause of the current or last window: a capture that reads
        its framework's events after the fact leaves out what was allocated inside them."""
        with self._lock:
            return list(self._pauses)

    def now(self) -> float:
        """Seconds since the window opened, on the events' clock, paused or not."""
        return self._clock() - self._started

    def begin(self) -> None:
        """Open a window; events from before are forgotten."""
        with self._lock:
            trace = self._trace = Trace()
            self._columns = tuple(
                column.append
                for column in (
                    trace.actions,
                    trace.pointers,
                    trace.sizes,
                    trace.times,
                    trace.threads,
                    trace.sources,
                    trace.labels,
                    trace.devices,
                )
            )
            self._names = {}
            self._live = {}
            self._first_id = self._next_id
            self._base = self._first_id - 1  # the window's buffers are numbered 1, 2, 3...
            self._threads = {}
            self._mark = self._next_id - 1
            self._paused = 0
            self._pauses = []
            self._started = self._clock()

    def end(self) -> Trace:
        """Close the window and return its events, with buffers numbered in allocation order."""
        with self._lock:
            trace, self._trace = self._trace or Trace(), None
            self._live = {}
            self._ended = self._clock() - self._started
            if self._paused:  # closed inside a pause: it lasted to the end
                self._pauses.append((self._pause_began, self._ended))
        events = len(trace.actions)  # every stream and process is 0: written once, here
        trace.streams = array("Q", bytes(8 * events))
        trace.processes = array("I", bytes(4 * events))
        return trace

    def mark(self) -> None:
        """From now on allocations count as the test's own (its call, after its fixtures' setup)."""
        with self._lock:
            self._mark = self._next_id - 1

    def held_since_mark(self, source: str) -> dict[str, int]:
        """Bytes still live that `source` allocated after mark(), by label: what a test kept."""
        held: dict[str, int] = {}
        with self._lock:
            for buffer_id, (size, (owner, label, *_)) in self._live.items():
                if buffer_id > self._mark and owner == source:
                    held[label or owner] = held.get(label or owner, 0) + size
        return held

    def elapsed(self) -> float | None:
        """Seconds since the window opened, on the events' clock; None outside a window or while paused."""
        if self._trace is None or self._paused:
            return None
        return self._clock() - self._started

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside (a fixture shared with other tests is set up here, say)."""
        with self._lock:
            self._paused += 1
            if self._paused == 1:
                self._pause_began = self._clock() - self._started
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
                if self._paused == 0 and self._trace is not None:
                    self._pauses.append((self._pause_began, self._clock() - self._started))

    def allocate(self, size: int, source: str, label: str = "", device: str = "") -> int:
        """Record an allocation of `size` bytes by `source` on `device`; its id, or 0 when nothing is
        being recorded."""
        with self._lock:
            trace = self._trace
            if trace is None or self._paused or size <= 0:
                return 0
            buffer_id = self._next_id
            self._next_id = buffer_id + 1
            names = self._names.get((source, label, device))
            if names is None:
                names = self._names[(source, label, device)] = (
                    source,
                    label,
                    device,
                    trace.name_code(source),
                    trace.name_code(label),
                    trace.name_code(device),
                )
            self._live[buffer_id] = (size, names)
            thread = self._threads.get(get_ident())
            if thread is None:
                thread = self._thread_number()
            actions, pointers, sizes, times, threads, sources, labels, devices = self._columns
            actions(ALLOCATE_CODE)
            pointers(buffer_id - self._base)
            sizes(size)
            times(self._clock() - self._started)
            threads(thread)
            sources(names[3])
            labels(names[4])
            devices(names[5])
            return buffer_id

    def free(self, buffer_id: int) -> None:
        """Record that the buffer `allocate` numbered `buffer_id` was freed; ignored if it is not of this window."""
        if not buffer_id:
            return
        with self._lock:
            entry = self._live.pop(buffer_id, None)
            if entry is None or self._trace is None:
                return
            size, names = entry
            # the eight appends are written out here as in allocate, not shared: a call more per event
            # is a tenth of a microsecond on the path every JAX run takes
            thread = self._threads.get(get_ident())
            if thread is None:
                thread = self._thread_number()
            actions, pointers, sizes, times, threads, sources, labels, devices = self._columns
            actions(FREE_CODE)
            pointers(buffer_id - self._base)
            sizes(size)
            times(self._clock() - self._started)
            threads(thread)
            sources(names[3])
            labels(names[4])
            devices(names[5])

    def _thread_number(self) -> int:
        """A thread writing for the first time in this window gets the next number: 0, 1, 2..."""
        number = self._threads[get_ident()] = len(self._threads)
        return number
