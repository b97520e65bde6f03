"""What `--devmem-update` stores, from a session's records: one rule for the plugin and for
`devmem merge --baselines` (a refresh from CI shards' reports without running the tests again),
so both write the same files, byte for byte. No pytest here.

A passed test with figures is stored; a test that did not pass, or was skipped at setup, is stored
as an entry without figures that says why (unless figures are stored for it already, which are
kept). Each file holds records sorted by test id and regime, and nothing that depends on the order
tests ran in or on the time: shards written one after another, in any order, give the same files
as one unsplit update.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .baseline import BaselineStore
from .record import TestRecord

Unrecorded = dict[tuple[str, str], tuple[str, str]]
"""(test id, regime) -> (device, why it has no figures)."""


def refresh_baselines(
    store: BaselineStore, records: Iterable[TestRecord], versions: dict[str, str], unrecorded: Unrecorded
) -> tuple[list[Path], list[str]]:
    """Store the session's measurements in `store`: the files written, and a line per file that could not be."""
    records = list(records)
    keep = [r for r in records if r.outcome == "passed" and r.peak_bytes_in_use is not None]
    reasons = dict(unrecorded)
    for record in records:
        if record.outcome != "passed":
            reasons[(record.test_id, record.regime)] = (
                record.device,
                f"{record.outcome} when the baselines were updated",
            )
    return store.write(keep, versions, reasons)
