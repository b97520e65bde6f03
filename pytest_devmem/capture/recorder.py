"""The per-test event sink every capture writes to."""

from __future__ import annotations

import gc
import itertools
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..model.executables import ARGUMENT_SUFFIX, TEMP_SUFFIX
from ..model.trace import ALLOCATE_CODE, FREE_CODE, Trace
from .fixture_notes import FixtureNotes

RUNS_OWN = (TEMP_SUFFIX, ARGUMENT_SUFFIX)
"""Labels of what a run frees as it ends (model/executables.py): no buffer a test let go of."""

get_ident = threading.get_ident

FLUSH_AT = 1 << 18
"""Compact records held before they are written into the columns (at the garbage collector's next
pass, or at the next step whose id is a multiple of FLUSH_CHECK): about 30 MB, so a long window's
memory stays the trace's own plus this."""
FLUSH_CHECK = 1 << 16
"""A capture recording steps calls `flush_if_long` when a step's id is a multiple of this: a loop
that makes no garbage (so no collector pass) still has its records written as they accumulate."""
FREE_MARK = -1
"""The first field of a free's compact record, where a step's has its (non-negative) step number."""

Names = tuple[str, str, str, int, int, int, int]
"""(source, label, device, and the codes in the window's trace of those and of the site)."""


class _ThreadNumbers(dict[int, int]):
    """Thread ident -> its number in a window: a thread writing for the first time gets the next
    number, 0, 1, 2... (looked up in C; only a new thread runs Python)."""

    def __missing__(self, ident: int) -> int:
        number = self[ident] = len(self)
        return number


class _NameCodes(dict[tuple[str, str, str, str], Names]):
    """(source, label, device, site) -> its Names in one window's trace, coded at first use."""

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self._code = trace.name_code

    def __missing__(self, key: tuple[str, str, str, str]) -> Names:
        source, label, device, site = key
        code = self._code
        names = self[key] = (source, label, device, code(source), code(label), code(device), code(site))
        return names


def _event_writer(trace: Trace) -> Callable[[int, int, int, float, int, Names], None]:
    """The one way an event enters a window's trace: its action, pointer, size, time, thread and
    names, appended to the columns that vary (streams and processes are written once, at the end).
    A call per event costs a tenth to a quarter of a microsecond more than the appends written out
    where each event is made (measured on allocate and free, and on the compact records' flush,
    which runs outside a step loop's time); written once, the columns cannot go out of step."""
    actions, pointers, sizes, times, threads = (
        trace.actions.append,
        trace.pointers.append,
        trace.sizes.append,
        trace.times.append,
        trace.threads.append,
    )
    sources, labels, devices, sites = (
        trace.sources.append,
        trace.labels.append,
        trace.devices.append,
        trace.sites.append,
    )

    def write(action: int, pointer: int, size: int, when: float, thread: int, names: Names) -> None:
        actions(action)
        pointers(pointer)
        sizes(size)
        times(when)
        threads(thread)
        sources(names[3])
        labels(names[4])
        devices(names[5])
        sites(names[6])

    return write


def _last_frees_in_allocation_order(trace: Trace) -> None:
    """The frees that close a window, with no allocation after them, in the order their buffers were
    allocated (their pointers', numbered so): Python lets go of what a test held as it finishes in an
    order that carries what ran before in the process (its collector's, its caches'), and a pool's
    state between two such frees (its fragmentation, sampled per event) would carry it too. Their
    times stay as they were; the pool's state after them is the same in any order. A run's own frees
    (its temp buffers and transfers, freed as it ends) keep their place before them."""
    actions, labels, names, end = trace.actions, trace.labels, trace.names, len(trace.actions)
    start = end
    while start > 0 and actions[start - 1] == FREE_CODE and not names[labels[start - 1]].endswith(RUNS_OWN):
        start -= 1
    if end - start < 2:
        return
    order = sorted(range(start, end), key=trace.pointers.__getitem__)
    if order == list(range(start, end)):
        return
    for name in ("pointers", "sizes", "threads", "sources", "labels", "devices", "sites"):
        column = getattr(trace, name)
        if len(column) == end:
            column[start:end] = type(column)(column.typecode, [column[index] for index in order])


class TraceRecorder:
    """Collects the allocation events of one test window, from any thread, in the order they happen.

    A capture calls `allocate` when its framework takes device memory and keeps the id it gets
    back; `free` with that id when the memory goes. Outside a window (or while paused, as during
    a module-scoped fixture's setup) nothing is recorded and `allocate` returns 0, so memory that
    existed before a test never enters its trace and its later free is ignored: a test's figures
    do not depend on which tests ran before it. `end()` numbers the buffers 1, 2, 3... in the order
    they were allocated and the threads 0, 1, 2... in the order they first allocated, so the same
    work gives the same trace in any process. Events go straight into a columnar Trace, numbered
    as they are written: about a microsecond and 60 bytes each, nothing more held per event.

    A run that repeats the same allocations (a jitted step: its outputs, its temps) is recorded
    compactly instead (`step`, `step_record`, `free_later`, `pending_extend`): four values per run
    or free, `(step, id, time, thread ident)` or `(FREE_MARK, id, time, thread ident)`, appended to
    one flat list (about 120 bytes a record, and no object the garbage collector tracks, so the loop
    that makes them triggers no collection), written in order into the columns when anything else
    is recorded directly, when the window's live buffers are asked for, when it closes, and once
    FLUSH_AT records are held (`flush_if_long`, `_after_collection`), so the loop pays a fraction
    of a microsecond per run and a window's memory stays bounded.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.RLock()  # a weak-reference callback freeing a buffer may run inside allocate
        self._ids = itertools.count(1)  # unique over the process: a buffer of an earlier window never matches
        self._pointer = 0  # the window's buffers are numbered 1, 2, 3... as they are written
        self._threads = _ThreadNumbers()
        self._trace: Trace | None = None
        # id -> (pointer, bytes, its names), or a tuple of those for a run's output over several
        # devices; allocated in this window
        self._live: dict[int, Any] = {}
        self._names = _NameCodes(Trace())
        self._write = _event_writer(Trace())  # each window's own, from begin()
        # compact records not yet in the columns, four values each, flat; one list for the recorder's
        # life, emptied when a window opens, so its `extend` may be bound once (`pending_extend`)
        self._pending: list[Any] = []
        self.pending_extend: Callable[[tuple[Any, ...]], None] = self._pending.extend
        self.step_record: Callable[[tuple[Any, ...]], None] | None = None  # while recording: `pending_extend`
        self._steps: list[tuple[tuple[tuple[int, str, str, str], ...], tuple[tuple[int, str, str, str], ...], str]] = []
        self._step_codes: dict[int, tuple[Any, Any]] = {}  # step -> its shards and temps with codes, this window
        self.steps_taken: dict[int, int] = {}  # step -> its runs recorded (written) since its user cleared it
        self._flushing = False  # a collection inside a flush must not start another
        self._mark = 0  # ids above this were allocated after mark()
        self._paused = 0
        self._started = 0.0
        self._ended = 0.0
        self._pause_began = 0.0
        self._pauses: list[tuple[float, float]] = []  # (from, to) of each pause of this window, on its clock
        self.fixtures = FixtureNotes(self.now)  # what shared fixtures allocated in the pauses they own

    @property
    def recording(self) -> bool:
        return self._trace is not None and not self._paused

    @property
    def window_open(self) -> bool:
        """A window is open, recording or paused."""
        return self._trace is not None

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

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    @property
    def ids(self) -> Iterator[int]:
        """The process's buffer ids (`next` is atomic): a step takes one for all its outputs' shards."""
        return self._ids

    def now(self) -> float:
        """Seconds since the window opened, on the events' clock, paused or not."""
        return self._clock() - self._started

    def step(
        self,
        outputs: tuple[tuple[int, str, str, str], ...],
        temps: tuple[tuple[int, str, str, str], ...] = (),
        site: str = "",
    ) -> int:
        """The number of a kind of run: its outputs' shards, then temps allocated and freed at once,
        each (bytes, source, label, device), all made at `site` (the user's line, "" where not
        known). A step's record is `(step, id, clock(), thread ident)`, added with `step_record`;
        the id stands for all its outputs' shards (`free_later(id)`)."""
        with self._lock:
            self._steps.append((tuple(outputs), tuple(temps), site))
            return len(self._steps) - 1

    def begin(self) -> None:
        """Open a window; events from before are forgotten."""
        with self._lock:
            trace = self._trace = Trace()
            self._write = _event_writer(trace)
            self._names = _NameCodes(trace)
            self._live = {}
            self._pointer = 0
            self._threads = _ThreadNumbers()
            self._pending.clear()  # frees recorded since the last window closed are of no window
            self._step_codes = {}
            self._mark = next(self._ids)
            self._paused = 0
            self._pauses = []
            self.fixtures.clear()
            self._started = self._clock()
            self.step_record = self.pending_extend
            if self._after_collection not in gc.callbacks:
                gc.callbacks.append(self._after_collection)

    def end(self) -> Trace:
        """Close the window and return its events, with buffers numbered in allocation order."""
        with self._lock:
            self.step_record = None
            if self._after_collection in gc.callbacks:
                gc.callbacks.remove(self._after_collection)
            self._flush()
            trace, self._trace = self._trace or Trace(), None
            self._live = {}
            self._pending.clear()
            self._ended = self._clock() - self._started
            if self._paused:  # closed inside a pause: it lasted to the end
                self._pauses.append((self._pause_began, self._ended))
            self.fixtures.end(self._ended)
        events = len(trace.actions)  # every stream and process is 0: written once, here
        trace.streams = array("Q", bytes(8 * events))
        trace.processes = array("I", bytes(4 * events))
        _last_frees_in_allocation_order(trace)
        return trace

    def mark(self) -> None:
        """From now on allocations count as the test's own (its call, after its fixtures' setup)."""
        with self._lock:
            self._mark = next(self._ids)

    def held_since_mark(self, source: str) -> dict[str, int]:
        """Bytes still live that `source` allocated after mark(), by label: what a test kept."""
        held: dict[str, int] = {}
        with self._lock:
            self._flush()
            for buffer_id, entry in self._live.items():
                if buffer_id <= self._mark:
                    continue
                for _, size, (owner, label, *_) in entry if type(entry[0]) is tuple else (entry,):
                    if owner == source:
                        held[label or owner] = held.get(label or owner, 0) + size
        return held

    @contextmanager
    def paused(self, owner: object = None) -> Iterator[None]:
        """Record nothing inside (a fixture shared with other tests is set up here, say). With an
        `owner` (that fixture), what the frameworks allocate inside is noted for it (`fixtures`):
        the allocators it started, and what it keeps, are there for every test that uses it."""
        with self._lock:
            self._paused += 1
            self.step_record = None
            owned = owner is not None and self._trace is not None
            now = self._clock() - self._started if self._paused == 1 or owned else 0.0
            if self._paused == 1:
                self._pause_began = now
            if owned:
                self.fixtures.open(owner, now)
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
                closes = self._paused == 0 and self._trace is not None
                now = self._clock() - self._started if closes or owned else 0.0
                if owned:
                    self.fixtures.close(owner, now)
                if closes:
                    self._pauses.append((self._pause_began, now))
                    self.step_record = self.pending_extend

    def allocate(self, size: int, source: str, label: str = "", device: str = "", site: str = "") -> int:
        """Record an allocation of `size` bytes by `source` on `device`, made at `site` (the user's
        line, "" where not known); its id, or 0 when nothing is being recorded."""
        with self._lock:
            trace = self._trace
            if trace is None or self._paused or size <= 0:
                return 0
            if self._pending:
                self._flush()
            buffer_id = next(self._ids)
            names = self._names[source, label, device, site]
            pointer = self._pointer = self._pointer + 1
            self._live[buffer_id] = (pointer, size, names)
            self._write(ALLOCATE_CODE, pointer, size, self._clock() - self._started, self._threads[get_ident()], names)
            return buffer_id

    def free(self, buffer_id: int) -> None:
        """Record that the buffer `allocate` numbered `buffer_id` was freed; ignored if it is not of this window."""
        if not buffer_id:
            return
        with self._lock:
            if self._pending:
                self._flush()
            entry = self._live.pop(buffer_id, None)
            if entry is None or self._trace is None:
                return
            when, thread, write = self._clock() - self._started, self._threads[get_ident()], self._write
            for pointer, size, names in entry if type(entry[0]) is tuple else (entry,):  # a tuple: a step's shards
                write(FREE_CODE, pointer, size, when, thread, names)

    def free_later(self, buffer_id: int) -> None:
        """`free`, recorded as one compact record (from a weak-reference callback, say): no lock,
        one `extend` of a tuple, which is atomic. A capture's hot path may add the same record,
        `(FREE_MARK, id, clock(), thread ident)`, with `pending_extend` itself, in or out of a window
        (records made between windows are dropped when the next one opens)."""
        if buffer_id and self._trace is not None:
            self._pending.extend((FREE_MARK, buffer_id, self._clock(), get_ident()))

    def flush_if_long(self) -> None:
        """Write the compact records into the columns where FLUSH_AT or more are held."""
        if len(self._pending) >= 4 * FLUSH_AT and not self._flushing:
            with self._lock:
                self._flush()

    def _codes_of(self, step: int) -> tuple[Any, Any]:
        """A step's output shards and temps with their names' codes in this window's trace."""
        outputs, temps, site = self._steps[step]
        names = self._names
        coded: tuple[Any, Any] = tuple(  # type: ignore[assignment]
            tuple((size, names[source, label, device, site]) for size, source, label, device in kind)
            for kind in (outputs, temps)
        )
        self._step_codes[step] = coded
        return coded

    def _after_collection(self, phase: str, info: dict[str, int]) -> None:
        """After a garbage-collector pass: write the compact records where many are held (never
        waiting for the lock: another thread writing will flush them itself)."""
        if phase != "stop" or len(self._pending) < 4 * FLUSH_AT or self._flushing:
            return
        if self._lock.acquire(blocking=False):
            try:
                self._flush()
            finally:
                self._lock.release()

    def _flush(self) -> None:
        """Write the compact records into the columns, in order (under the lock)."""
        if self._flushing:
            return
        self._flushing = True
        try:
            self._write_pending()
        finally:
            self._flushing = False

    def _write_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        if self._trace is None:
            pending.clear()  # frees after the window closed: of no window
            return
        records = pending[:]
        del pending[: len(records)]  # what a racing thread adds meanwhile stays for the next flush
        write, live, thread_of, step_codes, taken = (
            self._write,
            self._live,
            self._threads,
            self._step_codes,
            self.steps_taken,
        )
        started, pointer = self._started, self._pointer
        values = iter(records)
        for step, buffer_id, when, ident in zip(values, values, values, values):
            when -= started
            if step < 0:  # a free (FREE_MARK)
                entry = live.pop(buffer_id, None)
                if entry is None:
                    continue  # not this window's: no event, and no thread numbered for it
                thread = thread_of[ident]
                for part_pointer, size, names in entry if type(entry[0]) is tuple else (entry,):
                    write(FREE_CODE, part_pointer, size, when, thread, names)
                continue
            # a step: its outputs, then its temps for the run
            thread = thread_of[ident]
            taken[step] = taken.get(step, 0) + 1
            coded = step_codes.get(step)
            if coded is None:
                coded = self._codes_of(step)
            outputs, temps = coded
            parts = []
            for size, names in outputs:
                pointer += 1
                parts.append((pointer, size, names))
                write(ALLOCATE_CODE, pointer, size, when, thread, names)
            if parts:
                live[buffer_id] = parts[0] if len(parts) == 1 else tuple(parts)
            first_temp = pointer + 1
            for size, names in temps:
                pointer += 1
                write(ALLOCATE_CODE, pointer, size, when, thread, names)
            for offset, (size, names) in enumerate(temps):
                write(FREE_CODE, first_temp + offset, size, when, thread, names)
        self._pointer = pointer
