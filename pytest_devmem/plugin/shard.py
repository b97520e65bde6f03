"""Which shard of a split suite this session ran, for the report: CI jobs that each run part of the
suite (pytest-split's `--splits N --group K`, pytest-shard's `--num-shards N --shard-id K`) write
reports that `devmem merge` and `devmem history` put back together."""

from __future__ import annotations

import os

import pytest

SHARD_OPTIONS = (("pytest-split", "splits", "group", 1), ("pytest-shard", "num_shards", "shard_id", 0))
"""(plugin, option dest of the number of shards, option dest of this shard, the first shard's number)."""


def ci_run() -> str | None:
    """The CI run every shard of one pipeline shares: GitHub Actions' run id and attempt, or GitLab's pipeline id."""
    if os.environ.get("GITHUB_RUN_ID"):
        return f"{os.environ['GITHUB_RUN_ID']}-{os.environ.get('GITHUB_RUN_ATTEMPT', '1')}"
    return os.environ.get("CI_PIPELINE_ID") or None


def shard_of(config: pytest.Config) -> dict[str, object] | None:
    """`{"plugin", "group", "groups", "run"}` when a shard plugin chose this session's part of the
    suite (`group` counts from 1), else None."""
    for plugin, total_name, index_name, first in SHARD_OPTIONS:
        total = config.getoption(total_name, default=None)
        index = config.getoption(index_name, default=None)
        if isinstance(total, int) and isinstance(index, int) and total > 1:
            return {"plugin": plugin, "group": index - first + 1, "groups": total, "run": ci_run()}
    return None
