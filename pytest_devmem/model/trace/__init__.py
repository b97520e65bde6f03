"""Device-allocation traces: the events a test made, stored by column (columns.py), and their two
file forms.

The text form is RMM's memory-event log (csv_file.py), so a trace recorded here replays in RMM's
REPLAY_BENCHMARK and an RMM log replays here; it is read by column where pyarrow is installed
(csv_columns.py). The columnar form, an Arrow IPC file of the same columns (arrow_file.py), reads
some ten times faster. `Trace.read` and `Trace.read_csv` take either form, told apart by the
file's first bytes (format.py). Figures of long traces are computed by column (numpy,
by_column.py). No pytest, no frameworks.

`Trace` is the one name the rest of the package uses; the package's modules import one another
one way: format, then columns, then the two forms, then this.
"""

from __future__ import annotations

import os

from ...errors import FileFormatError
from ...files import MAX_TRACE_BYTES, open_regular, write_atomic
from . import arrow_file, csv_file
from .columns import NUMBER_COLUMNS, TraceColumns, TraceEvent
from .format import (
    ACTIONS,
    ALLOCATE,
    ALLOCATE_CODE,
    ALLOCATE_FAILURE,
    BY_COLUMN_FROM,
    FAILURE_CODE,
    FREE,
    FREE_CODE,
    HEADER,
    HEADERS,
    RMM_HEADER,
    SITE_HEADER,
    SOURCE_HEADER,
    START,
    START_CODE,
    TRACE_SUFFIXES,
    TraceFormatError,
    is_arrow_form,
)

__all__ = [
    "NUMBER_COLUMNS",
    "ACTIONS",
    "ALLOCATE",
    "ALLOCATE_CODE",
    "ALLOCATE_FAILURE",
    "BY_COLUMN_FROM",
    "FAILURE_CODE",
    "FREE",
    "FREE_CODE",
    "HEADER",
    "HEADERS",
    "RMM_HEADER",
    "SITE_HEADER",
    "SOURCE_HEADER",
    "START",
    "START_CODE",
    "TRACE_SUFFIXES",
    "Trace",
    "TraceEvent",
    "TraceFormatError",
    "convert_trace",
]


class Trace(TraceColumns):
    """A trace's events by column (`TraceColumns`), and its files: the CSV (`write_csv`) and the
    Arrow IPC file (`write_arrow`), either read back by `read`."""

    __slots__ = ()

    def write_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the trace atomically in RMM's log format (with Source, Label, Device, Process)."""
        write_atomic(path, self.csv_text())

    def csv_text(self) -> str:
        """The trace's CSV, as `write_csv` writes it."""
        return csv_file.trace_csv(self)

    def write_arrow(self, path: str | os.PathLike[str]) -> None:
        """Write the trace atomically as an Arrow IPC (Feather v2) file: its columns as they are,
        read back some ten times faster than the CSV (arrow_file.py; needs pyarrow and numpy)."""
        arrow_file.write_arrow(self, path)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a trace in either form, told apart by its first bytes: an Arrow IPC file
        (`write_arrow`) or an RMM-style CSV (`write_csv`). TraceFormatError names the file and what
        is wrong, and refuses what is not a regular file or is larger than MAX_TRACE_BYTES."""
        return cls.read_csv(path)

    @classmethod
    def read_csv(cls, path: str | os.PathLike[str]) -> Trace:
        """Read an RMM-style log; TraceFormatError names the file and line of anything malformed,
        and refuses what is not a regular file (a FIFO or a device would hang the read) or is
        larger than MAX_TRACE_BYTES. An Arrow IPC trace file (arrow_file.py), known by its first
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
        if is_arrow_form(start):
            with binary:
                return arrow_file.read_arrow(cls, binary, os.fspath(path))
        by_column = csv_file.read_by_column(cls, binary)
        if by_column is not None:
            binary.close()
            return by_column
        return csv_file.read_rows(cls, binary, path)

    def check_pairs(self, path: str | os.PathLike[str]) -> None:
        """TraceFormatError naming the file `path` (this trace, as read from it) and the line (the
        row, in an Arrow IPC file) of the first event whose allocation or free does not pair
        (`pairing_problem`): what the replay of a trace file is given must pair."""
        problem = self.pairing_problem()
        if problem is None:
            return
        index, other, text = problem
        unit, where = csv_file.event_places(path, [index] if other is None else [index, other])
        if other is not None:
            text = text.replace("{other}", f"{unit} {where[other]}")
        shown = f"{os.fspath(path)}:{where[index]}" if unit == "line" else f"{os.fspath(path)}: {unit} {where[index]}"
        raise TraceFormatError(f"{shown}: {text}")


def convert_trace(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> str:
    """Write the trace at `source` (either form) to `target` in the form its name asks for (`.arrow`
    or `.feather`: the Arrow file; `.csv`: the CSV), atomically; what was done, in one line.
    TraceFormatError for a bad `source`, or a `target` that names no form or is `source` itself."""
    suffix = os.path.splitext(os.fspath(target))[1].lower()
    if suffix not in TRACE_SUFFIXES:
        raise TraceFormatError(
            f"{os.fspath(target)}: a trace file's name ends with {', '.join(TRACE_SUFFIXES)} (.csv: the CSV; .arrow or .feather: the Arrow IPC file)"
        )
    if os.path.exists(target) and os.path.exists(source) and os.path.samefile(source, target):
        raise TraceFormatError(f"{os.fspath(target)}: is the trace read: write the other form to another file")
    trace = Trace.read(source)
    if suffix == ".csv":
        trace.write_csv(target)
    else:
        trace.write_arrow(target)
    return f"wrote {os.fspath(target)} ({len(trace):,} events, {'CSV' if suffix == '.csv' else 'Arrow IPC file'})"
