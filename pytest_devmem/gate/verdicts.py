"""The checks a measured test must pass beyond its own assertions, as pure functions: each takes
the test's record and returns the failure text, or None: out of memory and the baseline here, the
marker's own checks in `marks`. `plugin.checks` applies them in order. No pytest here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..model.buffers import SMALL_SHARE, ProgramBuffers, buffer_changes, describe_lines
from ..model.explain import oom_message
from ..units import format_size
from .baseline import BaselineStore
from .changes import buffers_of, compare, contributors_of, lines_of, metrics_of, program_of_temp
from .record import TestRecord
from .tolerance import Tolerance

CHECKS = ("out of memory", "limit", "compiles", "leak", "fragmentation", "baseline")
"""pytest-devmem's checks in the order they are applied; a record names the first that failed
(`TestRecord.failed_check`). Only "baseline" is one that `--devmem-update` would not fail: a
refresh stores the figures of a test it failed (gate/refresh.py), never those of the others."""
REFRESHABLE_CHECK = "baseline"


def oom_verdict(record: TestRecord) -> str | None:
    """The failure when the test ran out of memory: its trace did not fit the machine under its
    regime, or it raised a real out-of-memory error (on a GPU), with what the model says of it."""
    if not record.oom:
        return None
    text = oom_message(record.oom, record.devices, record.regime, record.device)
    label = str(record.oom.get("label", ""))
    asked = _inside(label, buffers_of(record), {}) if label else ""
    text += f"\n  the {label} it asked for: {asked}" if asked else ""
    return text + largest_at_peak(record, " before it ran out")


def largest_at_peak(record: TestRecord, when: str = "", top: int = 3) -> str:
    """`\n  largest at the peak: jit(step) temp 16.00 MiB: f32[4096,1024] tile at model.py:16 (16.00 MiB)`:
    who held most at the peak (each at least SMALL_SHARE of it), named down to the buffer or line as a
    regression names what grew."""
    held = sorted(contributors_of(record).items(), key=lambda item: (-item[1], item[0]))
    held = [item for item in held if item[1] >= SMALL_SHARE * sum(size for _, size in held)][:top]
    buffers, lines = buffers_of(record), lines_of(record)
    parts = [
        f"{name} {format_size(size)}" + (f": {inside}" if (inside := _inside(name, buffers, lines)) else "")
        for name, size in held
    ]
    return f"\n  largest at the peak{when}: {', '.join(parts)}" if parts else ""


def _inside(name: str, buffers: dict[str, ProgramBuffers], lines: dict[str, dict[str, int]]) -> str:
    """The largest buffers of a program's temp, else the lines that made a holder; "" where neither is known."""
    program = buffers.get(program_of_temp(name) or "")
    changes = buffer_changes(None, program) if program is not None else []
    changes = [change for change in changes if change.buffer.bytes >= SMALL_SHARE * changes[0].buffer.bytes]
    inside = "; ".join(f"{change.buffer.text()} ({format_size(change.buffer.bytes)})" for change in changes)
    return inside or describe_lines(None, lines.get(name))


def relative_to(path: str, rootdir: Path) -> str:
    """`path` from `rootdir`, in forward slashes, where it lies below it; else as it is."""
    try:
        return Path(path).relative_to(rootdir).as_posix()
    except ValueError:
        return path


def baseline_verdict(
    record: TestRecord,
    store: BaselineStore,
    tolerance: Tolerance,
    *,
    update: bool,
    strict: bool,
    rootdir: Path | None = None,
) -> str | None:
    """Compare a measured record with its baseline (kept in `record.baseline`); the failure text, or
    None where it may pass. Updating never fails; strict fails a test that has no baseline. The
    failure names the baseline file from `rootdir` where it lies below it (`baselines/sim-16GiB/...`),
    as a reviewer finds it in the repository; the record keeps the full path."""
    if record.peak_bytes_in_use is None:
        return None  # nothing measured this test: nothing to compare
    entry = store.get(record.test_id, record.regime)
    comparison = compare(
        entry,
        record.test_id,
        record.regime,
        metrics_of(record),
        tolerance,
        contributors_of(record),
        record.device_metrics(),
        out_of_memory=record.out_of_memory,
        buffers=buffers_of(record),
        lines=lines_of(record),
    )
    record.baseline = comparison.to_json()
    if update:
        return None
    if comparison.status == "regressed":
        if rootdir is not None and comparison.baseline_file is not None:
            return dataclasses.replace(
                comparison, baseline_file=relative_to(comparison.baseline_file, rootdir)
            ).failure_message()
        return comparison.failure_message()
    if comparison.status in ("new", "not baselined") and strict:
        why = f" ({comparison.reason})" if comparison.reason else ""
        return f"no baseline for {record.test_id} under regime {record.regime} on {store.device_class}{why} (--devmem-strict); record one with --devmem-update"
    if comparison.status == "unmeasured" and strict:  # nothing the tolerance gates could be compared
        missing = ", ".join(sorted({change.name for change in comparison.changes}))
        return f"nothing to compare for {record.test_id} under regime {record.regime}: {missing} missing from the baseline or the measurement (--devmem-strict); refresh the baseline with --devmem-update"
    return None
