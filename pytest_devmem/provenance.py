"""Where a report comes from: the commit (and whether the work tree had changes), the branch, the
time, the machine (OS, Python, NVIDIA driver and the CUDA it supports), and a hash of what shaped its
figures (package versions, device class), so reports of many commits can be lined up. No pytest."""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path


def _git(directory: Path, *args: str) -> str | None:
    """What a git command printed (stripped); None where git is missing, fails or is not in a work tree."""
    try:
        completed = subprocess.run(
            ["git", *args], cwd=directory, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() if completed.returncode == 0 else None


def work_tree_dirty(directory: Path) -> bool | None:
    """Whether tracked files differ from the commit (untracked files do not count, as in
    `git describe --dirty`, which pytest-benchmark uses); None outside a git work tree."""
    changes = _git(directory, "status", "--porcelain", "--untracked-files=no")
    return None if changes is None else bool(changes)


@functools.cache
def machine_id() -> str:
    """pytest-benchmark's machine id: `Linux-CPython-3.11-64bit` (OS, Python implementation and
    version, pointer width); autosaved reports are kept in a folder of that name. Cached: it cannot
    change within a process, and `platform.architecture()` runs `file` on the interpreter each call."""
    return "-".join(
        (
            platform.system() or "unknown",
            platform.python_implementation(),
            ".".join(platform.python_version_tuple()[:2]),
            platform.architecture()[0],
        )
    )


def provenance(
    directory: Path, versions: dict[str, str], device_class: str, driver: dict[str, str | None] | None = None
) -> dict[str, object]:
    """`commit`, `dirty` and `branch` (CI's variables first, then git; None where neither says),
    `time` (UTC), the machine (`machine_id`, `os`, `python`, and from `driver` the NVIDIA
    `driver_version` and the `cuda_version` it supports, None where unknown), and
    `environment_hash`: equal hashes mean the same versions on the same class of device."""
    commit = (
        os.environ.get("GITHUB_SHA") or os.environ.get("CI_COMMIT_SHA") or _git(directory, "rev-parse", "HEAD") or None
    )
    branch = (
        os.environ.get("GITHUB_HEAD_REF")
        or os.environ.get("GITHUB_REF_NAME")
        or os.environ.get("CI_COMMIT_REF_NAME")
        or _git(directory, "rev-parse", "--abbrev-ref", "HEAD")
        or None
    )
    environment = json.dumps({"versions": versions, "device_class": device_class}, sort_keys=True)
    driver = driver or {}
    return {
        "commit": commit,
        "dirty": work_tree_dirty(directory),
        "branch": branch,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment_hash": hashlib.sha256(environment.encode()).hexdigest()[:16],
        "machine_id": machine_id(),
        "os": f"{platform.system()} {platform.release()} ({platform.machine()})".strip(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "driver_version": driver.get("driver_version"),
        "cuda_version": driver.get("cuda_version"),
    }
