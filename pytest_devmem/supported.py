"""The releases pytest-devmem is tested with, and the refusal outside them.

The JAX capture reaches JAX's private dispatch (capture/jax/internals.py), which changes between
releases. Outside the tested range it would measure wrong, or nothing, while the gate passes. So a
session refuses an untested Python, JAX or TensorFlow at start. The matrix that tested each
release is `python scripts/compat.py`; its last table is in docs/compatibility.md.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Supported:
    """One package's tested range: from `low` up to, not including, `below`."""

    name: str
    distributions: tuple[str, ...]
    low: str
    below: str
    shown: str

    def problem(self, installed: str) -> str | None:
        """Why `installed` is refused, or None where it is in the range. Releases compare by their
        numbers alone: 0.12.1rc1 and 0.12.1.dev1 are 0.12.1's, outside; a local build is its release's."""
        from packaging.version import InvalidVersion, Version

        try:
            if Version(self.low).release <= Version(installed).release < Version(self.below).release:
                return None
        except InvalidVersion:
            pass
        return (
            f"{self.name} {installed} is installed, and pytest-devmem supports {self.name} {self.shown} "
            f"(docs/compatibility.md): install one with pip install '{self.distributions[0]}>={self.low},<{self.below}'"
        )


JAX = Supported("jax", ("jax",), "0.9.2", "0.12.1", "0.9.2 to 0.12.0.1")
TENSORFLOW = Supported(
    "tensorflow",
    ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tensorflow-intel"),
    "2.16",
    "2.22",
    "2.16 to 2.21",
)
PACKAGES = (JAX, TENSORFLOW)  # jaxlib: JAX refuses a jaxlib not its own at import
PYTHON_LOW, PYTHON_BELOW = (3, 11), (3, 14)
SUPPORTED_JAX = JAX.shown


def installed_version(distributions: tuple[str, ...]) -> str | None:
    """The version of the first of `distributions` installed, read without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    for name in distributions:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def problems(python: tuple[int, int] = sys.version_info[:2]) -> list[str]:
    """Why this environment is outside the tested range: one line per package; [] where it is in it."""
    found = []
    if not PYTHON_LOW <= python < PYTHON_BELOW:
        found.append(
            f"Python {python[0]}.{python[1]} runs this session, and pytest-devmem supports Python "
            f"{PYTHON_LOW[0]}.{PYTHON_LOW[1]} to {PYTHON_BELOW[0]}.{PYTHON_BELOW[1] - 1}: run it with one of those"
        )
    for package in PACKAGES:
        installed = installed_version(package.distributions)
        problem = package.problem(installed) if installed is not None else None
        if problem:
            found.append(problem)
    return found
