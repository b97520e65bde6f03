"""The baseline files read and checked, never believed before: one file (`read_file`), a directory
of them (`read_directory`), and where each test's file lies (`relative_path`). No pytest here. (The
store that writes them: baseline.py.)

A file that is not valid JSON, is cut short, or is not a pytest-devmem baseline raises
BaselineFormatError naming the file and line, and is never overwritten.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..compile_store import STORE_DIRECTORY, is_key
from ..errors import DevmemError, FileFormatError
from ..files import file_name, read_json
from ..model.buffers import lines_from_json, programs_from_json
from ..model.device import device_class_problem
from ..model.pool.policy import Policy, canonical_label
from ..model.profile import decode_profile
from .record import BaselineEntry, compiler_keys, requested_peak_only
from .tolerance import METRICS

FORMAT = "pytest-devmem-baseline"
VERSION = 2
"""2: `peak_bytes_in_use` is what the allocator counts (whole chunks), `peak_bytes_requested` beside it.
A version 1 file's `peak_bytes_in_use` was the requested bytes: read as `peak_bytes_requested`, with no
allocator's count (`record.requested_peak_only`)."""
READABLE_VERSIONS = (1, VERSION)


class BaselineFormatError(FileFormatError):
    """A baseline file that cannot be trusted; the message names the file, the line and the problem."""


def module_of(test_id: str) -> str:
    """The test module part of a node id (`tests/test_x.py` of `tests/test_x.py::Class::test[1]`)."""
    return test_id.split("::", 1)[0]


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
    """The `*.json` files under `directory`, sorted. Something that is not a regular file (a FIFO,
    which would hang a read; a dangling link or a link loop) is an error naming it, never a hang or a
    traceback, and so is a link to a directory, which is never followed (nor written through), and
    a directory named `*.json` that holds no baseline file, which stands where a baseline file
    belongs (a test module's tests would otherwise pass as "new" beside it). A directory named
    `*.json` that holds baseline files (a test package of that name) is searched like any other."""
    found = []
    for top, directories, files in os.walk(directory, onerror=_raise):
        directories[:] = [name for name in directories if name != STORE_DIRECTORY]  # the compilers' entries
        for name in sorted(directories):
            if os.path.islink(os.path.join(top, name)):
                raise BaselineFormatError(
                    f"{os.path.join(top, name)}: a link to a directory inside the baselines: pytest-devmem neither reads nor writes through one; put the directory itself there"
                )
            if name.endswith(".json") and not _holds_json(Path(top, name)):
                raise BaselineFormatError(
                    f"{os.path.join(top, name)}: a directory where a baseline file belongs: no verdict is given against it and "
                    "nothing is written over it; move it away or rename it"
                )
        for name in files:
            if not name.endswith(".json"):
                continue
            path = Path(top, name)
            try:
                mode = path.stat().st_mode  # follows a link to a file
            except OSError as exc:
                raise BaselineFormatError(
                    f"{path}: cannot be read ({exc.strerror or exc}): a dangling or looping link? remove it"
                ) from None
            if not stat.S_ISREG(mode):
                raise BaselineFormatError(
                    f"{path}: not a regular file (a FIFO, socket or device): remove it or give it another name"
                )
            found.append(path)
    return sorted(found)


def _holds_json(directory: Path) -> bool:
    """Whether any `*.json` file lies below `directory` (links not followed)."""
    return any(name.endswith(".json") for _, _, files in os.walk(directory, onerror=_raise) for name in files)


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
                raise BaselineFormatError(
                    f"{path} and {other} both hold the baseline of {entry.test_id!r} under regime {entry.regime}: keep one; {NEVER_OVERWRITTEN}"
                )
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
    if name == "fragmentation":
        return f"fragmentation is {value!r}: it lies between 0 and 1" if value > 1 else None
    if isinstance(value, float) and not value.is_integer():
        return f"{name} is {value!r}, not a whole number of bytes"
    return None


def regime_problem(label: str) -> str | None:
    """Why a stored regime label names no regime (`prealloc`, `fraction=0.5`, `growth(fraction=0.5)`...), or None."""
    try:
        Policy.from_label(label)
    except DevmemError as exc:
        return f"regime {label!r} names none: {exc}"
    return None


_Fail = Callable[..., BaselineFormatError]
"""Makes the error for a problem, at the line of its needle (the file's first line without one)."""


def read_file(path: Path, device_class: str | None = None) -> list[BaselineEntry]:
    """The entries of one baseline file; BaselineFormatError (file, line, problem) if it is not one."""
    text, document = load_json(path)

    def fail(problem: str, needle: str | None = None) -> BaselineFormatError:
        line = _line_of(text, needle) if needle else 1
        return BaselineFormatError(f"{path}:{line}: {problem}; {NEVER_OVERWRITTEN}")

    document, version = _checked_header(document, device_class, fail)
    records = document.get("records")
    if not isinstance(records, dict):
        raise fail('"records" must be an object of test ids', '"records"')
    entries = []
    for test_id, regimes in records.items():
        if not isinstance(regimes, dict):
            raise fail(f"record {test_id!r} must be an object of regimes", json.dumps(test_id))
        for stored_regime, data in regimes.items():
            problem = regime_problem(stored_regime)
            if problem:
                raise fail(f"record {test_id!r} {problem}", json.dumps(stored_regime))
            regime = canonical_label(stored_regime)  # an older file's "default" is prealloc
            if regime != stored_regime and regime in regimes:
                continue  # the record under its explicit name wins
            stored_class = str(document.get("device_class", ""))
            entries.append(_entry(path, stored_class, test_id, regime, stored_regime, data, version, fail))
    return entries


def _checked_header(document: object, device_class: str | None, fail: _Fail) -> tuple[dict[str, Any], int]:
    """A baseline file's `document` and its format version, checked with its format and device class."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise fail(f'not a pytest-devmem baseline (expected "format": "{FORMAT}")', '"format"')
    version = document.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise fail(
            f"baseline format version {version!r} is not supported (this pytest-devmem reads versions {', '.join(map(str, READABLE_VERSIONS))})",
            '"version"',
        )
    if "device_class" in document and (problem := device_class_problem(document["device_class"])):
        raise fail(problem, '"device_class"')
    if device_class is not None and document.get("device_class") != device_class:
        raise fail(
            f"holds device class {document.get('device_class')!r} but sits in the directory of {device_class!r}",
            '"device_class"',
        )
    return document, int(version)  # one of READABLE_VERSIONS


def _entry(
    path: Path,
    device_class: str,
    test_id: str,
    regime: str,
    stored_regime: str,
    data: object,
    version: int,
    fail: _Fail,
) -> BaselineEntry:
    """One record of the file at `path`, each part checked: its metrics, reason, versions,
    contributors, devices, profile, buffers, compiler entries and lines at the peak."""
    needle = json.dumps(test_id)
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise fail(f'record {test_id!r} regime {stored_regime!r} has no "metrics" object', needle)
    metrics = _figures(test_id, data["metrics"], fail, per_device=False)
    if version == 1:
        metrics = requested_peak_only(metrics)
    if device_class and (problem := device_class_problem(device_class, data.get("device"))):
        raise fail(f"record {test_id!r} {problem}", needle)
    reason = data.get("reason", "")
    if not isinstance(reason, str):
        raise fail(f'record {test_id!r} "reason" must be text', needle)
    if metrics.get("peak_bytes_in_use") is None and metrics.get("peak_bytes_requested") is None and not reason:
        raise fail(
            f'record {test_id!r} regime {stored_regime!r} has no peak_bytes_in_use figure and no "reason" why: '
            "a baseline without figures would let any change pass",
            needle,
        )
    versions = data.get("versions", {})
    if not isinstance(versions, dict):
        raise fail(f'record {test_id!r} "versions" must be an object', needle)
    contributors = data.get("contributors", {})
    if not isinstance(contributors, dict) or any(
        not isinstance(name, str) or figure_problem("bytes", size) or size is None
        for name, size in contributors.items()
    ):
        raise fail(f'record {test_id!r} "contributors" must map names to byte counts', needle)
    devices = data.get("devices", {})
    if not isinstance(devices, dict) or any(
        not isinstance(name, str) or not isinstance(figures, dict) for name, figures in devices.items()
    ):
        raise fail(f'record {test_id!r} "devices" must map device names to metrics', needle)
    for figures in devices.values():
        _figures(test_id, figures, fail, per_device=True)
    if version == 1:
        devices = {name: requested_peak_only(figures) for name, figures in devices.items()}
    profile = data.get("profile", {})
    if profile != {} and decode_profile(profile) is None:
        raise fail(f'record {test_id!r} "profile" must be {{"device", "events", "in_use": "event:bytes ..."}}', needle)
    try:
        buffers = programs_from_json(data.get("buffers", {}))
    except ValueError as exc:
        raise fail(f'record {test_id!r} "buffers": {exc}', needle) from None
    try:
        lines = lines_from_json(data.get("lines_at_peak", {}))
    except ValueError as exc:
        raise fail(f'record {test_id!r} "lines_at_peak": {exc}', needle) from None
    named = data.get("compiler_entries", [])
    if not isinstance(named, list) or not all(is_key(key) for key in named):
        raise fail(
            f'record {test_id!r} "compiler_entries" must be a list of cache keys (64 lower-case hex digits)',
            '"compiler_entries"',
        )
    return BaselineEntry(
        test_id,
        regime,
        dict(metrics),
        str(data.get("device", "")),
        dict(versions),
        path,
        device_class,
        reason,
        dict(contributors),
        {str(k): dict(v) for k, v in devices.items()},
        dict(profile),
        buffers,
        tuple(compiler_keys(named)),
        lines,
    )


def _figures(test_id: str, figures: dict[str, Any], fail: _Fail, *, per_device: bool) -> dict[str, Any]:
    """A record's `figures` (metric name: value; a device's with `per_device`), each a known metric
    and a figure a baseline may hold."""
    for name, value in figures.items():
        if name not in METRICS and not per_device:
            raise fail(f"record {test_id!r} has unknown metric {name!r}; known: {', '.join(METRICS)}", json.dumps(name))
        problem = figure_problem(name, value) if name in METRICS else f"unknown metric {name!r}"
        if problem:
            raise fail(f"record {test_id!r} {'device metric' if per_device else 'metric'} {problem}", json.dumps(name))
    return figures


def _line_of(text: str, needle: str) -> int:
    index = text.find(needle)
    return text.count("\n", 0, index) + 1 if index >= 0 else 1
