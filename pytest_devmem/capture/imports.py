"""Run a callback as soon as a module finishes importing, even when a test imports it mid-run."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it lets the other finders locate the module, then wraps its loader's
    `exec_module` so the callback runs right after the module's code has run."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._searching: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        if fullname not in self.callbacks or fullname in self._searching:
            return None
        self._searching.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching.discard(fullname)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        original = loader.exec_module
        callbacks = self.callbacks

        def exec_module(module: ModuleType) -> None:
            original(module)
            for callback in callbacks.pop(fullname, []):
                callback(module)

        loader.exec_module = exec_module  # this loader object serves this one import
        return spec


_finder = _PostImportFinder()


def on_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call `callback(module)` once `name` is imported: now if it already is, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _finder.callbacks.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def forget(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Drop `callback` if it is still waiting for `name`. Whoever registered one forgets it when it
    closes: the callbacks outlive a pytest session (one process may run several, as pytester's
    in-process runs do), and one left would run in a later session, on the import it waited for."""
    waiting = _finder.callbacks.get(name, [])
    if callback in waiting:
        waiting.remove(callback)
