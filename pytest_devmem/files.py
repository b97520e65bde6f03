"""Writing files so that a reader never sees half of one and a failed write loses nothing."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename, so readers never see half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


_UNSAFE = re.compile(r"[^A-Za-z0-9._\-\[\]=]+")
MAX_FILE_STEM = 150
"""Leaves room below the common 255-byte name limit for a suffix and the digest."""


def safe_file_name(text: str) -> str:
    """A file name for `text` (a test id, say) on any OS: unsafe characters become '_', and a long
    name is cut and ends with a digest of the whole text, so two tests never share a file."""
    name = _UNSAFE.sub("_", text).strip("._") or "test"
    if len(name) > MAX_FILE_STEM:
        import hashlib  # only for long names: its import costs start-up time

        digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[: MAX_FILE_STEM - 13]}-{digest}"
    return name
