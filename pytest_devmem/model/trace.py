"""Allocation traces: record what a workload asked of a pool, write it, read it, replay it into any pool.

The text form is RMM's memory-event log (`Thread,Time,Action,Pointer,Size,Stream`), so a trace
recorded here replays in RMM's REPLAY_BENCHMARK and an RMM log replays here. Actions are
`allocate`, `free` (RMM's older spelling; `deallocate` is read too) and `allocate failure`.
Two more columns, which RMM's reader does not look at, say who made each event: `Source` (the
allocator's owner, e.g. `jax`, `tensorflow`, `pool`) and `Label` (e.g. the executable's name).
A log with only RMM's six columns reads too.
"""

from __future__ import annotations

import csv
import io
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from ..errors import DevmemError, InvalidFreeError, OutOfMemoryError
from ..files import write_atomic
from .pool.base import Pool

RMM_HEADER = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
HEADER = (*RMM_HEADER, "Source", "Label")
ALLOCATE, FREE, ALLOCATE_FAILURE = "allocate", "free", "allocate failure"
_ACTIONS = {"allocate": ALLOCATE, "free": FREE, "deallocate": FREE, "allocate failure": ALLOCATE_FAILURE}


class TraceFormatError(DevmemError, ValueError):
    """A trace file that is not an RMM-style memory-event log; the message names file and line."""


@dataclass(frozen=True)
class TraceEvent:
    """One allocator call. `pointer` is the address the recording pool returned (0 for a failure),
    or any id that is unique among the buffers live at once. `source` says whose allocator made
    the call, `label` what for (both free text, for people and reports)."""

    action: str
    pointer: int
    size: int
    time: float = 0.0
    thread: int = 0
    stream: int = 0
    source: str = ""
    label: str = ""


@dataclass
class Trace:
    """An ordered list of allocator events, with the figures a replay needs."""

    events: list[TraceEvent] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(self.events)

    def peak_live_bytes(self) -> int:
        """Highest sum of requested bytes live at once: what any allocator must hold at least."""
        live: dict[int, int] = {}
        current = peak = 0
        for event in self.events:
            if event.action == ALLOCATE:
                live[event.pointer] = event.size
                current += event.size
                peak = max(peak, current)
            elif event.action == FREE:
                current -= live.pop(event.pointer, 0)
        return peak

    def write_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the trace atomically in RMM's log format."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(HEADER)
        for e in self.events:
            writer.writerow((e.thread, f"{e.time:.6f}", e.action, f"{e.pointer:#x}", e.size, f"{e.stream:#x}", e.source, e.label))
        write_atomic(path, out.getvalue())

    @classmethod
    def read_csv(cls, path: str | os.PathLike[str]) -> Trace:
        """Read an RMM-style log; TraceFormatError names the file and line of anything malformed."""
        events = []
        with open(path, newline="") as handle:
            rows = csv.reader(handle)
            header = next(rows, None)
            columns = tuple(column.strip() for column in header) if header is not None else ()
            if columns not in (HEADER, RMM_HEADER):
                raise TraceFormatError(f"{path}:1: not a memory-event log: expected the header {','.join(RMM_HEADER)} (optionally ,Source,Label), got {header}")
            for line, row in enumerate(rows, start=2):
                if not row:
                    continue
                events.append(_parse_row(path, line, row, len(columns)))
        return cls(events)


def _parse_row(path: object, line: int, row: list[str], width: int) -> TraceEvent:
    if len(row) != width:
        raise TraceFormatError(f"{path}:{line}: expected {width} columns, got {len(row)}: {row}")
    thread, stamp, action, pointer, size, stream = (cell.strip() for cell in row[:6])
    source, label = (row[6].strip(), row[7].strip()) if width == len(HEADER) else ("", "")
    if action not in _ACTIONS:
        raise TraceFormatError(f"{path}:{line}: unknown action {action!r}; allowed: {', '.join(_ACTIONS)}")
    try:
        return TraceEvent(
            action=_ACTIONS[action],
            pointer=int(pointer, 0),
            size=int(size),
            time=_parse_time(stamp),
            thread=int(thread),
            stream=int(stream, 0),
            source=source,
            label=label,
        )
    except ValueError as exc:
        raise TraceFormatError(f"{path}:{line}: {exc}: {row}") from None


def _parse_time(stamp: str) -> float:
    """Seconds, from either a float or RMM's older `HH:MM:SS:micro` clock format."""
    if stamp.count(":") == 3:
        hours, minutes, seconds, fraction = stamp.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + int(seconds) + float(f"0.{fraction}")
    return float(stamp)


class TracingPool:
    """Adaptor that records every alloc and free of the pool it wraps, as RMM's logging adaptor does.

    Everything else (stats, memory_map, policy, device...) is the wrapped pool's.
    """

    def __init__(self, pool: Pool, clock: Callable[[], float] = time.perf_counter) -> None:
        self.pool = pool
        self.trace = Trace()
        self._clock = clock

    def alloc(self, nbytes: int) -> int:
        try:
            pointer = self.pool.alloc(nbytes)
        except OutOfMemoryError:
            self.trace.events.append(TraceEvent(ALLOCATE_FAILURE, 0, int(nbytes), self._clock(), threading.get_ident()))
            raise
        self.trace.events.append(TraceEvent(ALLOCATE, pointer, int(nbytes), self._clock(), threading.get_ident()))
        return pointer

    def free(self, handle: int) -> None:
        size = self.pool.size_of(handle)  # type: ignore[attr-defined]
        self.pool.free(handle)
        self.trace.events.append(TraceEvent(FREE, handle, size, self._clock(), threading.get_ident()))

    def __getattr__(self, name: str):
        return getattr(self.pool, name)


@dataclass(frozen=True)
class ReplayResult:
    """How a replay went: whether every allocation fit, where the first one failed, and the pool's stats."""

    ok: bool
    events_replayed: int
    peak_live_bytes: int
    stats: dict[str, int | float]
    error: OutOfMemoryError | None = None
    failed_at: int | None = None


def replay(trace: Trace | Iterable[TraceEvent], pool: Pool, *, stop_on_oom: bool = True) -> ReplayResult:
    """Run a trace's allocations and frees against `pool`, mapping recorded pointers to new ones.

    Recorded failures are skipped (they held nothing). With `stop_on_oom` the replay ends at the first
    allocation the pool cannot serve; otherwise that buffer is dropped, its later free ignored, and
    the replay goes on. A free of a pointer the trace never allocated is an InvalidFreeError.
    """
    mapping: dict[int, int] = {}
    sizes: dict[int, int] = {}
    dropped: set[int] = set()
    live = peak = 0
    first_error: OutOfMemoryError | None = None
    failed_at: int | None = None
    index = -1
    alloc, free = pool.alloc, pool.free
    for index, event in enumerate(trace):
        action = event.action
        if action == ALLOCATE:
            try:
                mapping[event.pointer] = alloc(event.size)
            except OutOfMemoryError as exc:
                if first_error is None:
                    first_error, failed_at = exc, index
                if stop_on_oom:
                    break
                dropped.add(event.pointer)
                continue
            sizes[event.pointer] = event.size
            live += event.size
            if live > peak:
                peak = live
        elif action == FREE:
            handle = mapping.pop(event.pointer, None)
            if handle is None:
                if event.pointer in dropped:
                    dropped.discard(event.pointer)
                    continue
                raise InvalidFreeError(f"trace event {index}: free of {event.pointer:#x}, which the trace never allocated")
            free(handle)
            live -= sizes.pop(event.pointer)
    return ReplayResult(
        ok=first_error is None,
        events_replayed=failed_at if stop_on_oom and failed_at is not None else index + 1,
        peak_live_bytes=peak,
        stats=pool.stats(),
        error=first_error,
        failed_at=failed_at,
    )
