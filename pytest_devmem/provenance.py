"""Where a report comes from: the commit, the branch, the time, and a hash of what shaped its
figures (package versions, device class), so reports of many commits can be lined up. No pytest."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
from pathlib import Path


def _git(directory: Path, *args: str) -> str | None:
    try:
        completed = subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() or None if completed.returncode == 0 else None


def provenance(directory: Path, versions: dict[str, str], device_class: str) -> dict[str, object]:
    """`commit` and `branch` (CI's variables first, then git; None where neither says), `time` (UTC),
    and `environment_hash`: equal hashes mean the same versions on the same class of device."""
    commit = os.environ.get("GITHUB_SHA") or os.environ.get("CI_COMMIT_SHA") or _git(directory, "rev-parse", "HEAD")
    branch = os.environ.get("GITHUB_HEAD_REF") or os.environ.get("GITHUB_REF_NAME") or os.environ.get("CI_COMMIT_REF_NAME") or _git(directory, "rev-parse", "--abbrev-ref", "HEAD")
    environment = json.dumps({"versions": versions, "device_class": device_class}, sort_keys=True)
    return {
        "commit": commit,
        "branch": branch,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment_hash": hashlib.sha256(environment.encode()).hexdigest()[:16],
    }
