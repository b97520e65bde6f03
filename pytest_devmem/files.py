"""Files, treated as hostile both ways: the one name a test id gets on disk, the one way a file
given to pytest-devmem is opened, and the one way anything is written.

- `file_name(text)`: a test id (or any text) as one file name that stays in its directory, is the
  same on every OS, never shared by two texts (case-insensitive file systems included) and short.
- `open_regular(path)`: a regular file of bounded size, opened without ever blocking on a FIFO or
  a device; `read_json(path)` on top of it, with the file and line of anything malformed.
- `write_atomic(path, data)`: through a temporary file, fsync and a rename, under the user's umask,
  never through a symbolic link below the directory the user named; what a killed writer left
  behind is cleared by the next write to that directory. `durable=False` leaves out the syncs (the
  write stays atomic for readers) for outputs every run writes again.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import secrets
import socket
import stat
import sys
import sysconfig
import time
from pathlib import Path
from typing import BinaryIO

from .errors import FileFormatError

# -- names ----------------------------------------------------------------------------------

MAX_FILE_STEM = 150
"""Leaves room below the common 255-byte name limit for a suffix and a writer's temporary name."""
DIGEST_CHARS = 16
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-\[\]=+, ]+")
"""What a name may keep as it is: characters every common file system takes (Windows refuses
`<>:"/\\|?*` and control characters; `/` and `\\` would leave the directory)."""
_DIGESTED = re.compile(rf"--[0-9a-f]{{{DIGEST_CHARS}}}$", re.IGNORECASE)
_WINDOWS_DEVICES = {
    "con",
    "prn",
    "aux",
    "nul",
    "conin$",
    "conout$",
    *(f"com{i}" for i in range(10)),
    *(f"lpt{i}" for i in range(10)),
}
"""Names Windows keeps for devices, whatever follows their first dot (`NUL.csv` is the device NUL)."""


def file_name(text: str, suffix: str = "", *, keep_case: bool = False) -> str:
    """`text` (a test id, say) as one file name, plus `suffix`.

    The name never leaves its directory (no separator, never `.` or `..`), is valid on Windows,
    macOS and Linux (no reserved character or device name, no trailing dot), fits every file
    system (at most MAX_FILE_STEM bytes before the suffix), and is never shared by two texts, on
    case-insensitive file systems too: a text that is not already such a name (lower case,
    portable, short) keeps a readable part and ends with `--` and a digest of the whole text,
    which no name kept as it is ends with. `keep_case`: for text that is already a file's name on
    the user's file system (a test module's path parts), where two names differing only in case
    cannot both exist."""
    readable = _UNSAFE.sub("_", text)
    readable = re.sub(r"^\.", "_", readable).rstrip(". ") or "_"
    if readable.split(".", 1)[0].lower().rstrip() in _WINDOWS_DEVICES:
        readable = "_" + readable
    plain = (
        readable == text
        and (keep_case or text == text.lower())
        and len(text) <= MAX_FILE_STEM
        and not _DIGESTED.search(text)
    )
    if not plain:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
        readable = readable[: MAX_FILE_STEM - DIGEST_CHARS - 2].rstrip(". ") + "--" + digest
    return readable + suffix


def path_in(directory: str | os.PathLike[str], text: str, suffix: str = "") -> Path:
    """`directory/<file_name(text)><suffix>`: always a file directly in `directory`."""
    return Path(directory) / file_name(text, suffix)


# -- reading --------------------------------------------------------------------------------

MAX_JSON_BYTES = 512 * 2**20
"""A baseline or report larger than this is not one (300,000 tests' records take about 300 MiB)."""
MAX_TRACE_BYTES = 8 * 2**30
"""A trace larger than this (some 100 million events) is refused rather than read into memory."""


def open_regular(path: str | os.PathLike[str], what: str, limit: int) -> BinaryIO:
    """`path` opened for reading, when it is a regular file of at most `limit` bytes; otherwise a
    FileFormatError naming it. The open never blocks: a FIFO, socket or device is refused
    (O_NONBLOCK makes opening a FIFO return at once), and so is a directory."""
    shown = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        if os.path.isdir(path):  # Windows refuses to open one at all, with a less helpful message
            raise IsADirectoryError(errno.EISDIR, "is a directory", shown)
        descriptor = os.open(path, flags)
    except OSError as exc:
        raise FileFormatError(f"{shown}: cannot read the {what}: {exc.strerror or exc}") from None
    handle = os.fdopen(descriptor, "rb")
    try:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):
            raise FileFormatError(f"{shown}: is a directory, not a {what}")
        if not stat.S_ISREG(status.st_mode):
            raise FileFormatError(f"{shown}: not a regular file (a FIFO, socket or device): a {what} is a file")
        if status.st_size > limit:
            raise FileFormatError(f"{shown}: {status.st_size} bytes, more than a {what} may have ({limit} bytes)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
    except BaseException:
        handle.close()
        raise
    return handle


def read_regular(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see open_regular)."""
    with open_regular(path, what, limit) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise FileFormatError(f"{os.fspath(path)}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > limit:  # it grew while being read
        raise FileFormatError(f"{os.fspath(path)}: more than a {what} may have ({limit} bytes)")
    return data


def read_text(path: str | os.PathLike[str], what: str, limit: int | None = None) -> str:
    """A regular file's UTF-8 text (at most `limit` bytes, MAX_JSON_BYTES by default);
    FileFormatError naming the file, and the line of the first byte that is not UTF-8."""
    data = read_regular(path, what, MAX_JSON_BYTES if limit is None else limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FileFormatError(
            f"{os.fspath(path)}:{line}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}): not a {what}"
        ) from None


class DuplicateKeyError(ValueError):
    """An object of a JSON text names one key twice: which value is meant, no reader can tell."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {json.dumps(key)} is in one object twice")
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return found


def loads_json(text: str) -> object:
    """`json.loads`, refusing an object that names a key twice (`DuplicateKeyError`): where the
    standard library keeps the last value without a word, a hand merge that left a test's baseline
    in a file twice would decide the gate by its order."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def read_json(path: str | os.PathLike[str], what: str, limit: int | None = None) -> tuple[str, object]:
    """A JSON file's text and what it holds; FileFormatError naming the file, and the line where
    there is one, for anything that is not a regular file of UTF-8 JSON (of at most `limit` bytes,
    MAX_JSON_BYTES by default) or that names a key twice in one object."""
    text = read_text(path, what, limit)
    try:
        return text, loads_json(text)
    except json.JSONDecodeError as exc:
        truncated = " (the file looks cut short)" if exc.pos >= len(text.rstrip()) else ""
        raise FileFormatError(f"{os.fspath(path)}:{exc.lineno}: not valid JSON: {exc.msg}{truncated}") from None
    except DuplicateKeyError as exc:
        places = [m.start() for m in re.finditer(re.escape(json.dumps(exc.key)) + r"\s*:", text)]
        line = f":{text.count(chr(10), 0, places[-1]) + 1}" if len(places) == 2 else ""  # the second, where it is plain
        raise FileFormatError(f"{os.fspath(path)}{line}: not usable JSON: {exc}; keep one of them") from None
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits, nesting too deep
        raise FileFormatError(f"{os.fspath(path)}: not usable JSON: {str(exc).splitlines()[0]}") from None


def frames_from(root: str | os.PathLike[str], frames: str) -> str:
    """Stack frames (`"file:line, file:line"`, as XLA's buffers name them) with each file of an
    installed package named from the packages' folder (`optax/_src/alias.py:12`, wherever the
    environment is) and each other file below `root` from there, so that what a checkout stores reads
    the same on every other; a file elsewhere keeps its absolute path."""
    named = []
    for frame in frames.split(", "):
        file, separator, line = frame.rpartition(":")
        if separator and os.path.isabs(file):
            for folder in (*_installed_folders(), root):
                try:
                    frame = f"{Path(file).relative_to(folder).as_posix()}:{line}"
                    break
                except ValueError:
                    pass
        named.append(frame)
    return ", ".join(named)


@functools.cache
def _installed_folders() -> tuple[str, ...]:
    """The folders installed packages are imported from (`site-packages`), as this Python has them."""
    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys(paths[key] for key in ("purelib", "platlib") if paths.get(key)))


# -- writing --------------------------------------------------------------------------------

TEMPORARY_SUFFIX = ".tmp"
STALE_AFTER_S = 3600.0
"""A writer's temporary file untouched this long is a dead writer's, whoever wrote it."""
_HOST = hashlib.sha256(socket.gethostname().encode("utf-8", "surrogatepass")).hexdigest()[:6]
_TEMPORARY = re.compile(r"^\..+\.(?P<host>[0-9a-f]{6})-(?P<pid>\d+)-[0-9a-f]{8}" + re.escape(TEMPORARY_SUFFIX) + "$")
_swept: set[str] = set()


def temporary_prefix(target: Path) -> str:
    """How write_atomic's temporary files for `target` begin (so a stale one can be found)."""
    return f".{target.name[:80]}."


def write_atomic(
    path: str | os.PathLike[str],
    data: str | bytes,
    *,
    within: str | os.PathLike[str] | None = None,
    durable: bool = True,
) -> None:
    """Write `data` (text as UTF-8) to `path` so that readers never see half of it and a failure
    loses nothing: a temporary file beside it, flushed to disk, renamed over it. The file keeps its
    mode, or a new one gets the user's umask. A link at `path` is replaced, never written through;
    with `within`, `path` must lie below that directory and no directory between them may be a
    link. OSError (naming `path`) when it cannot be written: a directory in the way, no room, no
    permission.

    `durable=False`: neither the file nor the rename is synced to disk, for an output the next run
    writes again (a test's trace): readers still see the old file or the new one, never half, but a
    machine that loses power may lose it. A sync waits for the disk, and on a machine others write
    to as well for longer: one file and one directory synced per test took a suite of 206 short
    tests 1 to 4 s (of 25 s) more wall time than without."""
    target = Path(path)
    try:
        directory = ensure_directory(target.parent, within)
    except OSError as exc:
        raise OSError(
            exc.errno, f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror, os.fspath(target)
        ) from None
    try:
        existing = os.lstat(target)
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(target)) from None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(target))
    _sweep(directory)
    temporary = directory / f"{temporary_prefix(target)}{_HOST}-{os.getpid()}-{secrets.token_hex(4)}{TEMPORARY_SUFFIX}"
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        descriptor = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0),
            0o666,
        )
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(payload)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
            if existing is not None and stat.S_ISREG(existing.st_mode):
                os.chmod(temporary, stat.S_IMODE(existing.st_mode))
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(target)) from None
    if durable:
        _sync_directory(directory)


def ensure_directory(directory: str | os.PathLike[str], within: str | os.PathLike[str] | None = None) -> Path:
    """`directory`, made where missing. With `within`: it must lie below that directory, and each
    directory from there down is made or checked one at a time, so that a symbolic link in the way
    is refused (OSError ELOOP naming it) rather than followed somewhere else."""
    path = Path(directory)
    if within is None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file where a directory is needed: name it
            blocking = next(
                (parent for parent in (path, *path.parents) if os.path.lexists(parent) and not os.path.isdir(parent)),
                path,
            )
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", os.fspath(blocking)) from None
        return path
    base = Path(within)
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        raise OSError(errno.EXDEV, f"not below {base}", os.fspath(path)) from None
    if ".." in parts:
        raise OSError(errno.EXDEV, f"not below {base}", os.fspath(path))
    base.mkdir(parents=True, exist_ok=True)
    current = base
    for part in parts:
        current = current / part
        try:
            os.mkdir(current)
            continue
        except FileExistsError:
            pass
        mode = os.lstat(current).st_mode
        if stat.S_ISLNK(mode):
            raise OSError(
                errno.ELOOP,
                "a symbolic link: pytest-devmem never writes through one below the directory you named",
                os.fspath(current),
            )
        if not stat.S_ISDIR(mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", os.fspath(current))
    return path


def _sweep(directory: Path) -> None:
    """Remove, once per process and directory, the temporary files killed writers left there: those
    of a process of this machine that is gone, or anyone's untouched for STALE_AFTER_S."""
    key = os.fspath(directory)
    if key in _swept:
        return
    _swept.add(key)
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if match is None:
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
            mine = match.group("host") == _HOST
            if age > STALE_AFTER_S or (mine and not _alive(int(match.group("pid")))):
                os.unlink(entry.path)
        except OSError:
            continue  # its writer finished, or another sweep got there first


def _alive(pid: int) -> bool:
    """Whether a process of this machine runs under `pid`. On Windows, where os.kill would end it,
    every process counts as alive and only the age of its file tells."""
    if sys.platform == "win32" or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process
    return True


def _sync_directory(directory: Path) -> None:
    """Flush the rename to disk, where a directory can be opened (not on Windows)."""
    if sys.platform == "win32":
        return
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
