"""Reading a trace's CSV by column with pyarrow's CSV reader, block by block: the fast way in.

`Trace.read_csv` tries this first. It accepts only what the row reader accepts and
gives exactly the trace the row reader (csv_file.py) would give; anything it is not sure of (a cell with spaces
around it, RMM's older clock format, an integer Python reads and pyarrow does not, a bad value of
any kind) makes it answer None, and the row reader reads the file again: it reads whatever this
one leaves and names the file and line of a bad value. Without pyarrow (the `fast-traces` extra)
the row reader reads every trace.

Memory stays near the trace's own: the file is read in blocks of BLOCK_BYTES, and each block's
columns are appended to the trace's compact columns (about 60 bytes an event) before the next is
read. Texts (`Action`, `Source`, `Label`, `Device`) are read as dictionaries (and `Site`, where the file has it), so each distinct text
is looked at once per block, not once per row.
"""

from __future__ import annotations

import math
from typing import IO, Any

from ...spreadsheet import csv_text
from .columns import TraceColumns
from .format import ACTIONS, DEVICE_NAME, READ_ACTIONS

BLOCK_BYTES = 4 << 20
"""Bytes of CSV text parsed at a time (pyarrow's block): small enough that a block's columns, as
parsed and converted, stay a small part of a large trace; large enough that per-block work is
negligible (4 MiB is some 70,000 events; 1 MiB blocks took 10% more CPU)."""

UTF8_BOM = b"\xef\xbb\xbf"


def available() -> bool:
    """Whether pyarrow and numpy can be imported (the fast reader needs both)."""
    try:  # the fast-traces extra, optional: without it the row reader reads every trace
        import numpy  # noqa: F401
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


def read_columns(binary: IO[bytes], header: tuple[str, ...], trace: TraceColumns) -> bool:
    """Append the events of `binary` (an RMM-style log whose header is exactly `header`) to
    `trace`; False where anything is not as the fast path expects (the caller reads the file
    again with the row reader)."""
    try:  # the fast-traces extra, optional (and 0.1 s of start-up): as in `available`
        import numpy as np
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:
        return False
    if binary.read(len(UTF8_BOM)) == UTF8_BOM:  # pyarrow would skip it; the row reader does not
        return False
    binary.seek(0)
    types = column_types(pa)
    try:
        reader = pacsv.open_csv(
            binary,
            read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES, use_threads=True),
            parse_options=pacsv.ParseOptions(newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(
                column_types={name: types[name] for name in header},
                null_values=[""],
                strings_can_be_null=False,
                include_columns=list(header),
            ),
        )
        if tuple(reader.schema.names) != header:
            return False
        action_code = {text: ACTIONS.index(action) for text, action in READ_ACTIONS.items()}
        for batch in reader:
            if not _append_batch(batch, trace, action_code, np):
                return False
    except (pa.ArrowException, UnicodeDecodeError):  # a conversion or a row the fast path does not take
        return False
    return True


def column_types(pa: Any) -> dict[str, Any]:
    """The type pyarrow reads each trace column as: texts as dictionaries (each distinct text once)."""
    texts = pa.dictionary(pa.int32(), pa.string())
    return {
        "Thread": pa.uint64(),
        "Time": pa.float64(),
        "Action": texts,
        "Pointer": pa.string(),
        "Size": pa.int64(),
        "Stream": texts,
        "Source": texts,
        "Label": texts,
        "Device": texts,
        "Process": pa.uint32(),
        "Site": texts,
    }


def _append_batch(batch: Any, trace: TraceColumns, action_code: dict[str, int], np: Any) -> bool:
    rows = batch.num_rows
    if not rows:
        return True
    columns = dict(zip(batch.schema.names, batch.columns))
    action_codes = _text_codes(columns["Action"], lambda text: action_code.get(text.strip(), -1), np)
    if action_codes is None or (action_codes < 0).any():
        return False
    stream = columns["Stream"]  # a few streams: each parsed once
    stream_values = integers(stream.dictionary, np) if not stream.null_count else None
    pointers, streams = (
        integers(columns["Pointer"], np),
        None if stream_values is None else stream_values[numbers(stream.indices, np)],
    )
    sizes, threads, times = columns["Size"], columns["Thread"], columns["Time"]
    if pointers is None or streams is None or sizes.null_count or threads.null_count or times.null_count:
        return False
    size_values = numbers(sizes, np)
    time_values = numbers(times, np)
    if (size_values <= 0).any() or not np.isfinite(
        time_values
    ).all():  # sizes of 0 too: the row reader decides what they mean
        return False
    names = _name_codes(trace, columns, np)
    if names is None:
        return False
    process = columns.get("Process")
    trace.actions += action_codes.astype(np.uint8).tobytes()
    trace.pointers.frombytes(pointers.tobytes())
    trace.sizes.frombytes(size_values.astype(np.int64).tobytes())
    trace.times.frombytes(time_values.astype(np.float64).tobytes())
    trace.threads.frombytes(numbers(threads, np).astype(np.uint64).tobytes())
    trace.streams.frombytes(streams.tobytes())
    for column, target in (
        ("Source", trace.sources),
        ("Label", trace.labels),
        ("Device", trace.devices),
        ("Site", trace.sites),
    ):
        target.frombytes((names[column] if column in names else np.zeros(rows, np.int64)).astype(np.uint32).tobytes())
    if process is None:
        trace.processes.frombytes(np.zeros(rows, np.uint32).tobytes())
    else:
        trace.processes.frombytes(_zero_where_null(process, np).astype(np.uint32).tobytes())
    return True


def _name_codes(trace: TraceColumns, columns: dict[str, Any], np: Any) -> dict[str, Any] | None:
    """The name codes of the Source, Label, Device and Site columns present; None where a Device is
    not PLATFORM:N. Texts new to the trace are added to its names in the order the row reader adds
    them (row by row; in a row Source, Label, Device, Site), so both readers give the same `names`."""
    present = [
        (rank, name, columns[name])
        for rank, name in enumerate(("Source", "Label", "Device", "Site"))
        if name in columns
    ]
    used: list[tuple[int, int, str]] = []  # (first row, column rank, text) of each text the rows use
    for rank, name, column in present:
        if column.null_count:
            return None
        texts = [_as_written(name, text) for text in column.dictionary.to_pylist()]
        if name == "Device" and any(text and not DEVICE_NAME.fullmatch(text) for text in texts):
            return None
        codes, first_rows = np.unique(numbers(column.indices, np), return_index=True)
        used += [(row, rank, texts[code]) for code, row in zip(codes.tolist(), first_rows.tolist())]
    code_of = {text: trace.name_code(text) for _, _, text in sorted(used)}
    found = {}
    for _, name, column in present:
        lookup = np.array(
            [code_of.get(_as_written(name, text), 0) for text in column.dictionary.to_pylist()] or [0], dtype=np.int64
        )
        found[name] = lookup[numbers(column.indices, np)]
    return found


def _as_written(name: str, text: str) -> str:
    """A Source, Label or Site as the trace was given it (the quote `csv_cell` put before a formula
    taken off, as the row reader does); a Device as it stands."""
    return csv_text(text.strip()) if name != "Device" else text.strip()


def _text_codes(column: Any, code_of: Any, np: Any) -> Any:
    """The codes of a dictionary column's rows: `code_of` applied once to each distinct text."""
    if column.null_count:
        return None
    lookup = np.array([code_of(text) for text in column.dictionary.to_pylist()], dtype=np.int64)
    indices = numbers(column.indices, np)
    return lookup[indices] if len(lookup) else None


_FLOATS = {"halffloat": "float16", "float": "float32", "double": "float64"}


def numbers(column: Any, np: Any) -> Any:
    """A numeric Arrow array with no nulls as a numpy view of its buffer (no copy). Not
    `to_numpy`, which imports pandas where it is installed (half a second and some 40 MiB, more
    than reading a million events takes)."""
    name = str(column.type)
    dtype = np.dtype(_FLOATS.get(name, name))
    data = column.buffers()[1]
    if data is None or not len(column):
        return np.zeros(len(column), dtype)
    return np.frombuffer(data, dtype=dtype, count=len(column), offset=column.offset * dtype.itemsize)


def _zero_where_null(column: Any, np: Any) -> Any:
    """A numeric column's values, 0 where it is empty (null), by its validity bitmap (not
    `fill_null`, which imports pandas where it is installed)."""
    values = numbers(column, np)
    if not column.null_count:
        return values
    bits = np.unpackbits(np.frombuffer(column.buffers()[0], dtype=np.uint8), bitorder="little")
    return np.where(bits[column.offset : column.offset + len(column)].astype(bool), values, 0)


_HEX_VALUE = bytes(int(chr(c), 16) if chr(c) in "0123456789abcdefABCDEF" else 255 for c in range(256))


def integers(column: Any, np: Any) -> Any:
    """A string column's values as uint64, where every one is what Python's int(text, 0) reads
    in its two usual forms: 0x (or 0X) and 1 to 16 hex digits, or a decimal of 1 to 19 digits
    with no leading zero (`0` itself aside); None where any is not (the row reader decides)."""
    if column.null_count:
        return None
    _, offset_buffer, data_buffer = column.buffers()
    count = len(column)
    offsets = np.frombuffer(offset_buffer, dtype=np.int32)[column.offset : column.offset + count + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    lengths = ends - starts
    if not count:
        return np.zeros(0, np.uint64)
    if (lengths <= 0).any():
        return None
    first = data[starts]
    second = np.where(lengths > 1, data[np.minimum(starts + 1, len(data) - 1)], 0)
    hexadecimal = (first == ord("0")) & ((second == ord("x")) | (second == ord("X")))
    digit_starts = starts + np.where(hexadecimal, 2, 0)
    digits = ends - digit_starts
    if (digits < 1).any() or (hexadecimal & (digits > 16)).any() or (~hexadecimal & (digits > 19)).any():
        return None
    if (~hexadecimal & (first == ord("0")) & (lengths > 1)).any():  # Python refuses 01 in base 0
        return None
    if hexadecimal.all():
        return _hexadecimals(column, np)
    total = int(digits.sum())
    row_of_char = np.repeat(np.arange(count), digits)
    position = np.arange(total) - np.repeat(np.cumsum(digits) - digits, digits) + np.repeat(digit_starts, digits)
    values = np.frombuffer(_HEX_VALUE, dtype=np.uint8)[data[position]]
    char_hex = hexadecimal[row_of_char]
    if (values == 255).any() or ((values > 9) & ~char_hex).any():
        return None
    exponent = ends[row_of_char] - 1 - position
    powers16 = np.array([16**k for k in range(16)], dtype=np.uint64)
    powers10 = np.array([10**k for k in range(20)], dtype=np.uint64)
    weights = np.where(char_hex, powers16[np.minimum(exponent, 15)], powers10[exponent])
    terms = values.astype(np.uint64) * weights
    row_starts = np.cumsum(digits) - digits
    return np.add.reduceat(terms, row_starts).astype(np.uint64)


def _hexadecimals(column: Any, np: Any) -> Any:
    """A column of `0x` and 1 to 16 hex digits each as uint64: the digits padded to 16 (pyarrow),
    their values packed two a byte and read as big-endian 64-bit words (numpy). None where a
    character is no hex digit."""
    import pyarrow.compute as pc  # pyarrow's kernels: optional, as the whole module's pyarrow is

    padded = pc.utf8_lpad(pc.utf8_slice_codeunits(column, 2), 16, "0")
    _, offset_buffer, data_buffer = padded.buffers()
    first = int(np.frombuffer(offset_buffer, dtype=np.int32, count=1, offset=4 * padded.offset)[0])
    characters = np.frombuffer(data_buffer, dtype=np.uint8, count=16 * len(padded), offset=first).reshape(-1, 16)
    values = np.frombuffer(_HEX_VALUE, dtype=np.uint8)[characters]
    if (values == 255).any():
        return None
    packed = (values[:, 0::2] << 4) | values[:, 1::2]
    return np.ascontiguousarray(packed).view(">u8").ravel().astype(np.uint64)


assert math.log2(10**19) < 64  # a 19-digit decimal always fits the uint64 the sums are made in
