"""Several JSON reports of one suite (CI shards: each job runs part of the suite and writes its own
report) made one report, so that the verdict and the baseline refresh come from the whole suite
exactly as one unsplit run would give them. No pytest here.

Reports merge only when they measured the same way: one report format version, one device class,
one session regime (`--devmem-mode`/`--devmem-fraction`, or none), shards of one split (never a
2-group split's with a 3-group split's). Reports of different commits, CI runs or versions of the
packages that measure merge with a warning (refused with `same_run`). A test (test id, regime,
device class) found twice, in one report or in two, must have the same figures each time, and is
then kept once; different figures are an error that names the test and the reports. A test that no
report holds is simply absent, which `devmem compare` calls "missing", never a regression. The
result does not depend on the order the reports are named in: they are taken in path order.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from ..errors import InputError
from ..gate.targets import TargetTable
from ..gate.tolerance import METRICS, format_metrics_apart
from ..model.pool.policy import canonical_label
from .report import FORMAT, ReportFile
from .report import read_report as read_checked


def read_report(path: Path) -> ReportFile:
    """A JSON report read by the one report reader (its FileFormatError), every record naming its
    test, regime and device class (what a merge matches records by); InputError otherwise."""
    checked = read_checked(path)
    for index, record in enumerate(checked.records):
        if not all(isinstance(record.get(name), str) for name in ("test_id", "regime", "device_class")):
            raise InputError(f"{path}: record {index} lacks test_id, regime or device_class (as text)")
    return checked


def session_regime(report: ReportFile) -> str | None:
    regime = report.session.get("regime")
    return canonical_label(regime) if isinstance(regime, str) else None


Key = tuple[str, str, str]


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
    found["oom"] = oom_kind(record)
    return found


def oom_kind(record: dict[str, object]) -> str | None:
    """How a report's record ran out of memory: its kind, `real` (the framework's own error, as a
    version 1 report's `true` says too), `yes` (an older record's, of no kind), or None."""
    oom = record.get("oom")
    if isinstance(oom, dict):
        return str(oom.get("kind") or ("real" if oom.get("real") else "yes"))
    return "real" if oom is True else None


def _difference(first: dict[str, object], second: dict[str, object]) -> str:
    """The first figure that differs, for people: `peak_bytes_in_use 8.00 MiB and 9.00 MiB`."""
    for name in sorted(set(first) | set(second)):
        a, b = first.get(name), second.get(name)
        if a != b:
            metric = name.split(" on ")[0]
            if metric in METRICS:
                shown = list(format_metrics_apart(metric, a, b))  # type: ignore[arg-type]
            else:
                shown = [str(a), str(b)]
            return f"{name} {shown[0]} and {shown[1]}"
    return "the same figures"


def unique_records(report: ReportFile) -> dict[Key, dict[str, object]]:
    """A report's records by (test id, regime, device class). A test held twice with the same
    figures is kept once; with different figures, which copy counts cannot be told (the verdict
    would depend on the order of the records), so it is a InputError naming the test. `devmem
    compare`, `merge` and `history` read a report's records through this one rule."""
    found: dict[Key, dict[str, object]] = {}
    for record in report.records:
        key = (
            str(record["test_id"]),
            canonical_label(str(record.get("regime") or "prealloc")),
            str(record.get("device_class") or ""),
        )
        known = found.setdefault(key, record)
        if known is not record and figures(known) != figures(record):
            raise InputError(
                f"{report.path}: test {key[0]!r} [{key[1]}] on {key[2]} is in the report twice, with different figures "
                f"({_difference(figures(known), figures(record))}): which one counts cannot be told; a report holds each test once "
                "(a rerun plugin ran it twice, or two reports were joined by hand? merge reports with devmem merge)"
            )
    return found


def shards_of(report: ReportFile) -> list[dict[str, object] | None]:
    """The shard each part of a report ran (`None`: a whole run): its own, or a merged report's parts'.
    InputError for a shard that cannot be true: group K of N is 1 <= K <= N, N >= 2, each K once."""
    merged = report.session.get("merged_from")
    parts = (
        [part.get("shard") if isinstance(part, dict) else None for part in merged]
        if isinstance(merged, list)
        else [report.session.get("shard")]
    )
    seen: list[object] = []
    for shard in parts:
        if shard is None:
            continue
        group, groups = (shard.get("group"), shard.get("groups")) if isinstance(shard, dict) else (None, None)
        twice = type(group) is int and group in seen
        if type(group) is not int or type(groups) is not int or not 1 <= group <= groups or groups < 2 or twice:
            shown = f"group {str(group)[:20]} of {str(groups)[:20]}" + (" twice" if twice else "")
            raise InputError(
                f"{report.path}: its shard is {shown}: a shard is group K of N, 1 <= K <= N, N >= 2, "
                "each group once (pytest-split's --group K --splits N); check the shard's report"
            )
        seen.append(group)
    return parts  # type: ignore[return-value]  # each a shard object or None


def _split(shard: dict[str, object]) -> str:
    return f"{str(shard.get('groups'))[:40]} groups ({str(shard.get('plugin'))[:60]})"


def missing_shards(report: ReportFile) -> str | None:
    """What is missing when a report is part of a split suite without all its groups (a shard
    compared alone would call the other groups' tests "missing" and pass), else None."""
    parts = shards_of(report)
    shards = [shard for shard in parts if shard is not None]
    if not shards or len(shards) < len(parts):
        return None  # a whole run is part of it
    total = shards[0].get("groups")
    if isinstance(total, bool) or not isinstance(total, int) or total < 2:
        return None
    present = sorted({group for shard in shards if type(group := shard.get("group")) is int and 1 <= group <= total})
    count = total - len(present)
    if count == 0:
        return None
    missing = list(
        itertools.islice((group for group in range(1, total + 1) if group not in present), 10)
    )  # never a list of 10**18
    named = ", ".join(map(str, missing)) + (f" and {count - len(missing)} more" if count > len(missing) else "")
    held = (
        ", ".join(map(str, present[:10])) + (f" and {len(present) - 10} more" if len(present) > 10 else "")
        if present
        else "none"
    )
    return (
        f"{report.path} is {'group' if len(present) == 1 else 'groups'} {held} of {total} of a split suite ({str(shards[0].get('plugin'))[:60]}); "
        f"{'group' if count == 1 else 'groups'} {named} missing: compare every group's report together "
        "(devmem compare BASE s1.json s2.json ...), or say the set is partial with --partial"
    )


VERSIONS_THAT_MEASURE = ("pytest-devmem", "jax", "jaxlib", "tensorflow", "tensorflow-cpu")
"""Packages whose versions change the figures: shards measured with different ones are not one suite's."""


def _mixed(first: ReportFile, other: ReportFile) -> list[str]:
    """How two reports' runs differ (commit, work tree, CI run, versions that measure): each a
    warning, or with `same_run` a refusal."""
    said = []
    a, b = first.session, other.session
    if (a.get("commit"), a.get("dirty")) != (b.get("commit"), b.get("dirty")):
        shown = [f"{s.get('commit')}{' (dirty)' if s.get('dirty') else ''}" for s in (a, b)]
        said.append(f"{first.path} and {other.path} measured different commits ({shown[0]} and {shown[1]})")
    runs = [
        {str(shard.get("run"))[:80] for shard in shards_of(report) if shard is not None} for report in (first, other)
    ]
    if runs[0] and runs[1] and runs[0] != runs[1]:
        said.append(
            f"{first.path} and {other.path} come from different CI runs ({', '.join(sorted(runs[0]))} and {', '.join(sorted(runs[1]))})"
        )
    versions: list[dict[str, object]] = [v if isinstance(v := s.get("versions"), dict) else {} for s in (a, b)]
    changed = [
        f"{name} {versions[0].get(name)} and {versions[1].get(name)}"
        for name in VERSIONS_THAT_MEASURE
        if versions[0].get(name) != versions[1].get(name)
    ]
    if changed:
        said.append(f"{first.path} and {other.path} were measured with different versions: {', '.join(changed)}")
    return said


def _check_alike(reports: Sequence[ReportFile], same_run: bool = False) -> list[str]:
    """InputError for reports that cannot be one report (format version, device class, session
    regime, shards of different splits); the warnings for reports of different runs or versions,
    a InputError too with `same_run`."""
    first = reports[0]
    notes: list[str] = []
    shards = [(report, shard) for report in reports for shard in shards_of(report) if shard is not None]
    splits = {(str(shard.get("groups")), str(shard.get("plugin"))): (report, shard) for report, shard in shards}
    if len(splits) > 1:
        (one, shard_one), (two, shard_two) = list(splits.values())[:2]
        raise InputError(
            f"{one.path} is a shard of a split into {_split(shard_one)} and {two.path} of a split into {_split(shard_two)}: "
            "shards of different splits never make one suite; merge the reports of one split"
        )
    held = {shard["group"]: report for report, shard in shards}
    for report, shard in shards:
        if held[shard["group"]] is not report:  # a rerun's report stands for the job it reran: merge one
            raise InputError(
                f"{held[shard['group']].path} and {report.path} are both the shard group {shard['group']} of "
                f"{shard['groups']}: each group once (merge the report of one run of each shard's job)"
            )
    for other in reports[1:]:
        if other.version != first.version:
            raise InputError(
                f"{first.path} is a version {first.version} report and {other.path} a version {other.version} one: merge reports written by one pytest-devmem (rerun the older shards)"
            )
        classes = (first.session.get("device_class"), other.session.get("device_class"))
        if classes[0] != classes[1]:
            raise InputError(
                f"{first.path} measured on device class {classes[0]!r} and {other.path} on {classes[1]!r}: figures of different devices are never one report (run every shard with the same --devmem-device)"
            )
        if session_regime(other) != session_regime(first):
            shown = [regime or "none (marked tests only)" for regime in (session_regime(first), session_regime(other))]
            raise InputError(
                f"{first.path} ran under session regime {shown[0]} and {other.path} under {shown[1]}: run every shard with the same --devmem-mode and --devmem-fraction"
            )
        notes += _mixed(first, other)
    if notes and same_run:
        raise InputError("; ".join(notes) + ": --same-run asks for the shards of one run, measured alike")
    return notes


def merge_reports(paths: Sequence[Path], notes: list[str] | None = None, same_run: bool = False) -> dict[str, object]:
    """One report document from several (see the module's docstring); InputError when they cannot
    be one. What differs between their runs without stopping the merge is added to `notes`."""
    if not paths:
        raise InputError("no reports to merge")
    unique = sorted({str(path): path for path in paths}.items())
    reports = [read_report(path) for _, path in unique]
    said = _check_alike(reports, same_run)
    if notes is not None:
        notes += [f"{note}: their figures may not be one suite's (--same-run refuses such a merge)" for note in said]
    records: dict[Key, tuple[dict[str, object], Path]] = {}
    for report in reports:
        for key, record in unique_records(report).items():
            known = records.get(key)
            if known is None:
                records[key] = (record, report.path)
                continue
            before, where = known
            if figures(before) != figures(record):
                raise InputError(
                    f"test {key[0]!r} [{key[1]}] on {key[2]} was measured in {where} and in {report.path} with different figures "
                    f"({_difference(figures(before), figures(record))}): a test belongs to one shard; check the shard split (--splits/--group) and merge the reports of one run"
                )
    unrecorded: dict[tuple[str, str], dict[str, object]] = {}
    for report in reports:
        for entry in report.unrecorded:
            unrecorded.setdefault((str(entry["test_id"]), canonical_label(str(entry["regime"]))), entry)

    document: dict[str, object] = {
        "format": FORMAT,
        "version": reports[0].version,
        "session": merged_session(reports),
        "records": [records[key][0] for key in sorted(records)],
        "unrecorded": [unrecorded[key] for key in sorted(unrecorded)],
    }
    targets = merged_targets(reports)
    if targets is not None:
        document["targets"] = targets.to_json()
    return document


def merged_targets(reports: Sequence[ReportFile]) -> TargetTable | None:
    """The shards' targets tables (--devmem-targets) as one: the same targets in each, every row once,
    in the order one unsplit run gives them; None where no report has one."""
    tables = [(report.path, report.targets) for report in reports if report.targets is not None]
    if not tables:
        return None
    first_path, first = tables[0]
    names = [target.name for target in first.targets]
    for report in reports:
        theirs = [target.name for target in report.targets.targets] if report.targets is not None else None
        if theirs != names:
            shown = ", ".join(theirs) if theirs is not None else "no --devmem-targets"
            raise InputError(
                f"{first_path} ran on targets {', '.join(names)} and {report.path} on {shown}: run every shard with the same --devmem-targets"
            )
    merged = TargetTable(
        list(first.targets),
        [row for _, table in tables for row in table.results],
        sum(table.children for _, table in tables),
        "; ".join(sorted({table.skipped for _, table in tables if table.skipped})),
    )
    merged.sort()
    return merged


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
        parts.append(
            {
                "report": str(report.path),
                "records": len(report.records),
                "commit": report.session.get("commit"),
                "time": report.session.get("time"),
                "shard": report.session.get("shard"),
            }
        )
    session["merged_from"] = parts
    return session


def shard_run(session: dict[str, object]) -> tuple[str, ...] | None:
    """For a shard's report, what its sibling shards share (commit, work tree state, CI run, number
    of shards); None for a report of a whole run."""
    shard = session.get("shard")
    if not isinstance(shard, dict):
        return None
    return (
        str(session.get("commit")),
        str(session.get("dirty")),
        str(shard.get("run")),
        str(shard.get("groups")),
        str(shard.get("plugin")),
    )
