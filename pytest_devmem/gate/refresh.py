"""What `--devmem-update` stores, from a session's records: one rule for the plugin and for
`devmem merge --baselines` (a refresh from CI shards' reports without running the tests again),
so both write the same files, byte for byte. No pytest here.

A test with figures is stored when it passed, or when the one check that failed it was the
baseline comparison (a regression, or no baseline under `--devmem-strict`): that is the change a
refresh accepts, and `--devmem-update` would not have failed it. A test that failed for any other
reason (its own assertion or error, out of memory, its limit, recompiles, a leak, fragmentation),
or was skipped at setup, is stored as an entry without figures that says why (unless figures are
stored for it already, which are kept), and the refresh names it as left out. Each file holds
records sorted by test id and regime, and nothing that depends on the order tests ran in or on the
time: shards written one after another, in any order, give the same files as one unsplit update.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .baseline import BaselineStore
from .record import TestRecord
from .verdicts import REFRESHABLE_CHECK

Unrecorded = dict[tuple[str, str], tuple[str, str]]
"""(test id, regime) -> (device, why it has no figures)."""


@dataclass
class Refresh:
    """What a refresh did: the files written, a line per file that could not be, and the tests whose
    figures it left out, with why (test id, regime, why)."""

    written: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    left_out: list[tuple[str, str, str]] = field(default_factory=list)


def stored_figures(record: TestRecord) -> bool:
    """Whether a refresh stores this record's figures: it has some, and it passed, or only its
    baseline comparison failed it."""
    if record.peak_bytes_in_use is None:
        return False
    return record.outcome == "passed" or (record.failed_by_devmem and record.failed_check == REFRESHABLE_CHECK)


def left_out_because(record: TestRecord) -> str:
    """Why a refresh keeps no figures of a record that did not pass."""
    if record.failed_by_devmem:
        if record.failed_check is None:
            return "failed pytest-devmem's checks, and its report does not say which (a report of an older version): run it again"
        return f"failed pytest-devmem's {record.failed_check} check, which a refresh does not accept"
    if record.outcome == "failed":
        also = f" (and pytest-devmem's {record.failed_check} check)" if record.failed_check else ""
        return f"failed by itself{also}, not for its memory alone"
    return record.outcome or "no outcome"


def refresh_baselines(
    store: BaselineStore, records: Iterable[TestRecord], versions: dict[str, str], unrecorded: Unrecorded
) -> Refresh:
    """Store the session's measurements in `store`: the files written, a line per file that could
    not be, and the tests left out."""
    records = list(records)
    keep = [r for r in records if stored_figures(r)]
    reasons = dict(unrecorded)
    left_out = []
    for record in records:
        if record.outcome != "passed" and not stored_figures(record):
            reasons[(record.test_id, record.regime)] = (
                record.device,
                f"{record.outcome} when the baselines were updated",
            )
            left_out.append((record.test_id, record.regime, left_out_because(record)))
    written, problems = store.write(keep, versions, reasons)
    return Refresh(written, problems, sorted(left_out))
