"""Installed libraries stay imported across pytester's in-process runs.

pytester restores `sys.modules` after each in-process run and at each test's end, so a library first
imported inside one is dropped and imported afresh by the next test. Several cannot be imported twice
in one process: jaxlib's `_jax` extension calls `absl::InitializeLog()` each time it is executed and
abseil aborts the process on the second call ("SetTimeZone() has already been called"), TensorFlow's
aborts on "PyExceptionRegistry::Init() already called", NumPy raises "cannot load module more than
once per process" (and `import tensorflow` imports JAX where it is installed). Which test imports
them first then decides whether the suite dies, so the restore keeps every module of an installed
library (site-packages, the standard library) and drops only the rest: the tests' own files.
docs/known-issues.md says the same for users' suites.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
from types import ModuleType

from _pytest import pytester


@functools.cache
def library_dirs() -> tuple[str, ...]:
    """The standard library's folders, site-packages, and the deviceless compilers' folder where
    conftest.py loaded it (capture/jax/compilers.py): their extensions, too, abort when imported twice."""
    from pytest_devmem.capture.jax import compilers

    paths = sysconfig.get_paths()
    dirs = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"], *site.getsitepackages()}
    dirs.update(str(folder) for folder in compilers.loaded().values())
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


@functools.cache
def _in_library_dir(place: str) -> bool:
    """Whether a module's file or folder lies under an installed library's folder; cached, since each
    restore asks it for every module in `sys.modules` (thousands, once JAX and TensorFlow are loaded)
    and resolving each path's links costs a dozen system calls."""
    return os.path.join(os.path.realpath(place), "").startswith(library_dirs())


def is_installed_library(module: ModuleType | None) -> bool:
    """True for a module of the standard library or of an installed package, or a built-in one."""
    if module is None:
        return False
    file = getattr(module, "__file__", None)
    places = (
        [file] if file else list(getattr(module, "__path__", None) or [])
    )  # namespace packages name only their folders
    if not places:
        spec = getattr(module, "__spec__", None)
        return spec is not None and spec.origin in ("built-in", "frozen")
    return any(_in_library_dir(place) for place in places)


_installed_modules: dict[str, ModuleType] = {}
"""The modules `is_installed_library` said yes to, by name: a restore asks it of every module in
`sys.modules` (thousands, once JAX and TensorFlow are loaded), hundreds of times in a run of this
suite, and the answer holds while the name holds the same module. The tests' own modules are asked
afresh (not kept here: a restore drops them)."""


def _installed(name: str, module: ModuleType | None) -> bool:
    if module is None:
        return False
    if _installed_modules.get(name) is module:
        return True
    if not is_installed_library(module):
        return False
    _installed_modules[name] = module
    return True


class LibraryKeepingSnapshot(pytester.SysModulesSnapshot):
    """pytester's snapshot of `sys.modules`, whose restore keeps the installed libraries imported since."""

    def restore(self) -> None:
        imported = {name: module for name, module in list(sys.modules.items()) if _installed(name, module)}
        super().restore()
        for name, module in imported.items():
            sys.modules.setdefault(name, module)


def keep_installed_libraries_imported() -> None:
    """Make every pytester snapshot taken from now on a `LibraryKeepingSnapshot` (pytester looks the
    class up when it takes one). The folders are read now, after conftest.py loaded the compilers'
    (never during a restore, which walks sys.modules)."""
    library_dirs()
    pytester.SysModulesSnapshot = LibraryKeepingSnapshot  # type: ignore[misc]
