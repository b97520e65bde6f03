"""Device-allocation traces: the events a test made, stored by column, and their text form.

An event is one allocator call: which buffer, how many bytes, when, made by which allocator
(`source`: `jax`, `tensorflow`, `pool`) on which device (`cpu:0`, `gpu:1`; empty for the session's
first device) in which process. A trace keeps its events in columns of machine integers rather than
as objects (about 60 bytes an event), so a test of a million events stays small in memory, and the
model of the machine replays the columns without building an object per event.

The text form is RMM's memory-event log (`Thread,Time,Action,Pointer,Size,Stream`), so a trace
recorded here replays in RMM's REPLAY_BENCHMARK and an RMM log replays here. Actions are
`allocate`, `free` (RMM's older spelling; `deallocate` is read too) and `allocate failure`. Four
more columns, which RMM's reader does not look at, say who made each event and where: `Source`,
`Label` (e.g. the executable's name), `Device` and `Process`; a fifth, `Site`, the user's line that
made the buffer (`file:line`), is written where any event has one. Logs with RMM's six columns, with
the first eight of ours (pytest-devmem before per-device traces), or with ten (before sites), read too. The columnar form, an
Arrow IPC file of the same columns (`write_arrow`, trace_ipc.py), reads some ten times faster;
`read` and `read_csv` take either form, told apart by the file's first bytes. No pytest, no frameworks.
"""

from __future__ import annotations

import csv
import io
import os
import re
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, overload

from ..errors import FileFormatError
from ..files import MAX_TRACE_BYTES, open_regular, write_atomic
from ..spreadsheet import csv_cell, csv_text

RMM_HEADER = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
SOURCE_HEADER = (*RMM_HEADER, "Source", "Label")
HEADER = (*SOURCE_HEADER, "Device", "Process")
SITE_HEADER = (*HEADER, "Site")
"""HEADER and the user's line that made each event's buffer: written where any event has one."""
HEADERS = (SITE_HEADER, HEADER, SOURCE_HEADER, RMM_HEADER)
"""The headers a trace file may have."""
ALLOCATE, FREE, ALLOCATE_FAILURE = "allocate", "free", "allocate failure"
ACTIONS = (ALLOCATE, FREE, ALLOCATE_FAILURE)
"""An event's action is stored as its index here: 0 allocate, 1 free, 2 allocate failure."""
ALLOCATE_CODE, FREE_CODE, FAILURE_CODE = 0, 1, 2
TRACE_SUFFIXES = (".csv", ".arrow", ".feather")
"""The names a trace file ends with: its CSV, or its Arrow IPC file (trace_ipc.py; Feather v2 is one)."""
BY_COLUMN_FROM = 20_000
"""Traces of this many events or more compute their figures by column (numpy), where it is installed."""
_READ_ACTIONS = {"allocate": ALLOCATE, "free": FREE, "deallocate": FREE, "allocate failure": ALLOCATE_FAILURE}
_LARGEST = 2**64


class TraceFormatError(FileFormatError):
    """A trace file that is not an RMM-style memory-event log; the message names file and line."""


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One allocator call. `pointer` is the address the recording pool returned (0 for a failure),
    or any id that is unique among the buffers live at once. `source` says whose allocator made
    the call and `label` what for (free text, for people and reports); `device` where (`cpu:0`,
    `gpu:1`; empty: the first device), `process` in which process (several simulated together);
    `site` the user's line that made the buffer (`file:line`; empty where not known)."""

    action: str
    pointer: int
    size: int
    time: float = 0.0
    thread: int = 0
    stream: int = 0
    source: str = ""
    label: str = ""
    device: str = ""
    process: int = 0
    site: str = ""


class Trace:
    """An ordered list of allocator events, stored by column.

    Build one from TraceEvents (`Trace([...])`, `append`) or column values (`add`); read it back as
    TraceEvents (iteration, indexing, `events`) or, where speed matters, through the columns:
    `actions` (codes into ACTIONS), `pointers`, `sizes`, `times`, `threads`, `streams`, and
    `sources`, `labels`, `devices`, `sites` (indexes into `names`), `processes`.
    """

    __slots__ = (
        "actions",
        "pointers",
        "sizes",
        "times",
        "threads",
        "streams",
        "sources",
        "labels",
        "devices",
        "processes",
        "sites",
        "names",
        "_name_index",
    )

    def __init__(self, events: Iterable[TraceEvent] = ()) -> None:
        self.actions = bytearray()
        self.pointers = array("Q")
        self.sizes = array("q")
        self.times = array("d")
        self.threads = array("Q")
        self.streams = array("Q")
        self.sources = array("I")
        self.labels = array("I")
        self.devices = array("I")
        self.processes = array("I")
        self.sites = array("I")
        self.names: list[str] = [""]
        self._name_index: dict[str, int] = {"": 0}
        for event in events:
            self.append(event)

    # -- building ---------------------------------------------------------------------------

    def name_code(self, text: str) -> int:
        """The index of `text` in `names`, added if new (sources, labels, devices and sites share it)."""
        code = self._name_index.get(text)
        if code is None:
            code = self._name_index[text] = len(self.names)
            self.names.append(text)
        return code

    def add(
        self,
        action: int,
        pointer: int,
        size: int,
        time: float = 0.0,
        thread: int = 0,
        stream: int = 0,
        source: str = "",
        label: str = "",
        device: str = "",
        process: int = 0,
        site: str = "",
    ) -> None:
        """Append one event given by its column values (`action` a code: ALLOCATE_CODE, ...)."""
        self.actions.append(action)
        self.pointers.append(pointer)
        self.sizes.append(size)
        self.times.append(time)
        self.threads.append(thread)
        self.streams.append(stream)
        code = self.name_code
        self.sources.append(code(source))
        self.labels.append(code(label))
        self.devices.append(code(device))
        self.processes.append(process)
        self.sites.append(code(site))

    def append(self, event: TraceEvent) -> None:
        self.add(
            ACTIONS.index(event.action),
            event.pointer,
            event.size,
            event.time,
            event.thread,
            event.stream,
            event.source,
            event.label,
            event.device,
            event.process,
            event.site,
        )

    # -- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.actions)

    def event(self, index: int) -> TraceEvent:
        names = self.names
        return TraceEvent(
            ACTIONS[self.actions[index]],
            self.pointers[index],
            self.sizes[index],
            self.times[index],
            self.threads[index],
            self.streams[index],
            names[self.sources[index]],
            names[self.labels[index]],
            names[self.devices[index]],
            self.processes[index],
            names[self.sites[index]],
        )

    def __iter__(self) -> Iterator[TraceEvent]:
        return (self.event(index) for index in range(len(self.actions)))

    @overload
    def __getitem__(self, index: int) -> TraceEvent: ...

    @overload
    def __getitem__(self, index: slice) -> Trace: ...

    def __getitem__(self, index: int | slice) -> TraceEvent | Trace:
        if isinstance(index, slice):
            return Trace(self.event(i) for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("trace event index out of range")
        return self.event(index)

    @property
    def events(self) -> list[TraceEvent]:
        """Every event as a TraceEvent (built on each call: iterate or use the columns on large traces)."""
        return list(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trace) and self.events == other.events

    def __repr__(self) -> str:
        return f"Trace({len(self)} events)"

    def device_names(self) -> list[str]:
        """The devices the events name, in the order they first appear."""
        if len(self.devices) >= BY_COLUMN_FROM:
            try:
                from .trace_numpy import first_appearances
            except ImportError:
                pass
            else:
                found = first_appearances(self.devices)
                if found is not None:
                    return [self.names[code] for code in found]
        seen = dict.fromkeys(self.devices)
        return [self.names[code] for code in seen]

    def peak_live_bytes(self) -> int:
        """Highest sum of requested bytes live at once: what any allocator must hold at least.
        By column with numpy where it is installed, for long traces (a million events in some 0.03 s
        rather than 0.1 s)."""
        if len(self.actions) < BY_COLUMN_FROM:
            return self._peak_live_bytes_by_event()
        try:
            from .trace_numpy import peak_live_bytes
        except ImportError:
            return self._peak_live_bytes_by_event()
        peak = peak_live_bytes(self.actions, self.pointers, self.sizes)
        return self._peak_live_bytes_by_event() if peak is None else peak

    def _peak_live_bytes_by_event(self) -> int:
        live: dict[int, int] = {}
        current = peak = 0
        for action, pointer, size in zip(self.actions, self.pointers, self.sizes):
            if action == ALLOCATE_CODE:
                live[pointer] = size
                current += size
                if current > peak:
                    peak = current
            elif action == FREE_CODE:
                current -= live.pop(pointer, 0)
        return peak

    # -- plain data (between processes) -----------------------------------------------------

    def to_columns(self) -> dict[str, list[object]]:
        """The columns as plain lists (JSON, or what pytest-xdist sends from a worker)."""
        return {
            "actions": list(self.actions),
            "pointers": list(self.pointers),
            "sizes": list(self.sizes),
            "times": list(self.times),
            "threads": list(self.threads),
            "streams": list(self.streams),
            "sources": list(self.sources),
            "labels": list(self.labels),
            "devices": list(self.devices),
            "processes": list(self.processes),
            "sites": list(self.sites),
            "names": list(self.names),
        }

    @classmethod
    def from_columns(cls, data: object) -> Trace:
        """The trace `to_columns` gave; TraceFormatError for anything else (columns of unequal
        length, a name index out of range, an action that is none of ACTIONS)."""
        if not isinstance(data, dict):
            raise TraceFormatError(f"trace columns must be an object, not {type(data).__name__}")
        names = data.get("names")
        if (
            not isinstance(names, list)
            or not names
            or names[0] != ""
            or not all(isinstance(name, str) for name in names)
        ):
            raise TraceFormatError('trace columns need "names": a list of text starting with ""')
        trace = cls()
        try:
            trace.actions = bytearray(data["actions"])
            trace.pointers = array("Q", data["pointers"])
            trace.sizes = array("q", data["sizes"])
            trace.times = array("d", data["times"])
            trace.threads = array("Q", data["threads"])
            trace.streams = array("Q", data["streams"])
            trace.sources = array("I", data["sources"])
            trace.labels = array("I", data["labels"])
            trace.devices = array("I", data["devices"])
            trace.processes = array("I", data["processes"])
            trace.sites = array("I", data.get("sites") or bytes(4 * len(trace.actions)))  # none: before sites
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise TraceFormatError(f"trace columns: {exc}") from None
        columns = (
            trace.pointers,
            trace.sizes,
            trace.times,
            trace.threads,
            trace.streams,
            trace.sources,
            trace.labels,
            trace.devices,
            trace.processes,
            trace.sites,
        )
        if any(len(column) != len(trace.actions) for column in columns):
            raise TraceFormatError("trace columns of unequal length")
        if any(action >= len(ACTIONS) for action in trace.actions) or any(
            code >= len(names) for column in (*columns[5:8], trace.sites) for code in column
        ):
            raise TraceFormatError("trace columns: an action or name index out of range")
        if any(size < 0 for size in trace.sizes):
            raise TraceFormatError("trace columns: a negative size")
        trace.names = list(names)
        trace._name_index = {name: index for index, name in enumerate(names)}
        return trace

    # -- text form --------------------------------------------------------------------------

    def write_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the trace atomically in RMM's log format (with Source, Label, Device, Process)."""
        write_atomic(path, self.csv_text())

    def csv_text(self) -> str:
        """The trace's CSV, as `write_csv` writes it: csv.writer's cells (a CR in a text quoted),
        made column by column, each distinct text quoted once (some three times faster than a
        writer row by row). The Site column where any event has one (SITE_HEADER)."""
        texts = [_csv_field(csv_cell(name)) for name in self.names]  # type: ignore[arg-type]  # str in, str out
        devices = [_csv_field(name) for name in self.names]
        columns = [
            map(str, self.threads),
            map("{:.6f}".format, self.times),
            map(ACTIONS.__getitem__, self.actions),
            map("{:#x}".format, self.pointers),
            map(str, self.sizes),
            map("{:#x}".format, self.streams),
            map(texts.__getitem__, self.sources),
            map(texts.__getitem__, self.labels),
            map(devices.__getitem__, self.devices),
            map(str, self.processes),
        ]
        header: tuple[str, ...] = HEADER
        if self.has_sites():
            header = SITE_HEADER
            columns.append(map(texts.__getitem__, self.sites))
        rows = map(",".join, zip(*columns))
        return ",".join(header) + "\n" + "".join(row + "\n" for row in rows)

    def has_sites(self) -> bool:
        """Whether any event names the line that made its buffer (its files then carry the Site column)."""
        return self.sites.count(0) != len(self.sites)  # counted in C: a million events in about a millisecond

    def write_arrow(self, path: str | os.PathLike[str]) -> None:
        """Write the trace atomically as an Arrow IPC (Feather v2) file: its columns as they are,
        read back some ten times faster than the CSV (trace_ipc.py; needs pyarrow and numpy)."""
        from .trace_ipc import write_arrow

        write_arrow(self, path)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a trace in either form, told apart by its first bytes: an Arrow IPC file
        (`write_arrow`) or an RMM-style CSV (`write_csv`). TraceFormatError names the file and what
        is wrong, and refuses what is not a regular file or is larger than MAX_TRACE_BYTES."""
        return cls.read_csv(path)

    def check_pairs(self, path: str | os.PathLike[str]) -> None:
        """TraceFormatError naming the file `path` (this trace, as read from it) and the line (the
        row, in an Arrow IPC file) of the first event whose allocation or free does not pair
        (`pairing_problem`): what the replay of a trace file is given must pair."""
        problem = self.pairing_problem()
        if problem is None:
            return
        index, other, text = problem
        unit, where = _event_places(path, [index] if other is None else [index, other])
        if other is not None:
            text = text.replace("{other}", f"{unit} {where[other]}")
        shown = f"{os.fspath(path)}:{where[index]}" if unit == "line" else f"{os.fspath(path)}: {unit} {where[index]}"
        raise TraceFormatError(f"{shown}: {text}")

    def pairing_problem(self) -> tuple[int, int | None, str] | None:
        """The first event whose allocation or free does not pair, as each allocator (device,
        process, source) sees its pointers: (its index, the index of the allocation it meets or
        None, what is wrong, with `{other}` where that allocation's place goes). A pointer allocated
        while its allocator holds it live would be two buffers at one address; a free of a pointer not
        live frees nothing; a free gives back the size its allocation took (RMM's log and the
        captures write it so). None where every event pairs. By column with numpy on long traces."""
        indices: range | list[int] = range(len(self.actions))
        if len(self.actions) >= BY_COLUMN_FROM:
            try:
                from .trace_numpy import first_unpaired
            except ImportError:
                first_unpaired = None  # type: ignore[assignment]
            if first_unpaired is not None:
                first = first_unpaired(
                    self.actions, self.pointers, self.sizes, self.devices, self.processes, self.sources
                )
                if first is None:
                    return None
                lane = (self.devices[first], self.processes[first], self.sources[first], self.pointers[first])
                indices = [
                    i
                    for i in range(first + 1)
                    if (self.devices[i], self.processes[i], self.sources[i], self.pointers[i]) == lane
                ]
        live: dict[tuple[int, int, int, int], int] = {}
        for index in indices:
            action = self.actions[index]
            if action > FREE_CODE:
                continue
            pointer = self.pointers[index]
            key = (self.devices[index], self.processes[index], self.sources[index], pointer)
            device = self.names[self.devices[index]] or "the first device"
            held = live.pop(key, None)
            if action == ALLOCATE_CODE:
                if held is not None:
                    return (
                        index,
                        held,
                        f"Pointer {pointer:#x} allocated again on {device} while its allocation at {{other}} is live: "
                        "two buffers at one address (a free missing between them?)",
                    )
                live[key] = index
            elif held is None:
                return (
                    index,
                    None,
                    f"free of {pointer:#x}, which the trace never allocated on {device} (or freed already)",
                )
            elif self.sizes[held] != self.sizes[index]:
                return (
                    index,
                    held,
                    f"free of {pointer:#x} with Size {self.sizes[index]}, where its allocation at {{other}} has Size "
                    f"{self.sizes[held]}: a free gives back what its allocation took",
                )
        return None

    @classmethod
    def read_csv(cls, path: str | os.PathLike[str]) -> Trace:
        """Read an RMM-style log; TraceFormatError names the file and line of anything malformed,
        and refuses what is not a regular file (a FIFO or a device would hang the read) or is
        larger than MAX_TRACE_BYTES. An Arrow IPC trace file (trace_ipc.py), known by its first
        bytes, is read as one."""
        try:
            binary = open_regular(path, "trace (an RMM-style CSV file or an Arrow IPC trace file)", MAX_TRACE_BYTES)
        except FileFormatError as exc:
            raise TraceFormatError(str(exc)) from None
        try:
            start = binary.read(8)
            binary.seek(0)
        except OSError as exc:
            binary.close()
            raise TraceFormatError(f"{os.fspath(path)}: cannot read the trace: {exc.strerror or exc}") from None
        from .trace_ipc import is_arrow, is_arrow_stream, read_arrow

        if is_arrow(start) or is_arrow_stream(start):
            with binary:
                return read_arrow(cls, binary, os.fspath(path))
        by_column = _read_by_column(cls, binary)
        if by_column is not None:
            binary.close()
            return by_column
        trace = cls()
        line = 1
        try:
            with io.TextIOWrapper(binary, encoding="utf-8", newline="") as handle:
                rows = csv.reader(handle)
                header = next(rows, None)
                columns = tuple(column.strip() for column in header) if header is not None else ()
                if columns not in HEADERS:
                    shown = ",".join(header)[:200] if header else "nothing"
                    raise TraceFormatError(
                        f"{os.fspath(path)}:1: not a memory-event log: expected the header {','.join(RMM_HEADER)} (optionally ,Source,Label,Device,Process[,Site]), got {shown!r}"
                    )
                for line, row in enumerate(rows, start=2):
                    if row:
                        _add_row(trace, path, line, row, len(columns))
        except OSError as exc:
            raise TraceFormatError(f"{os.fspath(path)}: cannot read the trace: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise TraceFormatError(
                f"{os.fspath(path)}:{_first_line_not_utf8(path)}: not UTF-8 text: not a trace"
            ) from None
        except csv.Error as exc:
            raise TraceFormatError(f"{os.fspath(path)}:{line + 1}: not CSV: {exc}") from None
        return trace


def _event_places(path: str | os.PathLike[str], indices: list[int]) -> tuple[str, dict[int, int]]:
    """Where events (by index) are in a trace file, for an error: ("line", each one's line) in a CSV
    (its rows after the header, empty ones skipped, as the reader counts them), ("row", each one's
    row) in an Arrow IPC file, or ("event", its number) where the file cannot say."""
    from .trace_ipc import is_arrow, is_arrow_stream

    try:
        with open_regular(path, "trace", MAX_TRACE_BYTES) as binary:
            first = binary.read(8)
            if is_arrow(first) or is_arrow_stream(first):
                return "row", {index: index + 1 for index in indices}
            binary.seek(0)
            wanted, found = set(indices), dict[int, int]()
            with io.TextIOWrapper(binary, encoding="utf-8", newline="") as handle:
                rows = csv.reader(handle)
                next(rows, None)
                line, event = rows.line_num, 0
                for row in rows:
                    start, line = line + 1, rows.line_num
                    if not row:
                        continue
                    if event in wanted:
                        found[event] = start
                        if len(found) == len(wanted):
                            break
                    event += 1
    except (FileFormatError, OSError, UnicodeDecodeError, csv.Error):
        found = {}
    if len(found) < len(indices):
        return "event", {index: index + 1 for index in indices}
    return "line", found


def _read_by_column(cls: type[Trace], binary: BinaryIO) -> Trace | None:
    """The trace pyarrow's CSV reader makes of `binary` (see trace_arrow.py); None where pyarrow
    is missing or anything is not as that reader expects: the caller reads the rows, which names
    the line of a bad value. `binary` is left at its start."""
    from . import trace_arrow

    if not trace_arrow.available():
        return None
    try:
        header = tuple(binary.readline(4096).decode("utf-8", "replace").rstrip("\r\n").split(","))
        binary.seek(0)
        if header not in HEADERS:
            return None
        trace = cls()
        fitted = trace_arrow.read_columns(binary, header, trace, _READ_ACTIONS, ACTIONS)
        binary.seek(0)
    except OSError:
        binary.seek(0)
        return None
    return trace if fitted else None


def _csv_field(text: str) -> str:
    """`text` as csv.writer writes it in a row (quoted where it holds a comma, a quote or a line
    break, a CR included, as CsvWriter quotes one)."""
    if not any(character in text for character in ',"\r\n'):
        return text
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow([text, ""])
    return out.getvalue()[: -len(",\r\n")]


def _first_line_not_utf8(path: str | os.PathLike[str]) -> int | str:
    """The number of the first line of `path` that is not UTF-8 (the decoder reads ahead in chunks,
    so its error alone does not say which line)."""
    try:
        with open_regular(path, "trace", MAX_TRACE_BYTES) as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    return number
    except (FileFormatError, OSError):
        pass
    return "?"


_DEVICE_NAME = re.compile(r"[a-z][a-z0-9_]{0,15}:(0|[1-9][0-9]{0,5})")
"""A device as the captures name it: JAX's platform and id (`cpu:2`, `gpu:0`), TensorFlow's alike."""


def _add_row(trace: Trace, path: object, line: int, row: list[str], width: int) -> None:
    where = f"{os.fspath(path)}:{line}"  # type: ignore[call-overload]
    if len(row) != width:
        raise TraceFormatError(f"{where}: expected {width} columns, got {len(row)}")
    thread, stamp, action, pointer, size, stream = (cell.strip() for cell in row[:6])
    source, label = (
        (csv_text(row[6].strip()), csv_text(row[7].strip())) if width >= len(SOURCE_HEADER) else ("", "")
    )  # as written, before csv_cell
    device, process = (row[8].strip(), row[9].strip()) if width >= len(HEADER) else ("", "0")
    site = csv_text(row[10].strip()) if width == len(SITE_HEADER) else ""
    if action not in _READ_ACTIONS:
        raise TraceFormatError(f"{where}: unknown action {action[:40]!r}; allowed: {', '.join(_READ_ACTIONS)}")
    if device and not _DEVICE_NAME.fullmatch(device):
        raise TraceFormatError(
            f"{where}: Device {device[:40]!r} is not a device: write PLATFORM:N in lower case (cpu:0, gpu:1), or leave it empty for the first device"
        )
    try:
        values = (int(pointer, 0), int(size), int(thread), int(stream, 0), int(process or "0"))
    except ValueError:  # rare: find the column to name, off the path every row takes
        for name, text, base in (
            ("Pointer", pointer, 0),
            ("Size", size, 10),
            ("Thread", thread, 10),
            ("Stream", stream, 0),
            ("Process", process or "0", 10),
        ):
            try:
                int(text, base)
            except ValueError:
                raise TraceFormatError(f"{where}: {name} {text[:40]!r} is not a whole number") from None
        raise AssertionError("unreachable: one of the columns above failed") from None
    try:
        time = _parse_time(stamp)
    except ValueError as exc:
        raise TraceFormatError(f"{where}: {str(exc)[:200]}") from None
    pointer_value, size_value, thread_value, stream_value, process_value = values
    if (
        size_value <= 0
        or any(not 0 <= value < _LARGEST for value in (pointer_value, size_value, thread_value, stream_value))
        or not 0 <= process_value < 2**32
    ):
        if (
            size_value == 0
        ):  # XLA's BFC allocator hands out nothing for 0 bytes (bfc_allocator.cc, AllocateRawInternal: "tried to allocate 0 bytes")
            raise TraceFormatError(
                f"{where}: Size 0: an allocation of no bytes is no event (XLA's and RMM's allocators allocate nothing for it, and pytest-devmem records none): remove the row"
            )
        raise TraceFormatError(
            f"{where}: a pointer, size, thread, stream or process out of range (0 to 2**64 - 1, process below 2**32)"
        )
    trace.add(
        ACTIONS.index(_READ_ACTIONS[action]),
        pointer_value,
        size_value,
        time,
        thread_value,
        stream_value,
        source,
        label,
        device,
        process_value,
        site,
    )


def _parse_time(stamp: str) -> float:
    """Seconds, from either a float or RMM's older `HH:MM:SS:micro` clock format."""
    if stamp.count(":") == 3:
        hours, minutes, seconds, fraction = stamp.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + int(seconds) + float(f"0.{fraction}")
    value = float(stamp)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"time {stamp!r} is not a finite number")
    return value
