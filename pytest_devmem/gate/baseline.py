"""Stored per-test memory figures and the comparison of a new measurement against them. No pytest here.

Layout: `<root>/<device class>/<test module path>.json`, one file per test module, holding one record
per (test id, regime). Files are JSON with sorted keys and one key per line, so they diff well in
review. They are data only: nothing in them is executed. A file that is not valid JSON, is cut
short, or is not a pytest-devmem baseline raises BaselineFormatError naming the file and line, and
is never overwritten. Writes merge into what is stored under an exclusive lock on the directory and
replace the file atomically, so concurrent sessions lose nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from ..model.pool.policy import canonical_label
from ..errors import FileFormatError
from ..files import TEMPORARY_SUFFIX, ensure_directory, file_name, read_json, temporary_prefix, write_atomic
from .record import TestRecord
from .tolerance import METRICS, Tolerance, format_metric
from ..units import format_size

FORMAT = "pytest-devmem-baseline"
VERSION = 1


class BaselineFormatError(FileFormatError):
    """A baseline file that cannot be trusted; the message names the file, the line and the problem."""


@dataclass(frozen=True)
class BaselineEntry:
    """One stored record: the metrics of one test under one regime on one device class."""

    test_id: str
    regime: str
    metrics: dict[str, float | int | None]
    device: str
    versions: dict[str, str]
    path: Path
    device_class: str = ""
    reason: str = ""  # why it holds no figures: the test failed or was skipped when baselines were updated
    contributors: dict[str, int] = field(default_factory=dict)  # who held the memory at the peak
    devices: dict[str, dict[str, float | int | None]] = field(default_factory=dict)  # per device, for tests on several


@dataclass(frozen=True)
class MetricChange:
    metric: str
    baseline: float | None
    now: float | None
    allowed: str
    verdict: str  # "regressed", "improved", "ok" or "unmeasured"
    device: str | None = None  # one device's figure, for a test on several; None: the headline

    @property
    def name(self) -> str:
        """`peak_bytes_in_use`, or `peak_bytes_in_use on cpu:2` for one device's figure."""
        return self.metric if self.device is None else f"{self.metric} on {self.device}"

    @property
    def delta(self) -> float | None:
        return None if self.baseline is None or self.now is None else self.now - self.baseline

    @property
    def percent(self) -> float | None:
        if self.delta is None or not self.baseline:
            return None
        return self.delta / self.baseline * 100

    @property
    def delta_text(self) -> str:
        """`+8.00 MiB (+100.0%)`, `-0.0500`, or `n/a`."""
        delta = self.delta
        if delta is None:
            return "n/a"
        percent = "" if self.percent is None else f" ({self.percent:+.1f}%)"
        return ("+" if delta >= 0 else "-") + format_metric(self.metric, abs(delta)) + percent

    def describe(self) -> str:
        show = format_metric
        return f"{self.name}: baseline {show(self.metric, self.baseline)}, now {show(self.metric, self.now)}, delta {self.delta_text}, allowed ±{self.allowed}"


@dataclass
class Comparison:
    """A record set against its baseline."""

    test_id: str
    regime: str
    status: str  # "new", "not baselined", "ok", "regressed", "improved", "unmeasured", "out of memory"
    changes: list[MetricChange] = field(default_factory=list)
    baseline_file: str | None = None
    reason: str = ""  # with "not baselined": why the stored entry holds no figures
    grew: list[tuple[str, int | None, int]] = field(default_factory=list)  # (who, bytes at the baseline's peak, now)

    def growth_text(self) -> str:
        """`jit(layer) temp 2.00 MiB -> 32.00 MiB, ...`: what held more at the peak than at the baseline's."""
        return ", ".join(f"{name} {format_size(before) if before is not None else '(none)'} → {format_size(now)}" for name, before, now in self.grew)

    def failure_message(self) -> str:
        broken = [change for change in self.changes if change.verdict == "regressed"]
        lines = [f"device memory regression against {self.baseline_file} (regime {self.regime}):"]
        lines += [f"  {change.describe()}" for change in broken]
        if self.grew:
            lines.append(f"  what grew at the peak: {self.growth_text()}")
        lines.append("  if the increase is intended, refresh the baseline with --devmem-update")
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        def change(c: MetricChange) -> dict[str, object]:
            return {"baseline": c.baseline, "now": c.now, "delta": c.delta, "percent": c.percent, "allowed": c.allowed, "verdict": c.verdict}

        devices: dict[str, dict[str, object]] = {}
        for c in self.changes:
            if c.device is not None:
                devices.setdefault(c.device, {})[c.metric] = change(c)
        return {
            "status": self.status,
            "file": self.baseline_file,
            **({"reason": self.reason} if self.reason else {}),
            **({"grew": [{"name": name, "baseline": before, "now": now} for name, before, now in self.grew]} if self.grew else {}),
            "metrics": {c.metric: change(c) for c in self.changes if c.device is None},
            **({"devices": devices} if devices else {}),
        }


def metrics_of(record: TestRecord) -> dict[str, float | int | None]:
    return {"peak_bytes_in_use": record.peak_bytes_in_use, "peak_bytes_reserved": record.peak_bytes_reserved, "fragmentation": record.fragmentation}


def compare(
    entry: BaselineEntry | None,
    test_id: str,
    regime: str,
    now: dict[str, float | int | None],
    tolerance: Tolerance,
    contributors: dict[str, int] | None = None,
    now_devices: dict[str, dict[str, float | int | None]] | None = None,
    *,
    out_of_memory: bool = False,
) -> Comparison:
    """Set `now` against `entry` under `tolerance`: each gated metric is ok, regressed or improved,
    on the headline and on each device both have figures for (a test on several devices). A test
    that ran out of memory is "out of memory" whatever its figures: never ok, never improved. With
    `contributors` (who held the memory at the peak now), a regression says what grew."""
    path = str(entry.path) if entry is not None else None
    if entry is None:
        return Comparison(test_id, regime, "out of memory" if out_of_memory else "new")
    if entry.reason and all(value is None for value in entry.metrics.values()):
        return Comparison(test_id, regime, "out of memory" if out_of_memory else "not baselined", baseline_file=path, reason=entry.reason)
    changes = _changes(entry.metrics, now, tolerance, None)
    for device, stored in sorted(entry.devices.items()):
        if now_devices and device in now_devices:
            changes += _changes(stored, now_devices[device], tolerance, device)
    verdicts = {change.verdict for change in changes}
    if out_of_memory:
        return Comparison(test_id, regime, "out of memory", changes, path)
    if "regressed" in verdicts:
        status = "regressed"
    elif "improved" in verdicts:
        status = "improved"
    elif verdicts <= {"unmeasured"}:
        status = "unmeasured"
    else:
        status = "ok"
    grew = what_grew(entry.contributors, contributors or {}) if status == "regressed" else []
    return Comparison(test_id, regime, status, changes, str(entry.path), grew=grew)


def _changes(stored: dict[str, float | int | None], now: dict[str, float | int | None], tolerance: Tolerance, device: str | None) -> list[MetricChange]:
    changes = []
    for metric, allowance in tolerance.allowances.items():
        baseline, current = stored.get(metric), now.get(metric)
        if baseline is None or current is None:
            changes.append(MetricChange(metric, baseline, current, allowance.describe(metric), "unmeasured", device))
            continue
        room = allowance.allowed(baseline)
        verdict = "regressed" if current - baseline > room else "improved" if baseline - current > room else "ok"
        changes.append(MetricChange(metric, baseline, current, allowance.describe(metric), verdict, device))
    return changes


def what_grew(before: dict[str, int], now: dict[str, int], top: int = 3) -> list[tuple[str, int | None, int]]:
    """The contributors at the peak that hold more now than at the baseline's peak, most growth first."""
    grown = [(name, before.get(name), size) for name, size in now.items() if size > before.get(name, 0)]
    grown.sort(key=lambda item: (-(item[2] - (item[1] or 0)), item[0]))
    return grown[:top]


def module_of(test_id: str) -> str:
    """The test module part of a node id (`tests/test_x.py` of `tests/test_x.py::Class::test[1]`)."""
    return test_id.split("::", 1)[0]


class BaselineStore:
    """The baselines of one device class under `root`."""

    def __init__(self, root: Path, device_class: str) -> None:
        self.root = Path(root)
        self.device_class = device_class
        self.directory = self.root / device_class
        self._entries: dict[tuple[str, str], BaselineEntry] = {}

    def load(self) -> BaselineStore:
        """Read every baseline file of this device class; BaselineFormatError on the first bad one,
        and on a file that holds a test whose baseline belongs in another file (a stray copy)."""
        self._entries.clear()
        if self.directory.is_symlink():
            raise BaselineFormatError(f"{self.directory}: a link to a directory inside the baselines: pytest-devmem neither reads nor writes through one; put the directory itself there")
        if self.directory.is_dir():
            for entry in read_directory(self.directory, self.device_class):
                self._entries[(entry.test_id, entry.regime)] = entry
        return self

    def get(self, test_id: str, regime: str) -> BaselineEntry | None:
        return self._entries.get((test_id, regime))

    def entries(self) -> list[BaselineEntry]:
        return [self._entries[key] for key in sorted(self._entries)]

    def path_for(self, test_id: str) -> Path:
        """`<directory>/<module path>.json` (see `relative_path`)."""
        return self.directory / relative_path(test_id)

    def write(self, records: Iterable[TestRecord], versions: dict[str, str], unrecorded: dict[tuple[str, str], tuple[str, str]] | None = None) -> tuple[list[Path], list[str]]:
        """Store these records, merged into what each file holds: the files written, and a line for
        each file that could not be (full disk, read-only mount, a damaged file it will not
        overwrite). One file's failure never stops the others.

        `unrecorded` maps (test id, regime) to (device, why it has no figures: it failed or was
        skipped): stored as an entry without figures, so a later comparison says why there is no
        baseline, unless a baseline with figures is already stored, which is kept.
        """
        by_file: dict[Path, list[TestRecord | tuple[str, str, str, str]]] = {}
        for record in records:
            by_file.setdefault(self.path_for(record.test_id), []).append(record)
        for (test_id, regime), (device, reason) in sorted((unrecorded or {}).items()):
            by_file.setdefault(self.path_for(test_id), []).append((test_id, regime, device, reason))
        written, problems = [], []
        for path, group in sorted(by_file.items()):
            try:
                self._write_file(path, group, versions)
            except BaselineFormatError as exc:
                problems.append(str(exc))
            except OSError as exc:
                problems.append(f"{path}: {exc.strerror or exc}")
            else:
                written.append(path)
        try:
            self.load()
        except (BaselineFormatError, OSError):
            pass  # reported above, or by the next session's load
        return written, problems

    def _write_file(self, path: Path, group: list[TestRecord | tuple[str, str, str, str]], versions: dict[str, str]) -> None:
        ensure_directory(path.parent, within=self.root)  # a linked directory in the way is refused, never followed
        with _locked(path.parent):
            for stale in path.parent.glob(temporary_prefix(path) + "*" + TEMPORARY_SUFFIX):
                stale.unlink(missing_ok=True)  # left by a writer that was killed: no writer holds the lock now
            stored = {(e.test_id, e.regime): _entry_json(e) for e in read_file(path, self.device_class)} if os.path.lexists(path) else {}
            for item in group:
                if isinstance(item, TestRecord):
                    stored[(item.test_id, item.regime)] = {"device": item.device, "metrics": metrics_of(item), "versions": versions}
                    if contributors_of(item):
                        stored[(item.test_id, item.regime)]["contributors"] = contributors_of(item)
                    if item.device_metrics():
                        stored[(item.test_id, item.regime)]["devices"] = item.device_metrics()
                    continue
                test_id, regime, device, reason = item
                known = stored.get((test_id, regime))
                if known is None or not any(value is not None for value in known["metrics"].values()):  # type: ignore[attr-defined]
                    stored[(test_id, regime)] = {"device": device, "metrics": {name: None for name in METRICS}, "reason": reason, "versions": versions}
            write_atomic(path, render_file(self.device_class, stored), within=self.root)


def _entry_json(entry: BaselineEntry) -> dict[str, object]:
    data: dict[str, object] = {"device": entry.device, "metrics": entry.metrics, "versions": entry.versions}
    if entry.reason:
        data["reason"] = entry.reason
    if entry.contributors:
        data["contributors"] = entry.contributors
    if entry.devices:
        data["devices"] = entry.devices
    return data


def contributors_of(record: TestRecord) -> dict[str, int]:
    """Who held the memory at the record's peak (from its replayed trace)."""
    at_peak = (record.trace or {}).get("at_peak")
    return {str(name): int(size) for name, size in at_peak.items()} if isinstance(at_peak, dict) else {}


def render_file(device_class: str, stored: dict[tuple[str, str], dict[str, object]]) -> str:
    records: dict[str, dict[str, object]] = {}
    for (test_id, regime), data in sorted(stored.items()):
        records.setdefault(test_id, {})[regime] = data
    document = {"format": FORMAT, "version": VERSION, "device_class": device_class, "records": records}
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory` itself (flock works on a directory's descriptor), held while a
    file in it is read, merged and replaced; it leaves no lock file behind in the user's tree.
    Where there is no fcntl (Windows), a lock file from filelock stands in."""
    try:
        import fcntl
    except ImportError:
        from filelock import FileLock  # type: ignore[import-not-found]

        with FileLock(str(directory / ".devmem-baselines.lock")):
            yield
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


NEVER_OVERWRITTEN = "fix or delete the file (it is never overwritten)"
LARGEST_FIGURE = 2**63
"""No byte count or fraction in a baseline or report is this large: a bigger number is damage."""


def relative_path(test_id: str) -> Path:
    """Where a test's baseline lives below its device class's directory: its module's path, each
    part made a file name by `file_name` (so `..`, a separator or an overlong part cannot leave the
    directory or meet another module's file), `.json` added; a test id without a module part gets
    `__outside_rootdir__.json`."""
    parts = [part for part in module_of(test_id).split("/") if part]
    if not parts:
        return Path("__outside_rootdir__.json")
    names = [file_name(part, keep_case=True) for part in parts]
    names[-1] = file_name(parts[-1], ".json", keep_case=True)
    return Path(*names)


def json_files(directory: Path) -> list[Path]:
    """The `*.json` files under `directory`, sorted. A directory that happens to be named `*.json`
    is searched like any other; something that is not a regular file (a FIFO, which would hang a
    read; a dangling link or a link loop) is an error naming it, never a hang or a traceback, and
    so is a link to a directory, which is never followed (nor written through)."""
    found = []
    for top, directories, files in os.walk(directory, onerror=_raise):
        for name in sorted(directories):
            if os.path.islink(os.path.join(top, name)):
                raise BaselineFormatError(f"{os.path.join(top, name)}: a link to a directory inside the baselines: pytest-devmem neither reads nor writes through one; put the directory itself there")
        for name in files:
            if not name.endswith(".json"):
                continue
            path = Path(top, name)
            try:
                mode = path.stat().st_mode  # follows a link to a file
            except OSError as exc:
                raise BaselineFormatError(f"{path}: cannot be read ({exc.strerror or exc}): a dangling or looping link? remove it") from None
            if not stat.S_ISREG(mode):
                raise BaselineFormatError(f"{path}: not a regular file (a FIFO, socket or device): remove it or give it another name")
            found.append(path)
    return sorted(found)


def _raise(error: OSError) -> None:
    raise BaselineFormatError(f"{error.filename}: cannot be read: {error.strerror or error}")


def read_directory(directory: Path, device_class: str | None = None) -> list[BaselineEntry]:
    """Every entry of the baseline files under `directory`: a device class's directory (with
    `device_class`), or for `devmem`, the baselines directory or any folder in it. Each file may
    hold only the tests whose baseline belongs there (a stray copy in a subfolder would otherwise
    stand in for the real one), and no test twice: BaselineFormatError naming the files."""
    entries: list[BaselineEntry] = []
    seen: dict[tuple[str, str, str], Path] = {}
    for path in json_files(directory):
        for entry in read_file(path, device_class):
            expected = directory / relative_path(entry.test_id) if device_class is not None else None
            if not _in_place(path, entry, expected):
                place = expected if expected is not None else Path(entry.device_class, relative_path(entry.test_id))
                raise BaselineFormatError(
                    f"{path}: holds the baseline of {entry.test_id!r}, whose place is {place}: a stray copy? "
                    f"move its records there or delete it; {NEVER_OVERWRITTEN}"
                )
            key = (entry.test_id, entry.regime, entry.device_class)
            other = seen.setdefault(key, path)
            if other != path and not _same_file(other, path):
                raise BaselineFormatError(f"{path} and {other} both hold the baseline of {entry.test_id!r} under regime {entry.regime}: keep one; {NEVER_OVERWRITTEN}")
            entries.append(entry)
    return entries


def _in_place(path: Path, entry: BaselineEntry, expected: Path | None) -> bool:
    """Whether `path` is where `entry`'s baseline belongs: `expected` exactly, or (without it) a
    path ending in `<device class>/<module path>.json`; on a case-insensitive file system, the same
    file under another spelling."""
    if expected is None:
        relative = Path(entry.device_class, relative_path(entry.test_id))
        count = len(relative.parts)
        if path.parts[-count:] == relative.parts:
            return True
        expected = Path(*path.parts[:-count], *relative.parts) if len(path.parts) > count else relative
    return path == expected or _same_file(path, expected)


def _same_file(first: Path, second: Path) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


def load_json(path: Path) -> tuple[str, object]:
    """The text of a baseline file and what it holds; BaselineFormatError naming the file, and the
    line where there is one, for anything that is not a regular file of UTF-8 JSON."""
    try:
        return read_json(path, "baseline file")
    except FileFormatError as exc:
        raise BaselineFormatError(f"{exc}; {NEVER_OVERWRITTEN}") from None


def figure_problem(name: str, value: object) -> str | None:
    """Why `value` cannot be a stored figure (a byte count, or a fraction for fragmentation), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} is {value!r}, not a number"
    if isinstance(value, int) and abs(value) >= LARGEST_FIGURE:
        return f"{name} is a {len(str(abs(value)))}-digit number, far beyond any device"
    if not math.isfinite(value):
        return f"{name} is {value!r}, not a finite number"
    if value < 0:
        return f"{name} is {value!r}: figures are never negative"
    if name == "fragmentation" and value > 1:
        return f"fragmentation is {value!r}: it lies between 0 and 1"
    return None


def read_file(path: Path, device_class: str | None = None) -> list[BaselineEntry]:
    """The entries of one baseline file; BaselineFormatError (file, line, problem) if it is not one."""
    text, document = load_json(path)

    def fail(problem: str, needle: str | None = None) -> BaselineFormatError:
        line = _line_of(text, needle) if needle else 1
        return BaselineFormatError(f"{path}:{line}: {problem}; {NEVER_OVERWRITTEN}")

    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise fail(f"not a pytest-devmem baseline (expected \"format\": \"{FORMAT}\")", '"format"')
    if document.get("version") != VERSION:
        raise fail(f"baseline format version {document.get('version')!r} is not supported (this pytest-devmem reads version {VERSION})", '"version"')
    if device_class is not None and document.get("device_class") != device_class:
        raise fail(f"holds device class {document.get('device_class')!r} but sits in the directory of {device_class!r}", '"device_class"')
    records = document.get("records")
    if not isinstance(records, dict):
        raise fail('"records" must be an object of test ids', '"records"')
    entries = []
    for test_id, regimes in records.items():
        if not isinstance(regimes, dict):
            raise fail(f"record {test_id!r} must be an object of regimes", json.dumps(test_id))
        for stored_regime, data in regimes.items():
            regime = canonical_label(stored_regime)  # an older file's "default" is prealloc
            if regime != stored_regime and regime in regimes:
                continue  # the record under its explicit name wins
            needle = json.dumps(test_id)
            if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
                raise fail(f"record {test_id!r} regime {stored_regime!r} has no \"metrics\" object", needle)
            metrics = data["metrics"]
            for name, value in metrics.items():
                if name not in METRICS:
                    raise fail(f"record {test_id!r} has unknown metric {name!r}; known: {', '.join(METRICS)}", json.dumps(name))
                problem = figure_problem(name, value)
                if problem:
                    raise fail(f"record {test_id!r} metric {problem}", json.dumps(name))
            reason = data.get("reason", "")
            if not isinstance(reason, str):
                raise fail(f"record {test_id!r} \"reason\" must be text", needle)
            if metrics.get("peak_bytes_in_use") is None and not reason:
                raise fail(
                    f"record {test_id!r} regime {stored_regime!r} has no peak_bytes_in_use figure and no \"reason\" why: "
                    "a baseline without figures would let any change pass",
                    needle,
                )
            versions = data.get("versions", {})
            if not isinstance(versions, dict):
                raise fail(f"record {test_id!r} \"versions\" must be an object", needle)
            contributors = data.get("contributors", {})
            if not isinstance(contributors, dict) or any(not isinstance(name, str) or figure_problem("bytes", size) or size is None for name, size in contributors.items()):
                raise fail(f"record {test_id!r} \"contributors\" must map names to byte counts", needle)
            devices = data.get("devices", {})
            if not isinstance(devices, dict) or any(not isinstance(name, str) or not isinstance(figures, dict) for name, figures in devices.items()):
                raise fail(f"record {test_id!r} \"devices\" must map device names to metrics", needle)
            for figures in devices.values():
                for name, value in figures.items():
                    problem = figure_problem(name, value) if name in METRICS else f"unknown metric {name!r}"
                    if problem:
                        raise fail(f"record {test_id!r} device metric {problem}", json.dumps(name))
            entries.append(BaselineEntry(test_id, regime, dict(metrics), str(data.get("device", "")), dict(versions), path, str(document.get("device_class", "")), reason, dict(contributors), {str(k): dict(v) for k, v in devices.items()}))
    return entries


def _line_of(text: str, needle: str) -> int:
    index = text.find(needle)
    return text.count("\n", 0, index) + 1 if index >= 0 else 1
