"""The deviceless sizers' cache of compile results: per program for the session, and on disk.

A program's sizes are kept under a key made of what names it (the module's text as the target's
lowering has it, or what JAX lowered for its own devices with its jaxpr), the target, the compiler's
versions, XLA_FLAGS and the device count: another executable of the same module, in a later test,
compiles nothing; and on disk under that key, when given a folder: a rerun of an unchanged suite
compiles nothing. Entries are written atomically, so xdist workers sharing the folder never read half
of one. The entries stored beside the baselines (compile_store.py) are read last and never written
here. Imports no framework.

Each entry read back (pytest's cache, `--devmem-cache-dir`, beside the baselines) is checked before
it is believed (`read_entry`): a cache is a file anyone may have written: a hand edit, another
version, a disk that failed, a hostile checkout. An entry is believed only when it is a small regular
file (never a FIFO, which would hang the session, nor a device or a link to one, which would be read
without end) holding a JSON object whose every size is a whole number of bytes, not negative, not a
boolean and at most what one device of the target holds (units.byte_count_problem), whose device
count is the one the program was compiled for, which names what it sizes (its key, the target, an
array's shape and dtype), and whose sizes agree (`_disagreement`). Anything else is a miss: the program is compiled
again, the entry written anew, and the problem, naming the file, is warned about; a figure never
comes from it. A compile that states more than a device holds (a program that cannot run there) is
not written (`writable`), so that it is never a bad entry the next time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ...compile_store import CONTRADICTED, EXECUTABLE_FIELDS
from ...compile_store import read_entry as read_stored
from ...errors import FileFormatError
from ...files import read_json, write_atomic
from ...model.buffers import ProgramBuffers
from ...units import KiB, byte_count_problem
from . import internals
from .sizes import ExecutableSizes

__all__ = ["BUFFERS_FIELD", "CACHE_FORMAT", "BadEntry", "SizeCache", "cached_buffers", "read_entry", "writable"]

CACHE_FORMAT = 2
"""Bumped when what a disk-cache entry holds, or how its key is made, changes."""

_MODULE_NAME = re.compile(r"^module @[\w$.\-]+", re.MULTILINE)
"""The module's name (`module @jit_step`), the jit object's: left out of what names a program, which
is sized alike under any name."""

BUFFERS_FIELD = "buffers"
"""A cache entry's buffers at the program's peak (model/buffers.py's JSON); entries written before it have none."""
MAX_ENTRY_BYTES = 64 * KiB
"""An entry holds a few numbers (some 200 bytes): a larger file is not one, and is not read."""

UNCOUNTED_SCALARS = 64 * KiB
"""XLA:TPU leaves some scalars (a 512-byte tile each) out of a program's temp: a temp of 0 holds them."""
FINGERPRINT = "fingerprint"
"""An entry's own key: what it was compiled from (the program or array, compiler, target, flags)."""
DEVICES = "devices"
"""The field that counts the devices a program was compiled for: a count, not a size."""
_CACHED_FIELDS = EXECUTABLE_FIELDS  # the device count, then the sizes: the fields of the store's entries too
_CACHED_SIZES = tuple(name for name in EXECUTABLE_FIELDS if name != DEVICES)


class SizeCache:
    """The compile results of one target's sizer: found in the session, in the project's cache, the
    user's, or beside the baselines; written to the first two. The sizer (gpu_compile.py) names the
    target (`target`, `_target_text`) and its compiler's modules (`VERSION_MODULES`)."""

    target: str

    @property
    def VERSION_MODULES(self) -> tuple[str, ...]:  # noqa: N802 - the TPU sizer's is a class constant
        """Modules whose versions key the disk cache: a new compiler gives new sizes."""
        return ()

    def _start_cache(
        self,
        memory_per_device: int,
        cache_dir: str | os.PathLike[str] | None,
        user_cache_dir: str | os.PathLike[str] | None = None,
        store_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """The cache's state before its first entry. `cache_dir` is the project's (pytest's cache
        directory); `user_cache_dir` one beside it that the user keeps for all projects (as JAX's own
        persistent compilation cache is a directory the user names): read after the project's, and
        written with it, so that a fresh checkout compiles nothing the user's cache holds. `store_dir`:
        the entries stored beside the baselines (compile_store.py), read last and never written here
        (`--devmem-update` writes them, from the records). `memory_per_device`: an entry beyond it is
        never believed."""
        self.memory_per_device = memory_per_device
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.user_cache_dir = Path(user_cache_dir) if user_cache_dir is not None else None
        self.store_dir = Path(store_dir) if store_dir is not None else None
        self.user_cache_hits = 0  # of disk_hits (and arrays found on disk): found in the user's cache only
        self.store_hits = 0  # entries (executables and arrays) found beside the baselines only
        self._entries: dict[str, dict[str, Any]] = {}  # every entry this process read or wrote, by key
        self.disk_hits = 0
        self.session_hits = 0  # executables of a module compiled earlier in the session
        self._lock = threading.RLock()
        self._by_module: dict[str, ExecutableSizes] = {}  # the same computation jitted again (another test's closure)
        self._versions = ""
        self.cache_problems: list[str] = []  # disk-cache entries not believed, each naming its file
        self._read_from: dict[str, Path] = {}  # entries read, not compiled: the file each came from
        self.distrusted: set[str] = set()  # stored entries never read, but held to what the compiler says
        if self.store_dir is not None and self.store_dir.is_symlink():  # as the baselines: never read through a link
            self.cache_problems.append(
                f"{self.store_dir}: a link, whose entries are not read: put the directory itself there"
            )
            self.store_dir = None

    def _target_text(self) -> str:
        """The target as the disk cache's key names it."""
        raise NotImplementedError

    # -- keys ----------------------------------------------------------------------------------

    def _source_key(self, recipe: Any, devices: int) -> str | None:
        """The cache key of a program by what JAX lowered for its own devices and its jaxpr (which
        holds what a platform-dependent lowering would choose between); None where not known."""
        if not recipe.source:
            return None
        try:
            jaxpr = str(recipe.arguments.get("closed_jaxpr"))
        except Exception:
            return None
        return self._digest(devices, "source", recipe.source, jaxpr)

    def _digest(self, devices: int, *texts: str) -> str:
        digest = hashlib.sha256()
        for part in (
            str(CACHE_FORMAT),
            self._software_versions(),
            self._target_text(),
            os.environ.get("XLA_FLAGS", ""),
            str(devices),
            *texts,
        ):
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()

    def _cache_key(self, computation: Any, devices: int) -> str | None:
        try:
            text = internals.module_text(computation)
        except Exception:
            return None
        return self._digest(devices, "lowered", _MODULE_NAME.sub("module @program", text, count=1))

    def _software_versions(self) -> str:
        if not self._versions:
            self._versions = ";".join(f"{module}={self._version_of(module)}" for module in self.VERSION_MODULES)
        return self._versions

    def _version_of(self, module: str) -> str:
        """A module's `__version__`, or "?"."""
        try:
            return str(getattr(importlib.import_module(module), "__version__", "?"))
        except ImportError:
            return "?"

    # -- executables' entries ------------------------------------------------------------------

    def _read_cache(self, key: str | None, devices: int) -> ExecutableSizes | None:
        if key is not None and key in self._by_module:
            self.session_hits += 1
            return self._by_module[key]
        data = self._read_entry(key, _CACHED_SIZES, devices)
        if data is None or key is None:
            return None
        buffers = cached_buffers(data)  # checked by its own reader: a bad one keeps the sizes, saying why
        sizes = {name: data[name] for name in _CACHED_FIELDS}
        found = ExecutableSizes(
            target=self.target, compile_seconds=0.0, source="disk cache", key=key, **sizes, **buffers
        )
        self.disk_hits += 1
        # later in the session: the session's own cache
        self._by_module[key] = dataclasses.replace(found, source="cache")
        return found

    def _write_cache(self, key: str | None, sizes: ExecutableSizes) -> None:
        if key is not None:
            self._by_module[key] = dataclasses.replace(sizes, compile_seconds=0.0, source="cache")
        entry: dict[str, Any] = {name: getattr(sizes, name) for name in _CACHED_FIELDS}
        if sizes.buffers is not None:
            entry[BUFFERS_FIELD] = sizes.buffers.top().to_json()
        self._write_entry(key, entry)

    # -- entries on disk -------------------------------------------------------------------------

    def _cache_dirs(self) -> tuple[Path, ...]:
        """Where entries are kept: the project's cache first, then the user's."""
        return tuple(directory for directory in (self.cache_dir, self.user_cache_dir) if directory is not None)

    def _read_entry(
        self, key: str | None, sizes: tuple[str, ...], devices: int | None = None, least: int = 0, **about: Any
    ) -> dict[str, Any] | None:
        """The entry stored under `key`, checked (`read_entry`: `sizes` in bytes, with `devices`
        that device count, naming this key, target and `about`): the project's, else the user's, else the one beside the baselines
        (compile_store.py; either then copied into the project's, so that a CI job that keeps only
        the project's cache keeps it). None where none holds one that can be believed; each that
        cannot is in `cache_problems`."""
        if key is None or key in self.distrusted:
            return None
        places = (*self._cache_dirs(), *((self.store_dir,) if self.store_dir is not None else ()))
        for directory in places:
            try:
                data = read_entry(
                    directory / f"{key}.json",
                    sizes,
                    self.memory_per_device,
                    devices,
                    kept=(BUFFERS_FIELD,) if devices is not None else (),  # an executable's
                    about={**self._about(key), **about},
                    least=least,
                )
            except BadEntry as exc:
                self.cache_problems.append(f"{exc}; not believed: compiled again, and the entry written anew")
                continue
            if data is None:
                continue
            if directory is self.user_cache_dir or directory is self.store_dir:
                if directory is self.user_cache_dir:
                    self.user_cache_hits += 1
                else:
                    self.store_hits += 1
                if self.cache_dir is not None:
                    self._write_entry(key, data, only=self.cache_dir)
            self._entries[key] = data
            self._read_from[key] = directory / f"{key}.json"
            return data
        return None

    def _write_entry(self, key: str | None, entry: Mapping[str, Any], only: Path | None = None) -> None:
        """`entry` under `key` in each cache directory (or `only` that one), written atomically (xdist
        workers, and other projects' sessions in the user's cache, may share it)."""
        if key is not None and key in self.distrusted and only is None and self.store_dir is not None:
            self._verify(self.store_dir / f"{key}.json", entry)
        if key is None or not writable(entry, self.memory_per_device):
            return  # sizes beyond a device: compiled again each time, never a bad entry to warn about
        entry = {**entry, **self._about(key)}
        if only is None:
            self._entries[key] = dict(entry)
        text = json.dumps(dict(entry), sort_keys=True)
        for directory in (only,) if only is not None else self._cache_dirs():
            try:
                directory.mkdir(parents=True, exist_ok=True)
                # unsynced: an entry lost with the machine's power costs one compile, and a sync per
                # entry waits for the disk (files.write_atomic); readers never see half of one
                write_atomic(directory / f"{key}.json", text, durable=False)
            except OSError:
                pass  # a cache that cannot be written only costs a compile next time

    def _verify(self, path: Path, entry: Mapping[str, Any]) -> None:
        """A distrusted stored entry held to what the compiler said: a problem naming the file where they differ."""
        stored, why = read_stored(path)
        stored = {n: v for n, v in (stored or {}).items() if isinstance(v, int)}  # its figures (not frames' paths)
        said = [f"{n} {stored.get(n)!r} stored, {v!r} compiled" for n, v in entry.items() if stored.get(n, v) != v]
        if why or said:
            self.cache_problems.append(f"{path}: {CONTRADICTED}: {why or ', '.join(said)}")

    def _about(self, key: str) -> dict[str, str]:
        """What an entry says of itself: what it sizes and for which target, so that one moved or
        swapped to another key is a miss."""
        return {FINGERPRINT: key, "target": self.target}

    def entry_files(self, keys: Iterable[str]) -> list[Path]:
        """The files these entries were read from (not compiled), the largest sizes first."""
        with self._lock:
            read = {
                self._read_from[k]: max(v for v in self._entries[k].values() if isinstance(v, int))
                for k in keys
                if k in self._read_from
            }
        return sorted(read, key=lambda path: -read[path])

    def take_cache_problems(self) -> list[str]:
        """The disk-cache entries not believed since the last call, each naming its file."""
        problems = self.cache_problems[:]  # no lock: the TPU sizer's worker may be appending, and may hold one
        del self.cache_problems[: len(problems)]
        return problems

    def stored_entries(self, keys: Any, arrays: Any = ()) -> dict[str, dict[str, Any]]:
        """The entries (by key) behind these executables' sizes, as this process read or wrote them:
        what a test's record sends for the store beside the baselines. `arrays`: the (shape, dtype)
        of array shards the test sized (a TPU sizer's; none here)."""
        with self._lock:
            return {key: self._entries[key] for key in keys if key in self._entries}


def cached_buffers(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The `buffers` and `buffers_note` of ExecutableSizes from a cache entry, checked: an entry without
    them (an older one) or with bad ones keeps its sizes and says why it has no buffers."""
    stored = entry.get(BUFFERS_FIELD)
    if stored is None:
        return {
            "buffers_note": "sized from a cache entry written before buffers were kept: clear the cache to list them"
        }
    try:
        return {"buffers": ProgramBuffers.from_json(stored)}
    except ValueError as exc:
        return {"buffers_note": f"the cache entry's buffers are unreadable ({exc})"}


class BadEntry(Exception):
    """An entry that is there and cannot be believed; the message names the file and why."""


def read_entry(
    path: Path,
    sizes: Iterable[str],
    largest: int,
    devices: int | None = None,
    kept: Iterable[str] = (),
    about: Mapping[str, object] | None = None,
    least: int = 0,
) -> dict[str, object] | None:
    """The entry at `path`: its `sizes` (each a number of bytes from `least` to `largest`) and,
    with `devices`, its device count, which must be that; None where there is no file; BadEntry
    where there is one that is not such an entry, or whose `about` fields (what it sizes) differ.
    An executable's sizes must agree with each other and its buffers. The `kept` fields it must
    hold come back as they are, for their own reader to check (a program's buffers: model/buffers.py)."""
    if not os.path.lexists(path):
        return None
    try:
        _, data = read_json(path, "cache entry of compiled sizes", MAX_ENTRY_BYTES)
    except FileFormatError as exc:
        raise BadEntry(str(exc)) from None
    if not isinstance(data, dict):
        raise BadEntry(f"{path}: not a JSON object")
    entry: dict[str, object] = {name: data[name] for name in kept if name in data}
    for name in sizes:
        if name not in data:
            raise BadEntry(f"{path}: no {name!r}")
        problem = byte_count_problem(data[name], largest, "one device of the target")
        if problem is None and data[name] < least:
            problem = f"{data[name]} bytes, less than the array's {least} dense bytes: a chip never holds fewer"
        if problem is not None:
            raise BadEntry(f"{path}: {name!r}: {problem}")
        entry[name] = data[name]
    for name, value in (about or {}).items():
        if data.get(name) != value:
            raise BadEntry(f"{path}: {name!r} is {data.get(name)!r}, not {value!r}: another's entry, or an old one")
        entry[name] = value
    problem = _disagreement(entry)
    if problem is not None:
        raise BadEntry(f"{path}: {problem}")
    for name in kept:
        if entry.get(name) is None:  # its compile's dump could not be read then: compiled again, and kept
            raise BadEntry(f"{path}: no {name!r}")
    if devices is not None:
        count = data.get(DEVICES)
        if isinstance(count, bool) or not isinstance(count, int) or count != devices:
            raise BadEntry(f"{path}: {DEVICES!r} is {count!r}, where the program was compiled for {devices}")
        entry[DEVICES] = devices
    return entry


def _disagreement(entry: Mapping[str, Any]) -> str | None:
    """Why an executable's sizes cannot all be true together, or None: an aliased output reuses a
    donated argument (JAX's memory analysis counts it in both), and the buffers live at the peak
    in the device's memory lie in the temp allocation (but for a few scalars)."""
    alias, outputs, arguments = (entry.get(name, 0) for name in ("alias_bytes", "output_bytes", "argument_bytes"))
    if alias > min(outputs, arguments):
        return "'alias_bytes' is more than its outputs' or its arguments' bytes, which hold the aliased ones"
    buffers, temp = cached_buffers(entry).get("buffers"), entry.get("temp_bytes")
    if buffers is None or temp is None or buffers.peak_bytes <= temp + UNCOUNTED_SCALARS:
        return None
    return f"'temp_bytes' is {temp}, less than the {buffers.peak_bytes} bytes its buffers at the peak hold"


def writable(entry: Mapping[str, int], largest: int) -> bool:
    """Whether `entry` (sizes a compile stated) would pass read_entry's checks: only such is written.
    An executable's holds its buffers (an entry without is read as a miss)."""
    return (DEVICES not in entry or entry.get(BUFFERS_FIELD) is not None) and all(
        name == DEVICES or byte_count_problem(value, largest) is None
        for name, value in entry.items()
        if not isinstance(value, (dict, list, str))  # a kept field (buffers) or what it sizes: checked on reading
    )
