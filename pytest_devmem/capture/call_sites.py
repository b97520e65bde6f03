"""The user's line a framework call came from: the innermost frame of the calling stack that is the
user's code, named `file:line`, looked up once per call site.

Whose code a frame is follows JAX's own rule for its tracebacks and its programs' source lines
(`jax._src.source_info_util.is_user_filename`: neither JAX's package nor the standard library) and
TensorFlow's for its error messages (`tensorflow/python/framework/error_interpolation.py`,
`_is_framework_filename`: not TensorFlow's or Keras's package), and leaves out this plugin's own
package and pytest's (`_pytest`, `pytest`, `pluggy`), which call the test, and the files libraries
register for JAX to skip (`source_info_util.register_exclusion`: Flax's, at their import). An
installed package (`site-packages`) is the user's, as it is to JAX, but a frame inside the project
(`root`, pytest's rootdir) comes first: the line is the user's call, whatever library wraps the jit.
A file is judged once (by name).

A call site is a frame's code object and the offset of the instruction that made the call
(`f_lasti`): the same pair is the same line, whatever the loop around it. So `site_of(frame)` skips
the frames of JAX's or TensorFlow's own code between a hook and the user's (one dictionary look-up
per frame, by its code object's identity), and computes the line of the first user frame once per
(code object, offset) (`lookups` counts them): a loop of a thousand steps on one line looks its
line up once. A hook called straight from the user's code (a jitted function's post-hook) skips
nothing. No framework is imported here.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from types import CodeType, FrameType

__all__ = ["CallSites", "is_user_file"]

FRAMEWORK_PACKAGES = ("jax", "jaxlib", "tensorflow", "keras", "tf_keras", "_pytest", "pytest", "pluggy")
"""Packages whose frames are never the user's line (each where it is imported)."""
_OWN_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # pytest_devmem/
_judged: dict[str, bool] = {}


def _framework_folders() -> tuple[str, ...]:
    """The folders of this plugin and of the framework packages imported now (a frame of a package
    exists only once the package is in `sys.modules`, so a file is judged with its package known)."""
    folders = [_OWN_FOLDER]
    for name in FRAMEWORK_PACKAGES:
        location = getattr(sys.modules.get(name), "__file__", None)
        if location:
            folders.append(os.path.dirname(os.path.abspath(location)) + os.sep)
    return tuple(folders)


@functools.cache
def _standard_library() -> tuple[str, tuple[str, ...]]:
    """The standard library's folder, and the installed packages' folders (which may lie inside it)."""
    paths = sysconfig.get_paths()
    installed = tuple(os.path.abspath(paths[key]) + os.sep for key in ("purelib", "platlib") if paths.get(key))
    library = paths.get("stdlib")
    return (os.path.abspath(library) + os.sep if library else "\0"), installed


def _excluded_for_jax() -> tuple[str, ...]:
    """The paths libraries registered for JAX's source lines to skip, besides the standard library."""
    from .jax import internals  # here, not above: capture/jax imports this module

    return tuple(path for path in internals.excluded_paths() if path and path != sysconfig.get_path("stdlib"))


def is_user_file(filename: str) -> bool:
    """Whether a frame of `filename` is the user's code (see the module's rule); judged once per name."""
    known = _judged.get(filename)
    if known is not None:
        return known
    path = os.path.abspath(filename) if os.path.isabs(filename) else filename
    library, installed = _standard_library()
    found = not (
        filename.startswith("<frozen")  # the import machinery running a module's body
        or path.startswith(_framework_folders())
        or path.startswith(_excluded_for_jax())
        or (path.startswith(library) and not path.startswith(installed))
    )
    _judged[filename] = found
    return found


class CallSites:
    """The user's line of each call site seen, by code object and instruction offset."""

    def __init__(self, root: str = "") -> None:
        # id(code) -> (code, its sites by offset, whether it is in the project), or (code, None, False)
        # for code that is not the user's; the code object is held so that its id stays its own
        self._codes: dict[int, tuple[CodeType, dict[int, str] | None, bool]] = {}
        self.root = root  # the project's folder, ending in a separator; "": any folder
        self.lookups = 0  # user lines computed: one per call site
        self.walks = 0  # calls of `site_of` (a hook that knows its caller's site asks none)

    def lines_of(self, code: CodeType) -> dict[int, str] | None:
        """The sites known in `code` by instruction offset (filled by `site_of`): its own lines; None
        where `code` is not the user's, or lies outside the project (a caller further out may be)."""
        entry = self._entry(code)
        return entry[1] if entry[2] else None

    def _entry(self, code: CodeType) -> tuple[CodeType, dict[int, str] | None, bool]:
        entry = self._codes.get(id(code))
        if entry is None or entry[0] is not code:
            user = is_user_file(name := code.co_filename)
            entry = self._codes[id(code)] = (
                code,
                {} if user else None,
                user and os.path.abspath(name).startswith(self.root),
            )
        return entry

    def site_of(self, frame: FrameType | None) -> str:
        """`file:line` of the innermost user frame inside the project from `frame` outwards, else of
        the innermost user frame; "" where none is the user's."""
        codes = self._codes
        self.walks += 1
        outside = ""
        while frame is not None:
            code = frame.f_code
            entry = codes.get(id(code))
            if entry is None or entry[0] is not code:
                entry = self._entry(code)
            lines = entry[1]
            if lines is not None:
                offset = frame.f_lasti
                site = lines.get(offset)
                if site is None:
                    self.lookups += 1
                    site = lines[offset] = f"{code.co_filename}:{frame.f_lineno}"
                if entry[2]:
                    return site
                outside = outside or site
            frame = frame.f_back
        return outside
