"""Several JSON reports of one suite (CI shards: each job runs part of the suite and writes its own
report) made one report, so that the verdict and the baseline refresh come from the whole suite
exactly as one unsplit run would give them. No pytest here.

Reports merge only when they measured the same way: one report format version, one device class,
one session regime (`--devmem-mode`/`--devmem-fraction`, or none). A test (test id, regime, device
class) found in two reports must have the same figures in both, and is then kept once; different
figures are an error that names both reports, since a test belongs to one shard. A test that no
report holds is simply absent, which `devmem compare` calls "missing", never a regression. The
result does not depend on the order the reports are named in: they are taken in path order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import DevmemError
from ..model.pool.policy import canonical_label
from ..gate.baseline import load_json
from ..gate.tolerance import METRICS, format_metric


class MergeError(DevmemError, ValueError):
    """Reports that cannot be one report; the message names the reports and what differs."""


@dataclass(frozen=True)
class ReportFile:
    """One JSON report as read: its path, version, session, records and unrecorded tests."""

    path: Path
    version: int
    session: dict[str, object]
    records: list[dict[str, object]]
    unrecorded: list[dict[str, object]]

    @property
    def regime(self) -> str | None:
        regime = self.session.get("regime")
        return canonical_label(regime) if isinstance(regime, str) else None


def read_report(path: Path) -> ReportFile:
    """A JSON report (`--devmem-report=FILE.json`) read by the one report reader, with what a merge
    needs beside: its version and its unrecorded tests; MergeError otherwise."""
    from .report import ReportFormatError
    from .report import read_report as read_checked

    try:
        checked = read_checked(path)
    except ReportFormatError as exc:
        raise MergeError(str(exc)) from None
    version = 1
    for index, record in enumerate(checked.records):
        if not all(isinstance(record.get(name), str) for name in ("test_id", "regime", "device_class")):
            raise MergeError(f"{path}: record {index} lacks test_id, regime or device_class (as text)")
    _, document = load_json(path)  # already read and checked above: cheap, and it holds the version and unrecorded
    if isinstance(document, dict) and isinstance(document.get("version"), int):
        version = int(document["version"])
    unrecorded = document.get("unrecorded", []) if isinstance(document, dict) else []
    if not isinstance(unrecorded, list) or not all(isinstance(entry, dict) and all(isinstance(entry.get(name), str) for name in ("test_id", "regime", "device", "reason")) for entry in unrecorded):
        raise MergeError(f"{path}: \"unrecorded\" must be a list of objects with test_id, regime, device and reason (as text)")
    return ReportFile(path, version, checked.session, checked.records, unrecorded)


Key = tuple[str, str, str]


def record_key(record: dict[str, object]) -> Key:
    return (str(record["test_id"]), canonical_label(str(record["regime"])), str(record["device_class"]))


def figures(record: dict[str, object]) -> dict[str, object]:
    """What a record measured, as compared between reports: the headline figures, each device's,
    and whether (and how) it ran out of memory."""
    found: dict[str, object] = {name: record.get(name) for name in METRICS}
    devices = record.get("devices")
    if isinstance(devices, list):
        for device in devices:
            if isinstance(device, dict):
                for name in METRICS:
                    found[f"{name} on {device.get('device')}"] = device.get(name)
    oom = record.get("oom")
    found["oom"] = (oom.get("kind") or ("real" if oom.get("real") else "yes")) if isinstance(oom, dict) else ("real" if oom is True else None)
    return found


def _difference(first: dict[str, object], second: dict[str, object]) -> str:
    """The first figure that differs, for people: `peak_bytes_in_use 8.00 MiB and 9.00 MiB`."""
    for name in sorted(set(first) | set(second)):
        a, b = first.get(name), second.get(name)
        if a != b:
            metric = name.split(" on ")[0]
            if metric in METRICS:
                shown = [("n/a" if value is None else format_metric(metric, value)) for value in (a, b)]  # type: ignore[arg-type]
            else:
                shown = [str(a), str(b)]
            return f"{name} {shown[0]} and {shown[1]}"
    return "the same figures"


def _check_alike(reports: Sequence[ReportFile]) -> None:
    first = reports[0]
    for other in reports[1:]:
        if other.version != first.version:
            raise MergeError(f"{first.path} is a version {first.version} report and {other.path} a version {other.version} one: merge reports written by one pytest-devmem (rerun the older shards)")
        classes = (first.session.get("device_class"), other.session.get("device_class"))
        if classes[0] != classes[1]:
            raise MergeError(f"{first.path} measured on device class {classes[0]!r} and {other.path} on {classes[1]!r}: figures of different devices are never one report (run every shard with the same --devmem-device)")
        if other.regime != first.regime:
            shown = [regime or "none (marked tests only)" for regime in (first.regime, other.regime)]
            raise MergeError(f"{first.path} ran under session regime {shown[0]} and {other.path} under {shown[1]}: run every shard with the same --devmem-mode and --devmem-fraction")


def _check_every_shard(reports: Sequence[ReportFile]) -> None:
    """Shards' reports name their part (`group` of `groups`): a part that is absent (its job crashed,
    its artifact was not uploaded) would make the merged suite look smaller, so it is refused here,
    and the gate needs no count of its own."""
    shards = [(report, report.session.get("shard")) for report in reports]
    parts = {(shard.get("groups"), shard.get("group")) for _, shard in shards if isinstance(shard, dict)}
    if not parts:
        return
    totals = {total for total, _ in parts}
    if len(totals) > 1 or not all(isinstance(total, int) and not isinstance(total, bool) for total in totals):
        raise MergeError(f"the shards' reports were split into different numbers of groups ({', '.join(sorted(map(str, totals)))}): merge the shards of one run")
    total = int(next(iter(totals)))  # type: ignore[arg-type]  # checked above: one int
    missing = sorted(set(range(1, total + 1)) - {group for _, group in parts})
    if missing:
        shown = ", ".join(str(group) for group in missing)
        raise MergeError(f"shard{'s' if len(missing) > 1 else ''} {shown} of {total} missing: only {len(parts)} of {total} shards' reports were given, so the merged report would not be the whole suite (did a shard's job fail before writing its report?)")


def merge_reports(paths: Sequence[Path]) -> dict[str, object]:
    """One report document from several (see the module's docstring); MergeError when they cannot be one."""
    if not paths:
        raise MergeError("no reports to merge")
    unique = sorted({str(path): path for path in paths}.items())
    reports = [read_report(path) for _, path in unique]
    _check_alike(reports)
    _check_every_shard(reports)
    records: dict[Key, tuple[dict[str, object], Path]] = {}
    for report in reports:
        own = {record_key(record): record for record in report.records}  # a test rerun in one session: its last run, as compare reads it
        for key, record in own.items():
            known = records.get(key)
            if known is None:
                records[key] = (record, report.path)
                continue
            before, where = known
            if figures(before) != figures(record):
                raise MergeError(
                    f"test {key[0]!r} [{key[1]}] on {key[2]} was measured in {where} and in {report.path} with different figures "
                    f"({_difference(figures(before), figures(record))}): a test belongs to one shard; check the shard split (--splits/--group) and merge the reports of one run"
                )
    unrecorded: dict[tuple[str, str], dict[str, object]] = {}
    for report in reports:
        for entry in report.unrecorded:
            unrecorded.setdefault((str(entry["test_id"]), canonical_label(str(entry["regime"]))), entry)
    from .report import FORMAT

    return {
        "format": FORMAT,
        "version": reports[0].version,
        "session": merged_session(reports),
        "records": [records[key][0] for key in sorted(records)],
        "unrecorded": [unrecorded[key] for key in sorted(unrecorded)],
    }


def merged_session(reports: Sequence[ReportFile]) -> dict[str, object]:
    """The first report's session (in path order), its time the latest of all, and `merged_from`:
    each report merged (a merged report's own list is taken over), with its commit, time and shard."""
    session = {key: value for key, value in reports[0].session.items() if key not in ("shard", "merged_from")}
    times = [str(report.session["time"]) for report in reports if isinstance(report.session.get("time"), str)]
    if times:
        session["time"] = max(times)
    parts: list[object] = []
    for report in reports:
        earlier = report.session.get("merged_from")
        if isinstance(earlier, list):
            parts += earlier
            continue
        parts.append({
            "report": str(report.path), "records": len(report.records), "commit": report.session.get("commit"),
            "time": report.session.get("time"), "shard": report.session.get("shard"),
        })
    session["merged_from"] = parts
    return session


def shard_run(session: dict[str, object]) -> tuple[str, ...] | None:
    """For a shard's report, what its sibling shards share (commit, work tree state, CI run, number
    of shards); None for a report of a whole run."""
    shard = session.get("shard")
    if not isinstance(shard, dict):
        return None
    return (str(session.get("commit")), str(session.get("dirty")), str(shard.get("run")), str(shard.get("groups")), str(shard.get("plugin")))
