"""One entry of the deviceless compiles' disk cache (the GPU and TPU sizers': pytest's cache and
`--devmem-cache-dir`), checked before it is believed.

A cache is a file anyone may have written: a hand edit, another version, a disk that failed, a
hostile checkout. An entry is believed only when it is a small regular file (never a FIFO, which
would hang the session, nor a device or a link to one, which would be read without end) holding a
JSON object whose every size is a whole number of bytes, not negative, not a boolean and at most
what one device of the target holds (units.byte_count_problem), and whose device count is the one
the program was compiled for. Anything else is a miss: the program is compiled again, the entry
written anew, and the problem, naming the file, is warned about; a figure never comes from it. A
compile that states more than a device holds (a program that cannot run there) is not written, so
that it is never a bad entry the next time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ...errors import FileFormatError
from ...files import read_json
from ...units import KiB, byte_count_problem

MAX_ENTRY_BYTES = 64 * KiB
"""An entry holds a few numbers (some 200 bytes): a larger file is not one, and is not read."""

DEVICES = "devices"
"""The field that counts the devices a program was compiled for: a count, not a size."""


class BadEntry(Exception):
    """An entry that is there and cannot be believed; the message names the file and why."""


def read_entry(
    path: Path, sizes: Iterable[str], largest: int, devices: int | None = None, kept: Iterable[str] = ()
) -> dict[str, object] | None:
    """The entry at `path`: its `sizes` (each a number of bytes at most `largest`) and, with
    `devices`, its device count, which must be that; None where there is no file; BadEntry where
    there is one that is not such an entry. The `kept` fields it holds come back as they are, for
    their own reader to check (a program's buffers: model/buffers.py)."""
    if not os.path.lexists(path):
        return None
    try:
        _, data = read_json(path, "cache entry of compiled sizes", MAX_ENTRY_BYTES)
    except FileFormatError as exc:
        raise BadEntry(str(exc)) from None
    if not isinstance(data, dict):
        raise BadEntry(f"{path}: not a JSON object")
    entry: dict[str, object] = {name: data[name] for name in kept if name in data}
    for name in sizes:
        if name not in data:
            raise BadEntry(f"{path}: no {name!r}")
        problem = byte_count_problem(data[name], largest, "one device of the target")
        if problem is not None:
            raise BadEntry(f"{path}: {name!r}: {problem}")
        entry[name] = data[name]
    if devices is not None:
        count = data.get(DEVICES)
        if isinstance(count, bool) or not isinstance(count, int) or count != devices:
            raise BadEntry(f"{path}: {DEVICES!r} is {count!r}, where the program was compiled for {devices}")
        entry[DEVICES] = devices
    return entry


def writable(entry: Mapping[str, int], largest: int) -> bool:
    """Whether `entry` (sizes a compile stated) would pass read_entry's checks: only such is written."""
    return all(
        name == DEVICES or byte_count_problem(value, largest) is None
        for name, value in entry.items()
        if not isinstance(value, (dict, list))  # a kept field (buffers): its own reader checks it
    )
