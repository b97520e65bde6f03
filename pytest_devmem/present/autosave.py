"""Every run's JSON report kept per machine, the way pytest-benchmark's `--benchmark-autosave` keeps
its runs, so that `devmem history` needs no bookkeeping:

    .devmem/<machine id>/NNNN_<commit>_<UTC time>[_dirty].json

`NNNN` counts up per machine folder (0001, 0002, ...), the commit is the one the report names
(`unversioned` outside git), the time is pytest-benchmark's `%Y%m%d_%H%M%S`, and `_dirty` marks a run
whose work tree had changes. A number is claimed by creating its file exclusively, so two sessions
finishing at once never write over each other. No pytest here."""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path

from ..files import ensure_directory, file_name, write_atomic

AUTOSAVE_DIR = ".devmem"
_NUMBERED = re.compile(r"^(\d{4,})_")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
CLAIM_ATTEMPTS = 1000


def file_stem(session: dict[str, object]) -> str:
    """`<commit>_<time>[_dirty]` for a report's session: its commit, its time, its dirty flag."""
    commit = _UNSAFE.sub("_", str(session.get("commit") or "unversioned"))[:40] or "unversioned"
    try:
        moment = datetime.datetime.fromisoformat(str(session.get("time")))
    except ValueError:
        moment = datetime.datetime.now(datetime.timezone.utc)
    stem = f"{commit}_{moment.strftime('%Y%m%d_%H%M%S')}"
    return stem + "_dirty" if session.get("dirty") else stem


def next_number(folder: Path) -> int:
    """One more than the highest number a report in `folder` has (1 for an empty or new folder)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 1
    numbers = [int(match.group(1)) for name in names if (match := _NUMBERED.match(name))]
    return max(numbers, default=0) + 1


def autosave(root: Path, text: str, session: dict[str, object]) -> Path:
    """Write `text` (a JSON report) as the next numbered file of this machine's folder under
    `root/.devmem`; its path. OSError when the folder or file cannot be written."""
    base = root / AUTOSAVE_DIR
    folder = ensure_directory(
        base / file_name(str(session.get("machine_id") or "unknown-machine"), keep_case=True), within=base
    )
    stem = file_stem(session)
    number = next_number(folder)
    for _ in range(CLAIM_ATTEMPTS):
        path = folder / f"{number:04d}_{stem}.json"
        try:
            os.close(
                os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o666)
            )  # claim the number
        except FileExistsError:
            number = max(number + 1, next_number(folder))
            continue
        write_atomic(path, text, within=base)  # readers see the whole report or the empty claim, never half
        return path
    raise OSError(f"no free report number in {folder} after {CLAIM_ATTEMPTS} attempts")
