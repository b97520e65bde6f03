"""Rendering records: the terminal table, and report files in JSON, CSV or Markdown by extension."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FileFormatError
from ..files import read_json
from ..gate.baseline_files import figure_problem, regime_problem
from ..gate.record import OUTCOMES, TestRecord, requested_peak_only
from ..gate.targets import TargetTable
from ..gate.tolerance import METRICS, parse_tolerance
from ..json_fields import mappings, number, whole
from ..model.device import device_class_problem
from ..model.explain import oom_summary
from ..spreadsheet import csv_table
from ..units import format_size
from .targets import aligned, csv_cells, csv_header, markdown_section
from .text import markdown, markdown_rows, terminal

REPORT_FORMATS = (".json", ".csv", ".md")
FORMAT = "pytest-devmem-report"
VERSION = 3
"""A JSON report's `format` and `version` (docs/report.schema.json). Fields are added, never removed;
version 2 made `oom` an object (which allocation, where, of what kind) where version 1 said yes or no;
version 3 made `peak_bytes_in_use` what the allocator counts (whole chunks), with the live data's peak
beside it as `peak_bytes_requested`: an older report's peak is read as the latter (`read_report`)."""
READABLE_VERSIONS = (1, 2, 3)
"""Report versions this pytest-devmem reads."""
COLUMNS = ("test", "regime", "peak in use", "peak reserved", "fragmentation", "oom", "outcome", "allocators")
"""`allocators`: whose allocations the trace holds (jax, tensorflow, pool). `sources` keeps one meaning
everywhere, the JSON record's and the CSV column's: the raw sources that measured (NVML, counters)."""


def _size(value: int | None) -> str:
    return "n/a" if value is None else format_size(value)


def _fraction(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def allocators(record: TestRecord) -> list[str]:
    """Whose allocations the test's trace holds (jax, tensorflow, pool), sorted."""
    return sorted(record.trace.by_source or {}) if record.trace is not None else []


def _fragmentation(record: TestRecord) -> str:
    """At the peak, and its worst over the test where that was markedly higher."""
    text = _fraction(record.fragmentation)
    worst = record.worst_fragmentation
    if worst is not None and worst >= (record.fragmentation or 0.0) + 0.01:
        text += f" (worst {worst:.3f})"
    return text


HOST_TENSORFLOW = "tensorflow (its CPU allocator, on the host)"
"""TensorFlow's allocator under a TPU preset, as the tables name it: no TPU compile sizes its
tensors, which stay on the host (model/tpu_devices.py), so its figures are never a chip's."""


def _allocator_names(record: TestRecord, names: Iterable[str]) -> list[str]:
    """`names` as a table shows them: under a TPU preset TensorFlow's is said to be its CPU allocator."""
    if record.tpu is None:
        return list(names)
    return [HOST_TENSORFLOW if name == "tensorflow" else name for name in names]


def _saw_memory(record: TestRecord) -> str:
    """Whose allocations the test's trace holds (jax, tensorflow, pool), or why there are none."""
    names = allocators(record)
    if names:
        return ", ".join(_allocator_names(record, names))
    return "not traced" if record.trace is None or record.trace.events is None else "none"


def _peak(record: TestRecord) -> str:
    """The headline peak in use, with its device where there are several, and, under a TPU preset,
    said to be the host's where it is no chip's (TensorFlow's CPU figures)."""
    peak = _size(record.peak_bytes_in_use)
    host = record.host_peak
    if record.device_count > 1:
        peak += f" (max of {record.device_count} devices: {record.peak_device}{', the host' if host else ''})"
    elif host:
        peak += f" ({record.peak_device}: the host's, not a chip's)"
    return peak


def table_rows(records: Iterable[TestRecord], per_device: bool = True) -> list[tuple[str, ...]]:
    """One row of human-readable cells per record, in COLUMNS order; a test on several devices shows
    its headline (`max of N devices: gpu:k`) and, with `per_device`, a row per device under it."""
    rows: list[tuple[str, ...]] = []
    for r in records:
        rows.append(
            (
                r.test_id,
                r.regime,
                _peak(r),
                _size(r.peak_bytes_reserved),
                _fragmentation(r),
                oom_summary(r.oom),
                r.outcome,
                _saw_memory(r),
            )
        )
        if per_device and r.device_count > 1:
            for device in r.devices or []:
                rows.append(
                    (
                        f"  {device.get('device')}",
                        "",
                        _size(whole(device, "peak_bytes_in_use")),
                        _size(whole(device, "peak_bytes_reserved")),
                        _fraction(number(device, "fragmentation")),
                        "",
                        "",
                        ", ".join(
                            _allocator_names(
                                r,
                                (str(a.get("allocator")) for a in mappings(device, "allocators") or []),
                            )
                        ),
                    )
                )
    return rows


SUMMARY_ROWS = 20
"""Rows the terminal summary shows without -v: enough for a reviewer, not a 500-row wall."""


def rows_for_review(records: Sequence[TestRecord], everything: bool) -> tuple[list[TestRecord], int]:
    """The records a reviewer needs first (those pytest-devmem failed, regressed or improved against
    their baselines, then the largest), and how many more there are. All of them with `everything`."""
    if everything or len(records) <= SUMMARY_ROWS:
        return list(records), 0

    def notable(record: TestRecord) -> bool:
        status = (record.baseline or {}).get("status")
        return record.failed_by_devmem or record.out_of_memory or status in ("regressed", "improved")

    first = [r for r in records if notable(r)]
    rest = sorted((r for r in records if not notable(r)), key=lambda r: -(r.peak_bytes_in_use or 0))
    shown = (first + rest)[: max(SUMMARY_ROWS, len(first))]
    return sorted(shown, key=lambda r: r.test_id), len(records) - len(shown)


def capped(items: Sequence[str], everything: bool, limit: int = 10, separator: str = ", ") -> str:
    """`a, b, c` for a few items; the first `limit` and how many more otherwise."""
    if everything or len(items) <= limit:
        return separator.join(items)
    return separator.join(items[:limit]) + f"{separator}and {len(items) - limit} more (-v lists them all)"


def terminal_table(records: Sequence[TestRecord]) -> list[str]:
    """Aligned text lines for the terminal summary."""
    return aligned([COLUMNS, *(tuple(terminal(cell) for cell in row) for row in table_rows(records))])


def markdown_table(records: Sequence[TestRecord]) -> str:
    return "\n".join(markdown_rows(COLUMNS, table_rows(records))) + "\n"


def csv_text(records: Sequence[TestRecord], targets: TargetTable | None = None) -> str:
    """One line per record with raw numbers (bytes, not human units) for spreadsheets and pandas.
    `sources`: the raw sources that measured, as the JSON record's `sources`; `allocators`: whose
    allocations the trace holds, as the terminal table's column. Columns are added at the end: with
    --devmem-targets, each target's status, figures and compile (`sim:T4 peak_bytes_in_use`, ...)."""
    extra = csv_header(targets.targets) if targets is not None else []
    header = ["test_id", "regime", "device", "device_class", "peak_bytes_in_use", "peak_bytes_reserved"]
    header += ["fragmentation", "oom", "outcome", "limit_bytes", "duration_s", "sources", "allocators"]
    header += ["peak_device", "devices", *extra]
    return csv_table(
        header,
        (
            (
                r.test_id,
                r.regime,
                r.device,
                r.device_class,
                r.peak_bytes_in_use,
                r.peak_bytes_reserved,
                None if r.fragmentation is None else f"{r.fragmentation:.6f}",
                oom_summary(r.oom) if r.oom else "",
                r.outcome,
                r.limit_bytes,
                f"{r.duration_s:.6f}",
                ";".join(r.measured_by),
                ";".join(allocators(r)),
                r.peak_device or "",
                r.device_count,
                *(csv_cells(targets, r.test_id, r.regime) if targets is not None else []),
            )
            for r in records
        ),
    )


def json_text(
    records: Sequence[TestRecord],
    session: dict[str, object],
    unrecorded: Sequence[dict[str, str]] = (),
    targets: TargetTable | None = None,
) -> str:
    """The JSON report. `unrecorded`: the measured tests skipped at setup ({test_id, regime, device,
    reason}), which a baseline refresh from reports (`devmem merge --baselines`) stores as
    `--devmem-update` does. `targets`: with --devmem-targets, every test on every target."""
    document: dict[str, object] = {
        "format": FORMAT,
        "version": VERSION,
        "session": session,
        "records": [r.to_json() for r in records],
        "unrecorded": list(unrecorded),
    }
    if targets is not None:
        document["targets"] = targets.to_json()
    return json.dumps(document, indent=2) + "\n"


def benchmark_json(records: Sequence[TestRecord]) -> str:
    """github-action-benchmark's `customSmallerIsBetter` input: one entry per measured test, its peak
    in bytes, so a repository gets hosted history charts and alerts from that action. A host's peak
    under a TPU preset is named as the host's, never a chip's."""
    host = "; the host's: TensorFlow's CPU allocator on the host, not a chip of "
    entries = [
        {
            "name": f"{r.test_id} [{r.regime}]" + (" (the host's)" if r.host_peak else ""),
            "unit": "bytes",
            "value": r.peak_bytes_in_use,
            "extra": f"peak reserved {_size(r.peak_bytes_reserved)}{host if r.host_peak else '; device '}{r.device}",
        }
        for r in records
        if r.peak_bytes_in_use is not None
    ]
    return json.dumps(entries, indent=2) + "\n"


def render(
    path: str | os.PathLike[str],
    records: Sequence[TestRecord],
    session: dict[str, object],
    unrecorded: Sequence[dict[str, str]] = (),
    targets: TargetTable | None = None,
) -> str:
    """The report text for `path`'s extension; ValueError for an extension not in REPORT_FORMATS."""
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        return json_text(records, session, unrecorded, targets)
    if suffix == ".csv":
        return csv_text(records, targets)
    if suffix == ".md":
        header = f"# Device memory report\n\nDevice: {markdown(str(session.get('device', 'n/a')))}. Measured tests: {len(records)}.\n\n"
        return header + markdown_table(records) + (markdown_section(targets) if targets is not None else "")
    raise ValueError(f"unknown report format {suffix or '(none)'!r} for {path}: use one of {', '.join(REPORT_FORMATS)}")


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFile:
    """A JSON report as read: its session and its records, each checked for what readers rely on;
    its format version and the tests it did not record (skipped at setup), checked alike."""

    path: Path
    session: dict[str, object]
    records: list[dict[str, object]]
    version: int = VERSION
    unrecorded: list[dict[str, object]] = field(default_factory=list)
    targets: TargetTable | None = None  # with --devmem-targets: every test on every target


UNRECORDED_RULE = '"unrecorded" must be a list of objects with test_id, regime, device and reason (as text)'


def read_report(path: str | os.PathLike[str]) -> ReportFile:
    """The one reader of JSON reports (`devmem compare`, `plot`, `history`): a regular file of UTF-8
    JSON with this format and a readable version, a session object and a list of records whose
    ids are text and whose figures are numbers of bytes (or a fraction) or null. FileFormatError
    naming the file, the line and the record otherwise."""
    text, document = read_json(path, "pytest-devmem JSON report")
    shown = os.fspath(path)
    if not isinstance(document, dict) or not isinstance(document.get("records"), list) or "session" not in document:
        raise FileFormatError(
            f'{shown}:1: not a pytest-devmem JSON report (--devmem-report=FILE.json): it needs "session" and a list of "records"'
        )
    if "format" in document and (document.get("format") != FORMAT or document.get("version") not in READABLE_VERSIONS):
        raise FileFormatError(
            f"{shown}: a {str(document.get('format'))[:60]!r} version {str(document.get('version'))[:20]!r} report; this devmem reads {FORMAT!r} versions {', '.join(map(str, READABLE_VERSIONS))}"
        )
    session = document["session"]
    if not isinstance(session, dict):
        raise FileFormatError(f'{shown}: "session" must be an object, not {type(session).__name__}')
    if "device_class" in session and (problem := device_class_problem(session["device_class"], session.get("device"))):
        raise FileFormatError(f"{shown}:{_line_of(text, json.dumps('device_class'))}: session: {problem}")
    if not isinstance(session.get("versions", {}), dict):
        raise FileFormatError(f'{shown}: "session"."versions" must be an object')
    records = document["records"]
    for index, record in enumerate(records):
        problem = _record_problem(record)
        if problem:
            test_id = record.get("test_id") if isinstance(record, dict) else None
            named = f" ({test_id[:200]!r})" if isinstance(test_id, str) else ""
            line = _line_of(text, json.dumps(test_id)) if isinstance(test_id, str) else 1
            raise FileFormatError(f"{shown}:{line}: record {index}{named}: {problem}")
    unrecorded = document.get("unrecorded", [])
    if not isinstance(unrecorded, list) or not all(
        isinstance(entry, dict)
        and all(isinstance(entry.get(name), str) for name in ("test_id", "regime", "device", "reason"))
        for entry in unrecorded
    ):
        raise FileFormatError(f"{shown}:{_line_of(text, json.dumps('unrecorded'))}: {UNRECORDED_RULE}")
    version = document.get("version", 1)
    if version != VERSION:  # its peak was the requested bytes: read as such, on the record and on each device
        records = [_requested_peak_only(record) for record in records]
    targets = None
    if document.get("targets") is not None:
        try:
            targets = TargetTable.from_json(document["targets"])
        except ValueError as exc:
            raise FileFormatError(f"{shown}:{_line_of(text, json.dumps('targets'))}: {exc}") from None
    return ReportFile(Path(path), session, records, version if version in READABLE_VERSIONS else 1, unrecorded, targets)


def _requested_peak_only(record: dict[str, object]) -> dict[str, object]:
    migrated = requested_peak_only(record)
    devices = migrated.get("devices")
    if isinstance(devices, list):
        migrated["devices"] = [requested_peak_only(d) if isinstance(d, dict) else d for d in devices]
    return migrated


def _record_problem(record: object) -> str | None:
    """Why a report's record cannot be read, or None."""
    if not isinstance(record, dict):
        return "not an object"
    if not isinstance(record.get("test_id"), str):
        return "test_id must be text"
    for name in ("regime", "device_class", "outcome"):
        if name in record and not isinstance(record[name], str):
            return f"{name} must be text"
    if "regime" in record and (problem := regime_problem(record["regime"])):
        return problem
    if "device_class" in record and (problem := device_class_problem(record["device_class"], record.get("device"))):
        return problem
    if record.get("outcome") not in (*OUTCOMES, "", None):  # (none in reports older than the field)
        return f"outcome is {record['outcome']!r}: one of {', '.join(map(repr, OUTCOMES))}"
    for name in METRICS:
        problem = figure_problem(name, record.get(name))
        if problem:
            return problem
    tolerance = record.get("tolerance")
    if tolerance is not None:
        if not isinstance(tolerance, str):
            return "\"tolerance\" must be text such as '10%,1MiB'"
        try:
            parse_tolerance(tolerance)
        except ValueError as exc:
            return f'"tolerance": {exc}'
    trace = record.get("trace")
    if trace is not None and (
        not isinstance(trace, dict)
        or not isinstance(trace.get("file", ""), str)
        or not isinstance(trace.get("at_peak", {}), dict)
    ):
        return '"trace" must be an object whose "file" is text and "at_peak" an object'
    devices = record.get("devices")
    if devices is not None:
        if not isinstance(devices, list) or not all(
            isinstance(d, dict) and isinstance(d.get("device"), str) for d in devices
        ):
            return '"devices" must be a list of objects that name their device'
        for device in devices:
            for name in METRICS:
                problem = figure_problem(name, device.get(name))
                if problem:
                    return f"device {device['device'][:40]!r}: {problem}"
        if problem := _headline_problem(record, devices):
            return problem
    if record.get("oom") is not None and not isinstance(record.get("oom"), (dict, bool)):
        return '"oom" must be an object, true, false or null'
    return None


def _headline_problem(record: dict[str, object], devices: list[dict[str, object]]) -> str | None:
    """Why a record's headline is not its peak device's figures (`TestRecord.from_run` takes them from
    that device), or None: a hand edit of one and not the other would gate on a figure no device had."""
    peak_device = record.get("peak_device")
    if peak_device is None or not devices:
        return None
    named = [str(d["device"]) for d in devices]
    if peak_device not in named:
        shown = repr(peak_device)[:60]
        return f'"peak_device" is {shown}: one of the record\'s devices ({", ".join(named[:8])})'
    device = devices[named.index(str(peak_device))]
    for name in METRICS:  # fragmentation included
        if record.get(name) is not None and device.get(name) is not None and record[name] != device[name]:
            return (
                f"{name} is {record[name]!r} where its peak device {peak_device!r} has {device[name]!r}: "
                "a record's headline figures are its peak device's"
            )
    return None


def _line_of(text: str, needle: str) -> int:
    index = text.find(needle)
    return text.count("\n", 0, index) + 1 if index >= 0 else 1
