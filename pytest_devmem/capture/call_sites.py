"""The user's line a framework call came from: the innermost frame of the calling stack that is the
user's code, named `file:line`, looked up once per call site.

Whose code a frame is follows JAX's own rule for its tracebacks and its programs' source lines
(`jax._src.source_info_util.is_user_filename`: neither JAX's package nor the standard library) and
TensorFlow's for its error messages (`tensorflow/python/framework/error_interpolation.py`,
`_is_framework_filename`: not TensorFlow's or Keras's package), and leaves out this plugin's own
package and pytest's (`_pytest`, `pytest`, `pluggy`), which call the test: an installed package
(`site-packages`) is the user's, as it is to JAX. A file is judged once (by name).

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
        or (path.startswith(library) and not path.startswith(installed))
    )
    _judged[filename] = found
    return found


class CallSites:
    """The user's line of each call site seen, by code object and instruction offset."""

    def __init__(self) -> None:
        # id(code) -> (code, its sites by offset), or (code, None) for code that is not the user's;
        # the code object is held so that its id stays its own
        self._codes: dict[int, tuple[CodeType, dict[int, str] | None]] = {}
        self.lookups = 0  # user lines computed: one per call site
        self.walks = 0  # calls of `site_of` (a hook that knows its caller's site asks none)

    def lines_of(self, code: CodeType) -> dict[int, str] | None:
        """The sites known in `code` by instruction offset (filled by `site_of`); None where `code`
        is not the user's."""
        entry = self._codes.get(id(code))
        if entry is None or entry[0] is not code:
            entry = self._codes[id(code)] = (code, {} if is_user_file(code.co_filename) else None)
        return entry[1]

    def site_of(self, frame: FrameType | None) -> str:
        """`file:line` of the innermost user frame from `frame` outwards; "" where none is the user's."""
        codes = self._codes
        self.walks += 1
        while frame is not None:
            code = frame.f_code
            entry = codes.get(id(code))
            lines = entry[1] if entry is not None and entry[0] is code else self.lines_of(code)
            if lines is None:
                frame = frame.f_back
                continue
            offset = frame.f_lasti
            site = lines.get(offset)
            if site is None:
                self.lookups += 1
                site = lines[offset] = f"{code.co_filename}:{frame.f_lineno}"
            return site
        return ""
