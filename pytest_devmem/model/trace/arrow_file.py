"""A trace as an Arrow IPC file (Feather v2): the columnar form, read back at the speed of a copy.

The CSV (csv_file.py) is the form for people and for RMM's replay; this file holds the same events
in the trace's own column types, so reading one is a copy of each column into the trace, with no
parse and no Python per event (a million events in some 0.05 s, where the CSV's column reader
takes 0.5 s). pandas reads it too: `pandas.read_feather(path)` gives one row an event, texts as
categories.

Columns, named as the CSV's header (RMM_HEADER, SOURCE_HEADER, HEADER or SITE_HEADER, in any order):

- `Thread` uint64, `Time` float64, `Pointer` uint64, `Size` int64 (above 0), `Stream` uint64,
  `Process` uint32: any integer type (float for `Time`) whose values fit is read too; `Pointer`
  and `Stream` may also be text as in the CSV (`0x7f00`, `42`).
- `Action`, `Source`, `Label`, `Device`, `Site`: text, plain or dictionary-encoded (`Site`, the
  user's line that made each buffer, is written where any event has one). `write_arrow` writes
  them as dictionaries over the trace's own `names` (and ACTIONS), so that reading takes the codes
  as they are.

No nulls. `Trace.read_csv` and `Trace.read` read such a file by its magic bytes (`ARROW1`), so
`devmem replay` takes either form; a file that is not one of these (truncated, corrupt, another
schema) is a TraceFormatError naming the file and what is allowed. Needs pyarrow and numpy (the
`fast-traces` extra).

Memory: the file is read one record batch at a time (BATCH_ROWS events) into columns allocated
once at the trace's full length, so reading takes the trace's size and one batch.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable
from typing import IO, Any, Generic, TypeVar

from ...files import write_atomic
from .columns import NUMBER_COLUMNS, TraceColumns
from .csv_columns import integers, numbers
from .format import (
    ACTIONS,
    ARROW_STREAM_START,
    DEVICE_NAME,
    HEADER,
    HEADERS,
    READ_ACTIONS,
    SITE_HEADER,
    START_CODE,
    TraceFormatError,
    is_arrow_stream,
    not_a_device,
)

_T = TypeVar("_T", bound=TraceColumns)
BATCH_ROWS = 1 << 16
"""Events per record batch written: small beside a large trace, large enough that per-batch work is negligible."""
FORMAT_KEY, FORMAT_VALUE = b"pytest-devmem", b"trace 1"
"""Schema metadata written with the file (informative: a file without it, made by pandas say, reads too)."""
ROWS_KEY = b"pytest-devmem events"
"""Schema metadata: the number of events, so that reading allocates each column once."""
MIN_EVENT_BYTES = 7
"""The fewest bytes an event takes in an uncompressed file (RMM's six columns, one byte each but the time's two)."""

_UNSIGNED = {"Thread": "uint64", "Pointer": "uint64", "Stream": "uint64", "Process": "uint32", "Size": "int64"}
_TEXTS = ("Action", "Source", "Label", "Device", "Site")
ALLOWED = (
    "an Arrow IPC (Feather v2) trace file has the columns Thread, Time, Action, Pointer, Size, Stream"
    " (optionally Source, Label, Device, Process, Site): integers (Pointer and Stream may be text such as 0x7f00),"
    " Time a number, Action, Source, Label and Device text (plain or dictionary-encoded), no nulls"
)


def available() -> bool:
    """Whether pyarrow and numpy can be imported (this form needs both)."""
    try:  # the fast-traces extra, optional: looked for only where a trace's Arrow form is asked for
        import numpy  # noqa: F401
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        return False
    return True


# -- writing ---------------------------------------------------------------------------------


def arrow_bytes(trace: TraceColumns) -> Any:
    """The trace as the bytes of an Arrow IPC file (a pyarrow Buffer): its columns as they are."""
    import numpy as np  # the fast-traces extra, optional (and 0.1 s of start-up): as in `available`
    import pyarrow as pa
    import pyarrow.ipc as ipc

    names = pa.array(trace.names, pa.string())
    actions = pa.array(list(ACTIONS), pa.string())

    def column(values: Any, dtype: Any) -> Any:
        return pa.array(np.frombuffer(values, dtype=dtype)) if len(values) else pa.array([], pa.from_numpy_dtype(dtype))

    def texts(codes: Any, dictionary: Any, dtype: Any) -> Any:
        indices = np.frombuffer(codes, dtype=dtype) if len(codes) else np.zeros(0, dtype)
        return pa.DictionaryArray.from_arrays(
            pa.array(indices.view(np.int32 if dtype == np.uint32 else np.int8)), dictionary
        )

    columns = {
        "Thread": column(trace.threads, np.uint64),
        "Time": column(trace.times, np.float64),
        "Action": texts(bytes(trace.actions), actions, np.uint8),
        "Pointer": column(trace.pointers, np.uint64),
        "Size": column(trace.sizes, np.int64),
        "Stream": column(trace.streams, np.uint64),
        "Source": texts(trace.sources, names, np.uint32),
        "Label": texts(trace.labels, names, np.uint32),
        "Device": texts(trace.devices, names, np.uint32),
        "Process": column(trace.processes, np.uint32),
    }
    if trace.has_sites():
        columns["Site"] = texts(trace.sites, names, np.uint32)
    table = pa.table(columns)
    assert tuple(table.schema.names) in (HEADER, SITE_HEADER)
    table = table.replace_schema_metadata({FORMAT_KEY: FORMAT_VALUE, ROWS_KEY: str(len(trace)).encode()})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=BATCH_ROWS)
    return sink.getvalue()


def write_arrow(trace: TraceColumns, path: str | os.PathLike[str]) -> None:
    """Write the trace atomically as an Arrow IPC file (uncompressed, so any Arrow reader maps it);
    TraceFormatError naming the file where pyarrow or numpy is missing."""
    if not available():
        raise TraceFormatError(
            f"{os.fspath(path)}: an Arrow IPC trace file is written with pyarrow and numpy: pip install 'pytest-devmem[fast-traces]', or keep the trace's CSV"
        )

    write_atomic(path, memoryview(arrow_bytes(trace)))  # type: ignore[arg-type]  # any bytes-like is written as is


# -- reading ---------------------------------------------------------------------------------


def read_arrow(cls: type[_T], binary: IO[bytes], shown: str) -> _T:
    """The trace in `binary` (an open Arrow IPC file or stream, named `shown` in errors);
    TraceFormatError for a file that is not one (truncated, corrupt) or whose columns are not a
    trace's."""
    try:  # the fast-traces extra, optional (and 0.1 s of start-up): as in `available`
        import numpy as np
        import pyarrow as pa
        import pyarrow.ipc as ipc
    except ImportError:
        raise TraceFormatError(
            f"{shown}: an Arrow IPC trace file, which needs pyarrow and numpy: pip install 'pytest-devmem[fast-traces]', or give the trace's CSV"
        ) from None
    binary.seek(0)
    stream = is_arrow_stream(binary.read(len(ARROW_STREAM_START)))
    binary.seek(0)
    try:
        if stream:  # no footer: its batches are read in order, all of them, before the columns are sized
            stream_reader = ipc.open_stream(binary)
            _check_schema(stream_reader.schema, shown, pa)
            batches: Iterable[Any] = list(stream_reader)
            trace = _Columns(cls(), sum(int(batch.num_rows) for batch in batches))
        else:
            reader = ipc.open_file(binary)
            _check_schema(reader.schema, shown, pa)
            trace = _Columns(cls(), _rows(reader, os.fstat(binary.fileno()).st_size))
            batches = (reader.get_batch(index) for index in range(reader.num_record_batches))
        for batch in batches:
            batch.validate(full=True)  # offsets, dictionary indices, UTF-8: a corrupt body is refused here
            trace.append(batch, shown, np, pa)
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        if isinstance(exc, TraceFormatError):
            raise
        raise TraceFormatError(
            f"{shown}: not a readable Arrow IPC trace file ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}); {ALLOWED}"
        ) from None
    return trace.finish(shown, np)


def _rows(reader: Any, file_bytes: int) -> int:
    """The events in the file: as `write_arrow` notes in the schema's metadata where the file is
    large enough to hold them uncompressed, or else counted batch by batch (a file made elsewhere,
    or compressed: each batch is then read twice). A count that is wrong is found once the batches
    are read; one too large for the file is never trusted to size the columns."""
    noted = (reader.schema.metadata or {}).get(ROWS_KEY, b"")
    if noted.isdigit() and int(noted) * MIN_EVENT_BYTES <= file_bytes:
        return int(noted)
    return sum(int(reader.get_batch(index).num_rows) for index in range(reader.num_record_batches))


def _check_schema(schema: Any, shown: str, pa: Any) -> None:
    names = list(schema.names)
    if sorted(names) not in [sorted(header) for header in HEADERS]:
        raise TraceFormatError(f"{shown}: columns {', '.join(names)[:200]}: not a trace's; {ALLOWED}")
    for field in schema:
        kind = field.type
        if field.name in _TEXTS:
            value = kind.value_type if pa.types.is_dictionary(kind) else kind
            fits = pa.types.is_string(value) or pa.types.is_large_string(value)
        elif field.name == "Time":
            fits = pa.types.is_floating(kind) or pa.types.is_integer(kind)
        elif field.name in ("Pointer", "Stream"):
            fits = pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
        else:
            fits = pa.types.is_integer(kind)
        if not fits:
            raise TraceFormatError(f"{shown}: column {field.name} is {kind}; {ALLOWED}")


def _integers_by_text(texts: list[str], name: str, shown: str, np: Any) -> Any:
    """Texts as Python's int(text, 0) reads them, as the CSV's row reader does, each from 0 to 2**64 - 1."""
    try:
        values = [int(text.strip(), 0) for text in texts]
    except ValueError:
        raise TraceFormatError(
            f"{shown}: column {name} has a text that is not a whole number (0x and hex digits, or decimal digits)"
        ) from None
    if any(not 0 <= value < 2**64 for value in values):
        raise TraceFormatError(f"{shown}: column {name} has a value out of range (0 to {2**64 - 1})")
    return np.array(values, dtype=np.uint64)


class _Columns(Generic[_T]):
    """The trace being read: its columns allocated once at the file's length, filled batch by batch."""

    def __init__(self, trace: _T, rows: int) -> None:
        self.trace = trace
        self.rows, self.filled = rows, 0
        trace.actions = bytearray(rows)
        for name in NUMBER_COLUMNS:
            column = getattr(trace, name)
            setattr(trace, name, array(column.typecode, [0]) * rows if rows else array(column.typecode))
        self._lookups: dict[str, tuple[Any, Any]] = {}

    def append(self, batch: Any, shown: str, np: Any, pa: Any) -> None:
        rows = batch.num_rows
        if not rows:
            return
        start, end = self.filled, self.filled + rows
        if end > self.rows:
            raise TraceFormatError(f"{shown}: its metadata says {self.rows} events, its record batches hold more")
        columns = dict(zip(batch.schema.names, batch.columns))
        for name, column in columns.items():
            if column.null_count:
                raise TraceFormatError(f"{shown}: column {name} has an empty value (null): {ALLOWED}")
        trace = self.trace
        action_codes = {text: ACTIONS.index(action) for text, action in READ_ACTIONS.items()}
        codes = self._codes(columns["Action"], "Action", lambda text: action_codes.get(text, -1), np, pa)
        if (codes < 0).any():
            dictionary = (
                columns["Action"].dictionary.to_pylist() if pa.types.is_dictionary(columns["Action"].type) else None
            )
            bad = next(
                (text for text in (dictionary or columns["Action"].to_pylist()) if text not in action_codes), "?"
            )
            raise TraceFormatError(f"{shown}: unknown Action {bad[:40]!r}; allowed: {', '.join(READ_ACTIONS)}")
        memoryview(trace.actions)[start:end] = codes.astype(np.uint8)
        for name, target in (
            ("Thread", trace.threads),
            ("Pointer", trace.pointers),
            ("Stream", trace.streams),
            ("Size", trace.sizes),
            ("Process", trace.processes),
        ):
            values = self._integers(columns.get(name), name, rows, shown, np, pa)
            sized = (values > 0) | (codes == START_CODE)  # a start may hold nothing
            if name == "Size" and not sized.all():
                raise TraceFormatError(
                    f"{shown}: a Size of 0 or less at event {start + int(np.argmin(sized)) + 1}: every event but a start has a size above 0"
                )
            memoryview(target).cast("B")[start * target.itemsize : end * target.itemsize] = values.view(np.uint8)
        times = numbers(columns["Time"], np).astype(np.float64, copy=False)
        if not np.isfinite(times).all():
            raise TraceFormatError(
                f"{shown}: a Time that is not a finite number at event {start + int(np.argmin(np.isfinite(times))) + 1}"
            )
        memoryview(trace.times).cast("B")[start * 8 : end * 8] = times.view(np.uint8)
        for name, target in (
            ("Source", trace.sources),
            ("Label", trace.labels),
            ("Device", trace.devices),
            ("Site", trace.sites),
        ):
            column = columns.get(name)
            values = (
                np.zeros(rows, np.uint32)
                if column is None
                else self._codes(column, name, trace.name_code, np, pa).astype(np.uint32)
            )
            memoryview(target).cast("B")[start * 4 : end * 4] = values.view(np.uint8)
        self.filled = end

    def _codes(self, column: Any, name: str, code_of: Any, np: Any, pa: Any) -> Any:
        """Each row's code: `code_of` applied once to each distinct text (a dictionary's entries;
        a plain text column is dictionary-encoded first), then taken by index."""
        if not pa.types.is_dictionary(column.type):  # a file made elsewhere
            column = column.dictionary_encode()
        dictionary = column.dictionary
        cached = self._lookups.get(name)
        if cached is not None and cached[0].equals(dictionary):
            lookup = cached[1]
        else:
            lookup = np.array([code_of(text) for text in dictionary.to_pylist()] or [0], dtype=np.int64)
            self._lookups[name] = (dictionary, lookup)
        indices = numbers(column.indices, np)
        return lookup[indices]

    @staticmethod
    def _integers(column: Any, name: str, rows: int, shown: str, np: Any, pa: Any) -> Any:
        target = np.dtype(_UNSIGNED[name])
        if column is None:
            return np.zeros(rows, target)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            parsed = integers(column.cast(pa.string()), np)
            if parsed is None:  # a form the column parser leaves to Python (20 decimal digits, 0X, 0o)
                parsed = _integers_by_text(column.to_pylist(), name, shown, np)
            return parsed.astype(target, copy=False)
        values = numbers(column, np)
        if values.dtype == target:
            return values
        limits = np.iinfo(target)
        if len(values) and (
            int(values.min()) < max(limits.min, 0 if name != "Size" else limits.min) or int(values.max()) > limits.max
        ):
            raise TraceFormatError(f"{shown}: column {name} has a value out of range (0 to {limits.max})")
        return values.astype(target)

    def finish(self, shown: str, np: Any) -> _T:
        trace = self.trace
        if self.filled != self.rows:
            raise TraceFormatError(
                f"{shown}: its metadata says {self.rows} events, its record batches hold {self.filled}"
            )
        if self.rows:
            used = np.flatnonzero(np.bincount(np.frombuffer(trace.devices, dtype=np.uint32)))
            for code in used.tolist():
                device = trace.names[code]
                if device and not DEVICE_NAME.fullmatch(device):
                    raise not_a_device(shown, device)
        return trace
