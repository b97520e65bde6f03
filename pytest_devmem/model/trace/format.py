"""What a trace file holds, in either form: its columns' names, its actions and their codes, the
names its files end with, what a device is called, and the error a malformed one raises."""

from __future__ import annotations

import re

from ...errors import FileFormatError

RMM_HEADER = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
SOURCE_HEADER = (*RMM_HEADER, "Source", "Label")
HEADER = (*SOURCE_HEADER, "Device", "Process")
SITE_HEADER = (*HEADER, "Site")
"""HEADER and the user's line that made each event's buffer: written where any event has one."""
HEADERS = (SITE_HEADER, HEADER, SOURCE_HEADER, RMM_HEADER)
"""The headers a trace file may have."""
ALLOCATE, FREE, ALLOCATE_FAILURE, START = "allocate", "free", "allocate failure", "start"
ACTIONS = (ALLOCATE, FREE, ALLOCATE_FAILURE, START)
"""An event's action is stored as its index here: 0 allocate, 1 free, 2 allocate failure, 3 start.
A `start` says the source's allocator on that device was started before the trace began, holding
the event's size in a live buffer that is not the trace's (at the event's pointer; 0 bytes: none):
what a fixture shared by several tests started, and each buffer it keeps. They count for what fits,
not in the trace's figures."""
ALLOCATE_CODE, FREE_CODE, FAILURE_CODE, START_CODE = 0, 1, 2, 3
READ_ACTIONS = {
    "allocate": ALLOCATE,
    "free": FREE,
    "deallocate": FREE,
    "allocate failure": ALLOCATE_FAILURE,
    "start": START,
}
"""The Action texts a trace file may hold (RMM's older `free` and its `deallocate` alike), and the action each is."""
TRACE_SUFFIXES = (".csv", ".arrow", ".feather")
"""The names a trace file ends with: its CSV, or its Arrow IPC file (arrow_file.py; Feather v2 is one)."""
BY_COLUMN_FROM = 20_000
"""Traces of this many events or more compute their figures by column (numpy)."""

DEVICE_NAME = re.compile(r"[a-z][a-z0-9_]{0,15}:(0|[1-9][0-9]{0,5})")
"""A device as the captures name it: JAX's platform and id (`cpu:2`, `gpu:0`), TensorFlow's alike."""


class TraceFormatError(FileFormatError):
    """A trace file that is not an RMM-style memory-event log; the message names file and line."""


def not_a_device(where: str, device: str) -> TraceFormatError:
    """The error for a Device cell that is not PLATFORM:N, at `where` (a file and line, or a file)."""
    return TraceFormatError(
        f"{where}: Device {device[:40]!r} is not a device: write PLATFORM:N in lower case (cpu:0, gpu:1), or leave it empty for the first device"
    )


ARROW_MAGIC = b"ARROW1"
"""The first bytes of an Arrow IPC file (and of a Feather v2 file, which is one)."""
ARROW_STREAM_START = b"\xff\xff\xff\xff"
"""How an Arrow IPC stream begins (Arrow's columnar format, "Encapsulated message format": the
continuation marker before each message's length, since Arrow 0.15), what `pyarrow.ipc.new_stream`
and `pandas.DataFrame.to_feather`'s stream cousin write: the same columns in another framing."""


def is_arrow_stream(start: bytes) -> bool:
    """Whether a file starting with `start` is an Arrow IPC stream (read as a trace file is)."""
    return start[: len(ARROW_STREAM_START)] == ARROW_STREAM_START


def is_arrow_form(start: bytes) -> bool:
    """Whether a trace file starting with `start` is in the Arrow form (an IPC file or stream), not the CSV."""
    return start[: len(ARROW_MAGIC)] == ARROW_MAGIC or is_arrow_stream(start)
