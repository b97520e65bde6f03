"""Two sets of measurements (reports, baselines) set against each other: one verdict per test, with
the same rules as the gate in pytest (each test's own tolerance, out of memory never ok or
improved, every device's figures), so the pull-request table and the job agree. No pytest here."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..model.buffers import ProgramBuffers
from .changes import Comparison, compare
from .record import BaselineEntry, headline_peak
from .tolerance import parse_tolerance

Key = tuple[str, str, str]  # test id, regime, device class

FAILING = ("regressed", "out of memory")
"""Statuses that fail the gate (exit 1 from `devmem compare`)."""
ORDER = (
    "out of memory",
    "regressed",
    "improved",
    "ok",
    "unmeasured",
    "not measured",
    "new",
    "not baselined",
    "missing",
)
"""Statuses in the order a reviewer reads them."""


@dataclass(frozen=True)
class Measured:
    """One test's figures under one regime on one device class, from a report or a baseline."""

    metrics: dict[str, float | int | None]
    versions: dict[str, str] = field(default_factory=dict)
    reason: str = ""  # a baseline entry without figures: why (the test failed or was skipped at update)
    contributors: dict[str, int] = field(default_factory=dict)  # who held the memory at the peak
    devices: dict[str, dict[str, float | int | None]] = field(default_factory=dict)  # per device, on several
    oom: str | None = None  # it ran out of memory: the kind ("fragmentation"...), or "real"
    tolerance: str | None = None  # the test's own tolerance (its marker's), from a report
    buffers: dict[str, ProgramBuffers] = field(default_factory=dict)  # per program: the buffers at its peak
    lines: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # per holder at the peak: bytes by the line that made them

    @property
    def measured(self) -> bool:
        return headline_peak(self.metrics) is not None or self.oom is not None


@dataclass(frozen=True)
class TestVerdict:
    """The verdict on one test, and what it rests on."""

    __test__ = False

    key: Key
    status: str
    base: Measured | None
    new: Measured | None
    comparison: Comparison | None = None
    tolerance: str = ""

    @property
    def failing(self) -> bool:
        return self.status in FAILING


def verdicts(base: dict[Key, Measured], new: dict[Key, Measured], default_tolerance: str) -> list[TestVerdict]:
    """A verdict for every test in either set, in test order."""
    parse_tolerance(default_tolerance)
    result = []
    for key in sorted(set(base) | set(new)):
        before, now = base.get(key), new.get(key)
        spec = (now.tolerance if now is not None and now.tolerance else None) or default_tolerance
        if now is None:
            result.append(TestVerdict(key, "missing", before, None, tolerance=spec))
            continue
        if now.oom is not None:
            comparison = _compare(key, before, now, spec) if before is not None else None
            result.append(TestVerdict(key, "out of memory", before, now, comparison, spec))
            continue
        if not now.measured:
            result.append(TestVerdict(key, "not measured", before, now, tolerance=spec))
            continue
        if before is None:
            result.append(TestVerdict(key, "new", None, now, tolerance=spec))
            continue
        comparison = _compare(key, before, now, spec)
        result.append(TestVerdict(key, comparison.status, before, now, comparison, spec))
    return result


def _compare(key: Key, before: Measured, now: Measured, spec: str) -> Comparison:
    test_id, regime, _ = key
    entry = BaselineEntry(
        test_id,
        regime,
        before.metrics,
        "",
        before.versions,
        Path("BASE"),
        reason=before.reason,
        contributors=before.contributors,
        devices=before.devices,
        buffers=before.buffers,
        lines=before.lines,
    )
    return compare(
        entry,
        test_id,
        regime,
        now.metrics,
        parse_tolerance(spec),
        now.contributors,
        now.devices,
        out_of_memory=now.oom is not None,
        buffers=now.buffers,
        lines=now.lines,
    )


def counts(found: list[TestVerdict]) -> dict[str, int]:
    tally = Counter(verdict.status for verdict in found)
    return {status: tally[status] for status in ORDER if status in tally}
