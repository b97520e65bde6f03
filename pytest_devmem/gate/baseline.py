"""Stored per-test memory figures: the baselines' store, which writes them. No pytest here. (The files
read and checked: baseline_files.py; a record set against its entry: changes.py.)

Layout: `<root>/<device class>/<test module path>.json`, one file per test module, holding one record
per (test id, regime). Files are JSON with sorted keys and one key per line, so they diff well in
review. They are data only: nothing in them is executed. A damaged file is never overwritten.
Writes merge into what is stored under an exclusive lock on the directory and replace the file
atomically, so concurrent sessions lose nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..errors import InputError
from ..files import TEMPORARY_SUFFIX, ensure_directory, temporary_prefix, write_atomic
from ..model.device import device_class_problem
from ..model.profile import decode_profile
from .baseline_files import FORMAT, VERSION, BaselineFormatError, read_directory, read_file, relative_path
from .changes import buffers_at_peak_of, contributors_of, lines_of, metrics_of
from .record import BaselineEntry, TestRecord
from .tolerance import METRICS


class BaselineStore:
    """The baselines of one device class under `root`."""

    def __init__(self, root: Path, device_class: str) -> None:
        if problem := device_class_problem(device_class):  # a folder of the root, never a path beyond it
            raise InputError(f"{root}: {problem}")
        self.root = Path(root)
        self.device_class = device_class
        self.directory = self.root / device_class
        self._entries: dict[tuple[str, str], BaselineEntry] = {}

    def load(self) -> BaselineStore:
        """Read every baseline file of this device class; BaselineFormatError on the first bad one,
        and on a file that holds a test whose baseline belongs in another file (a stray copy)."""
        self._entries.clear()
        if self.directory.is_symlink():
            raise BaselineFormatError(
                f"{self.directory}: a link to a directory inside the baselines: pytest-devmem neither reads nor writes through one; put the directory itself there"
            )
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

    def write(
        self,
        records: Iterable[TestRecord],
        versions: dict[str, str],
        unrecorded: dict[tuple[str, str], tuple[str, str]] | None = None,
    ) -> tuple[list[Path], list[str]]:
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
        return self._each_file(by_file, lambda path: self._write_file(path, by_file[path], versions))

    def remove(self, keys: Iterable[tuple[str, str]]) -> tuple[list[Path], list[str]]:
        """Remove the entries of these (test id, regime) from their files (a file left with none is
        deleted): the files changed, and a line for each that could not be, as `write` says them."""
        by_file: dict[Path, set[tuple[str, str]]] = {}
        for test_id, regime in keys:
            by_file.setdefault(self.path_for(test_id), set()).add((test_id, regime))
        return self._each_file(by_file, lambda path: self._remove_from_file(path, by_file[path]))

    def _each_file(self, paths: Iterable[Path], change: Callable[[Path], bool]) -> tuple[list[Path], list[str]]:
        """`change` each file (True where it changed it), one file's failure never stopping the others:
        the files changed and a line for each that could not be; then the store is read again."""
        changed, problems = [], []
        for path in sorted(paths):
            try:
                done = change(path)
            except BaselineFormatError as exc:
                problems.append(str(exc))
            except OSError as exc:
                problems.append(f"{path}: {exc.strerror or exc}")
            else:
                if done:
                    changed.append(path)
        try:
            self.load()
        except (BaselineFormatError, OSError):
            pass  # reported above, or by the next session's load
        return changed, problems

    def _remove_from_file(self, path: Path, gone: set[tuple[str, str]]) -> bool:
        with _locked(path.parent):
            if not os.path.lexists(path):
                return False
            stored = {(e.test_id, e.regime): _entry_json(e) for e in read_file(path, self.device_class)}
            kept = {key: value for key, value in stored.items() if key not in gone}
            if len(kept) == len(stored):
                return False
            if kept:
                write_atomic(path, render_file(self.device_class, kept), within=self.root)
            else:
                path.unlink()
            return True

    def _write_file(
        self, path: Path, group: list[TestRecord | tuple[str, str, str, str]], versions: dict[str, str]
    ) -> bool:
        ensure_directory(path.parent, within=self.root)  # a linked directory in the way is refused, never followed
        with _locked(path.parent):
            for stale in path.parent.glob(temporary_prefix(path) + "*" + TEMPORARY_SUFFIX):
                stale.unlink(missing_ok=True)  # left by a writer that was killed: no writer holds the lock now
            stored = (
                {(e.test_id, e.regime): _entry_json(e) for e in read_file(path, self.device_class)}
                if os.path.lexists(path)
                else {}
            )
            for item in group:
                if isinstance(item, TestRecord):
                    key = (item.test_id, item.regime)
                    stored[key] = _record_json(item, stored.get(key), versions)
                    continue
                test_id, regime, device, reason = item
                known = stored.get((test_id, regime))
                if known is None or not any(value is not None for value in known["metrics"].values()):  # type: ignore[attr-defined]
                    stored[(test_id, regime)] = {
                        "device": device,
                        "metrics": {name: None for name in METRICS},
                        "reason": reason,
                        "versions": versions,
                    }
            write_atomic(path, render_file(self.device_class, stored), within=self.root)
        return True


def _record_json(record: TestRecord, earlier: dict[str, object] | None, versions: dict[str, str]) -> dict[str, object]:
    """What a baseline file stores of `record`, beside what it stored before (`earlier`)."""
    data: dict[str, object] = {"device": record.device, "metrics": metrics_of(record), "versions": versions}
    if contributors_of(record):
        data["contributors"] = contributors_of(record)
    if lines_of(record):
        data["lines_at_peak"] = lines_of(record)
    if record.compiler_entries:
        data["compiler_entries"] = sorted(record.compiler_entries)
    if record.device_metrics():
        data["devices"] = record.device_metrics()
    buffers = buffers_at_peak_of(record)
    if buffers:
        data["buffers"] = {name: program.to_json() for name, program in sorted(buffers.items())}
    profile: object = record.trace.profile if record.trace is not None else None
    if earlier is not None and earlier.get("profile") and earlier.get("metrics") == metrics_of(record):
        profile = earlier[
            "profile"
        ]  # the same figures: the profile stays (a tf.data pipeline's events vary from run to run)
    if decode_profile(profile) is not None:
        data["profile"] = profile
    return data


def _entry_json(entry: BaselineEntry) -> dict[str, object]:
    """A stored entry as its file holds it again: its optional fields only where they say something."""
    optional = {
        "reason": entry.reason,
        "contributors": entry.contributors,
        "lines_at_peak": entry.lines,
        "devices": entry.devices,
        "profile": entry.profile,
        "buffers": {name: program.to_json() for name, program in sorted(entry.buffers.items())},
        "compiler_entries": list(entry.compiler_entries),
    }
    required = {"device": entry.device, "metrics": entry.metrics, "versions": entry.versions}
    return {**required, **{name: value for name, value in optional.items() if value}}


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
        import fcntl  # POSIX only (Windows: filelock below)
    except ImportError:
        from filelock import FileLock

        with FileLock(str(directory / ".devmem-baselines.lock")):
            yield
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock
