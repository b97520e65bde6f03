"""The files a test's trace is written to: its CSV, and beside a long trace its Arrow IPC file.

The CSV is for people, pandas and RMM's replay; the Arrow file (`Trace.write_arrow`) holds the same
events by column and reads back some ten times faster (`devmem replay TEST[REGIME].arrow`). It is
written only for traces of ARROW_FROM events or more, where pyarrow is installed: a short trace
reads quickly either way. Both are written atomically but not synced to disk (`write_atomic`'s
`durable=False`): the next run writes them again, and a sync per file cost a suite of 206 short
tests 1 to 4 s of its 25 s.
"""

from __future__ import annotations

from pathlib import Path

from ..files import write_atomic
from ..model.trace import BY_COLUMN_FROM, Trace, arrow_file

ARROW_FROM = BY_COLUMN_FROM
"""A trace of this many events or more also gets an Arrow IPC file beside its CSV."""


def write_trace_files(trace: Trace, csv_path: Path) -> Path | None:
    """Write `trace` to `csv_path`, and for a long trace (where pyarrow is installed) to the same
        name with `.arrow`, which it returns; an Arrow file an earlier run left there is removed where this
    run writes none. OSError (naming the file) where either cannot be written or removed."""
    write_atomic(csv_path, trace.csv_text(), durable=False)  # what `Trace.write_csv` writes
    arrow_path = csv_path.with_suffix(".arrow")
    if len(trace) >= ARROW_FROM:
        if arrow_file.available():  # what `Trace.write_arrow` writes
            write_atomic(arrow_path, memoryview(arrow_file.arrow_bytes(trace)), durable=False)  # type: ignore[arg-type]
            return arrow_path
    arrow_path.unlink(missing_ok=True)  # an earlier run's, which would replay as this one's
    return None
