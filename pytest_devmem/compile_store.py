"""What the deviceless compilers said, kept beside the baselines, so that a fresh clone compiles
only the programs that changed. No pytest, no framework.

The GPU and TPU sizers (capture/jax/gpu_compile.py, tpu_compile.py; their cache: size_cache.py) cache each
program's and each array shape's sizes under a key made of the program (its module text, or its
jaxpr and the module JAX lowered for its own devices), the compiler's versions, the target and
XLA_FLAGS: content-addressed, the same on every machine with the same compiler. pytest's cache
directory holds them for one checkout; `--devmem-update` also writes the entries the stored
baselines' tests used to `<baselines>/<device class>/.compiled/<key>.json`: one small JSON file per
entry, sorted keys, one key per line, so that two pull requests adding programs never touch the same
file, and a changed program shows as one file gone and one added. Each baseline names the entries its
test used (`compiled`); an entry no stored baseline names is removed when the baselines are
refreshed. The folder's name begins with a dot, which no test module's folder in the baselines can
(`files.file_name`), and the baselines' reader passes it by.

Every entry is checked before it is believed, wherever it is read from (the store, pytest's cache,
the user's --devmem-cache-dir): `entry_problem` says what is wrong with one, `read_entry` is the one
way a file is read. A bad entry is a miss: the program is compiled again, with a warning naming the
file. `--devmem-verify-entries=REF` believes none that git REF does not hold (`changed_entries`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DevmemError, FileFormatError
from .files import ensure_directory, frames_from, loads_json, read_text, write_atomic

STORE_DIRECTORY = ".compiled"
"""The store's folder in a device class's baselines directory."""
ENTRY_LIMIT = 1 << 20
"""No entry is larger: an executable's figures and its largest buffers take a few KiB."""
LARGEST_SIZE = 2**63
"""No size a compiler states is this large: a bigger number is damage."""
EXECUTABLE_FIELDS = ("devices", "temp_bytes", "output_bytes", "argument_bytes", "alias_bytes", "code_bytes")
"""An executable's entry: XLA's memory analysis of its compile for the target, per device."""
ARRAY_FIELD = "array_bytes"
"""An array shape's entry: the bytes one chip holds for it in the target's layout."""
CONTRADICTED = "an entry the compiler contradicts"
"""What a test's note says of a distrusted entry (--devmem-verify-entries) that differs from the compile."""
_KEY = re.compile(r"^[0-9a-f]{64}$")


def is_key(text: object) -> bool:
    """Whether `text` is a cache key (a SHA-256 in lower-case hex): what names a file of the store."""
    return isinstance(text, str) and _KEY.match(text) is not None


def entry_problem(data: object) -> str | None:
    """Why `data` cannot be believed as a compiler's entry, or None: it must be an object holding an
    executable's figures (`EXECUTABLE_FIELDS`) or an array shape's (`ARRAY_FIELD`), each a whole
    number of bytes (not a bool), 0 or more and below 2**63; an executable's `buffers`, where
    present, an object (read further by model/buffers.py, which keeps the sizes where they are bad)."""
    if not isinstance(data, dict):
        return f"holds {type(data).__name__}, not an object of sizes"
    names = EXECUTABLE_FIELDS if ARRAY_FIELD not in data else (ARRAY_FIELD,)
    for name in names:
        if name not in data:
            return f'has no "{name}"'
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, int):
            return f'"{name}" is {value!r}, not a whole number of bytes'
        if not 0 <= value < LARGEST_SIZE:
            return f'"{name}" is {value!r}: a size lies between 0 and 2**63'
    if ARRAY_FIELD not in data and data["devices"] < 1:
        return f'"devices" is {data["devices"]!r}: a program runs on one device or more'
    if "buffers" in data and data["buffers"] is not None and not isinstance(data["buffers"], dict):
        return '"buffers" is not an object'
    return None


def read_entry(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The entry in `path`, checked: (entry, None); (None, None) where there is no such file; (None,
    why) where the file cannot be believed (not a regular file, over `ENTRY_LIMIT`, not JSON, or an
    `entry_problem`), the reason naming the file."""
    if not os.path.lexists(path):
        return None, None
    try:
        text = read_text(path, "entry of compiled sizes", ENTRY_LIMIT)
        data: Any = loads_json(text)  # entry_problem checks what it holds
    except FileFormatError as exc:
        return None, str(exc)
    except json.JSONDecodeError as exc:
        return None, f"{path}:{exc.lineno}: not valid JSON: {exc.msg}"
    except (OSError, ValueError, RecursionError) as exc:
        return None, f"{path}: not usable JSON ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    problem = entry_problem(data)
    if problem is not None:
        return None, f"{path}: {problem}"
    return data, None


def render_entry(entry: Mapping[str, Any]) -> str:
    """An entry as the store keeps it: sorted keys, one a line."""
    return json.dumps(dict(entry), indent=1, sort_keys=True) + "\n"


@dataclass
class StoreUpdate:
    """What a refresh did to the store: entries written (new or changed), entries removed (no stored
    baseline names them), and a line per file that could not be written or removed."""

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    kept: int = 0  # entries the store holds after the refresh


def git_revision(text: str) -> str:
    """A git revision to compare the store with (a branch, tag or commit); ValueError where it is
    none git would take as such (empty, an option, or spaces)."""
    if not text or text.startswith("-") or any(character.isspace() or ord(character) < 32 for character in text):
        raise ValueError(f"{text!r} is not a git revision: name a branch, tag or commit (e.g. origin/main)")
    return text


def changed_entries(directory: Path, revision: str) -> set[str]:
    """The keys of the entries in `directory` that git `revision` does not hold as they are: those a
    pull request adds or edits. DevmemError where git cannot tell."""
    if not directory.is_dir():
        return set()
    names: list[str] = []
    for command in (["diff", "--name-only", "--no-renames", revision, "--", "."], ["ls-files", "--others", "--", "."]):
        try:
            done = subprocess.run(["git", *command], cwd=directory, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise DevmemError(f"git could not be run in {directory}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            raise DevmemError(f"git {command[0]} {revision} in {directory}: {done.stderr.strip()[:300]}")
        names += done.stdout.splitlines()
    return {Path(name).stem for name in names if is_key(Path(name).stem)}


def portable_entry(
    entry: Mapping[str, Any], project: Path | None, frames: Callable[[str], str] | None = None
) -> dict[str, Any]:
    """`entry` with each stack frame its buffers name (`"at": "file:line, file:line"`) that lies
    below `project` (the rootdir) named from there, as a baseline names it: an entry written on one
    checkout reads the same on every other. `frames`: another way to name them."""
    buffers = entry.get("buffers")
    listed = buffers.get("buffers") if isinstance(buffers, dict) else None
    if (project is None and frames is None) or not isinstance(listed, list):
        return dict(entry)
    shown = []
    for buffer in listed:
        at = buffer.get("at") if isinstance(buffer, dict) else None
        if isinstance(at, str) and at:
            buffer = {**buffer, "at": frames(at) if frames else frames_from(project, at)}  # type: ignore[arg-type]
        shown.append(buffer)
    return {**entry, "buffers": {**buffers, "buffers": shown}}  # type: ignore[dict-item]


def _figures(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry less its frames' paths, which differ between checkouts, not between compiles."""
    return portable_entry(entry, None, lambda at: "")


def update_store(
    directory: Path,
    entries: Mapping[str, Mapping[str, Any]],
    named: Iterable[str],
    root: Path,
    project: Path | None = None,
) -> StoreUpdate:
    """Write `entries` (key -> entry, as a session's records carry them) that some stored baseline
        names (`named`) to `directory`, each checked, and remove the files of entries none names (a file
    not named as an entry is the user's, and stays). `root`:
        the baselines directory, which no write leaves; `project`: the rootdir, from which the files of
    the entries' stack frames are named (`portable_entry`). An entry already stored with the same
        figures is not written again."""
    update = StoreUpdate()
    if os.path.islink(directory):  # never written nor pruned through a link (baselines are not either)
        update.problems.append(f"{directory}: a link: put the directory itself there")
        return update
    wanted = {key for key in named if is_key(key)}
    present = {path.stem: path for path in directory.glob("*.json") if is_key(path.stem)} if directory.is_dir() else {}
    for key in sorted(wanted & set(entries)):
        entry = entries[key]
        if entry_problem(entry) is not None:
            continue  # never stored: the sizer checked it already, so only a damaged report sends one
        path = directory / f"{key}.json"
        stored = read_entry(path)[0] if key in present else None
        if stored is not None and _figures(stored) == _figures(entry):
            continue  # the same figures: only a frame's path may differ (a wrong or partial one is written anew)
        try:
            ensure_directory(directory, within=root)
            write_atomic(path, render_entry(portable_entry(entry, project)), within=root, durable=False)
        except OSError as exc:
            update.problems.append(f"{path}: {exc.strerror or exc}")
            continue
        update.written.append(key)
        present[key] = path
    for key, path in sorted(present.items()):
        if key in wanted:
            continue
        try:
            path.unlink()
        except OSError as exc:
            update.problems.append(f"{path}: not removed ({exc.strerror or exc})")
            continue
        update.removed.append(key)
    update.kept = len([key for key in present if key in wanted])
    return update
