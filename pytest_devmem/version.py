"""The installed pytest-devmem's version, read from its distribution's metadata."""

from __future__ import annotations

import functools


@functools.cache
def package_version() -> str:
    """This distribution's version; `0.0.0+unknown` in a source tree that was never installed."""
    # importlib.metadata costs some 15 ms to import, paid only where a version is shown (-X importtime)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest-devmem")
    except PackageNotFoundError:
        return "0.0.0+unknown"
