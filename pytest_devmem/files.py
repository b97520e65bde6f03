"""Writing files so that a reader never sees half of one and a failed write loses nothing."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path


TEMPORARY_SUFFIX = ".tmp"


def temporary_prefix(target: Path) -> str:
    """How write_atomic names its temporary files for `target` (so a stale one can be found)."""
    return f".{target.name}."


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename, so readers never see half a
    file. The file gets the mode it had, or a new file's mode under the user's umask (a temporary
    file is created 0600, which would otherwise stick)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=temporary_prefix(target), suffix=TEMPORARY_SUFFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask (read by setting it, so put straight back)."""
    current = os.umask(0o022)
    os.umask(current)
    return current


_UNSAFE = re.compile(r"[^A-Za-z0-9._\-\[\]=]+")
MAX_FILE_STEM = 150
"""Leaves room below the common 255-byte name limit for a suffix and the digest."""


def shortened(name: str) -> str:
    """`name` as it is, or, when too long for a file name on common file systems (255 bytes, less
    room for a suffix), cut and ended with a digest of the whole, so two long names never collide."""
    if len(name.encode("utf-8", "surrogatepass")) <= MAX_FILE_STEM:
        return name
    import hashlib

    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{name[: MAX_FILE_STEM // 4 * 2]}-{digest}"


def safe_file_name(text: str) -> str:
    """A file name for `text` (a test id, say) on any OS: unsafe characters become '_', and a long
    name is cut and ends with a digest of the whole text, so two tests never share a file."""
    name = _UNSAFE.sub("_", text).strip("._") or "test"
    return name if len(name) <= MAX_FILE_STEM else shortened(text)
