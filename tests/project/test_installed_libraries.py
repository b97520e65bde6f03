"""A library first imported inside a pytester run is not imported a second time (tests/installed_libraries.py).

The reproduction runs in a subprocess of its own: without the guard it aborts the whole process
(SIGABRT from abseil inside jaxlib), which no assertion in this process could survive.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).parents[1]  # where installed_libraries.py is

# pytester drops the modules a test imported when the test ends; the second test imports JAX again
REIMPORT = """
pytest_plugins = ["pytester"]


def test_first_to_import_jax_does_so_inside_pytester(pytester):
    import jax  # noqa: F401


def test_next_imports_jax_again():
    import jax.numpy as jnp

    assert float(jnp.ones(3).sum()) == 3.0
"""

GUARD = "from installed_libraries import keep_installed_libraries_imported\n\nkeep_installed_libraries_imported()\n"


def run_reimport(tmp_path: Path, *, guarded: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_reimport.py").write_text(REIMPORT)
    if guarded:
        (tmp_path / "conftest.py").write_text(GUARD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")])))
    env.pop("PYTEST_ADDOPTS", None)
    # -s: abseil's message goes to the real stderr, not to a capture file lost with the process
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        "test_reimport.py",
    ]
    return subprocess.run(command, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_jax_first_imported_inside_pytester_is_not_imported_again(jax_loaded: object, tmp_path: Path) -> None:
    result = run_reimport(tmp_path, guarded=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout


def test_without_the_guard_jaxlib_imported_twice_aborts_the_process(jax_loaded: object, tmp_path: Path) -> None:
    """What the guard prevents, with the installed jaxlib (its `_jax` module calls absl::InitializeLog()
    each time it is executed). Should a jaxlib survive this, docs/known-issues.md can say so."""
    result = run_reimport(tmp_path, guarded=False)
    assert result.returncode == -signal.SIGABRT, (
        "this jaxlib survives being imported twice: docs/known-issues.md may say since which version"
    )
    assert "SetTimeZone() has already been called" in result.stdout + result.stderr


@pytest.mark.parametrize("name", ["json", "sys", "_pytest.pytester"])
def test_the_standard_library_and_installed_packages_are_libraries(name: str) -> None:
    from installed_libraries import is_installed_library

    assert is_installed_library(importlib.import_module(name))


def test_the_tests_own_modules_are_not() -> None:
    from installed_libraries import is_installed_library

    assert not is_installed_library(sys.modules[__name__])
