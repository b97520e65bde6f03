"""A trace's CSV, RMM's memory-event log: written column by column, read by column where pyarrow is
installed (csv_columns.py) and row by row otherwise, or where the column reader is not sure.

The text form is RMM's memory-event log (`Thread,Time,Action,Pointer,Size,Stream`), so a trace
recorded here replays in RMM's REPLAY_BENCHMARK and an RMM log replays here. Actions are
`allocate`, `free` (RMM's older spelling; `deallocate` is read too) and `allocate failure`. Four
more columns, which RMM's reader does not look at, say who made each event and where: `Source`,
`Label` (e.g. the executable's name), `Device` and `Process`. Logs with RMM's six columns, or with
the first eight of ours (pytest-devmem before per-device traces), read too.
"""

from __future__ import annotations

import csv
import io
import os
from typing import IO, TypeVar

from ...errors import FileFormatError
from ...files import MAX_TRACE_BYTES, open_regular
from ...spreadsheet import csv_cell, csv_text
from . import csv_columns
from .columns import TraceColumns
from .format import (
    ACTIONS,
    DEVICE_NAME,
    HEADER,
    HEADERS,
    READ_ACTIONS,
    RMM_HEADER,
    SITE_HEADER,
    SOURCE_HEADER,
    START,
    TraceFormatError,
    is_arrow_form,
    not_a_device,
)

_T = TypeVar("_T", bound=TraceColumns)
_LARGEST = 2**64


def trace_csv(trace: TraceColumns) -> str:
    """The trace's CSV, as `Trace.write_csv` writes it: csv.writer's cells (a CR in a text quoted),
    made column by column, each distinct text quoted once (some three times faster than a
    writer row by row). The Site column where any event has one (SITE_HEADER)."""
    texts = [_csv_field(csv_cell(name)) for name in trace.names]  # type: ignore[arg-type]  # str in, str out
    devices = [_csv_field(name) for name in trace.names]
    columns = [
        map(str, trace.threads),
        map("{:.6f}".format, trace.times),
        map(ACTIONS.__getitem__, trace.actions),
        map("{:#x}".format, trace.pointers),
        map(str, trace.sizes),
        map("{:#x}".format, trace.streams),
        map(texts.__getitem__, trace.sources),
        map(texts.__getitem__, trace.labels),
        map(devices.__getitem__, trace.devices),
        map(str, trace.processes),
    ]
    header: tuple[str, ...] = HEADER
    if trace.has_sites():
        header = SITE_HEADER
        columns.append(map(texts.__getitem__, trace.sites))
    rows = map(",".join, zip(*columns))
    return ",".join(header) + "\n" + "".join(row + "\n" for row in rows)


def read_rows(cls: type[_T], binary: IO[bytes], path: str | os.PathLike[str]) -> _T:
    """The trace in `binary` (the CSV at `path`, open at its start, closed here), row by row: the
    reader that names the file and line of anything malformed."""
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
        raise TraceFormatError(f"{os.fspath(path)}:{_first_line_not_utf8(path)}: not UTF-8 text: not a trace") from None
    except csv.Error as exc:
        raise TraceFormatError(f"{os.fspath(path)}:{line + 1}: not CSV: {exc}") from None
    return trace


def event_places(path: str | os.PathLike[str], indices: list[int]) -> tuple[str, dict[int, int]]:
    """Where events (by index) are in a trace file, for an error: ("line", each one's line) in a CSV
    (its rows after the header, empty ones skipped, as the reader counts them), ("row", each one's
    row) in an Arrow IPC file, or ("event", its number) where the file cannot say."""
    try:
        with open_regular(path, "trace", MAX_TRACE_BYTES) as binary:
            first = binary.read(8)
            if is_arrow_form(first):
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


def read_by_column(cls: type[_T], binary: IO[bytes]) -> _T | None:
    """The trace pyarrow's CSV reader makes of `binary` (see csv_columns.py); None where pyarrow
    is missing or anything is not as that reader expects: the caller reads the rows, which names
    the line of a bad value. `binary` is left at its start."""
    if not csv_columns.available():
        return None
    try:
        header = tuple(binary.readline(4096).decode("utf-8", "replace").rstrip("\r\n").split(","))
        binary.seek(0)
        if header not in HEADERS:
            return None
        trace = cls()
        fitted = csv_columns.read_columns(binary, header, trace)
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


def _add_row(trace: TraceColumns, path: object, line: int, row: list[str], width: int) -> None:
    where = f"{os.fspath(path)}:{line}"  # type: ignore[call-overload]
    if len(row) != width:
        raise TraceFormatError(f"{where}: expected {width} columns, got {len(row)}")
    thread, stamp, action, pointer, size, stream = (cell.strip() for cell in row[:6])
    source, label = (
        (csv_text(row[6].strip()), csv_text(row[7].strip())) if width >= len(SOURCE_HEADER) else ("", "")
    )  # as written, before csv_cell
    device, process = (row[8].strip(), row[9].strip()) if width >= len(HEADER) else ("", "0")
    site = csv_text(row[10].strip()) if width == len(SITE_HEADER) else ""
    if action not in READ_ACTIONS:
        raise TraceFormatError(f"{where}: unknown action {action[:40]!r}; allowed: {', '.join(READ_ACTIONS)}")
    if device and not DEVICE_NAME.fullmatch(device):
        raise not_a_device(where, device)
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
        (size_value <= 0 and not (size_value == 0 and READ_ACTIONS[action] == START))  # a start may hold nothing
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
        ACTIONS.index(READ_ACTIONS[action]),
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
