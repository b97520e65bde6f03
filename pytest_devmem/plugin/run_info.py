"""What the project's `pytest_devmem_update_run_info` hooks (hookspec.py) add to the run's metadata,
made plain JSON before it is believed.

A hook is the project's code: it may raise, or store what JSON cannot hold. Whatever it does, the
session's measurements are kept (baselines, the report): a hook that raises (`sys.exit` too), or a value that is a
cycle, has a key that is not text or a number, or is a number too long to write, is an error naming
the hook and what it stored, and the session fails at its end as when a file cannot be written. A
value JSON has no form for but text has (a path, a date) is stored as its text; NaN and the
infinities, which JSON has no literal for (Python would write a bare `NaN` that `jq` reads as
null), as the text `"NaN"`, `"Infinity"`, `"-Infinity"`.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from ..units import shown_value

HOOK = "pytest_devmem_update_run_info"
MAX_DEPTH = 64
"""Deeper nesting than this is no metadata a person reads (and would reach Python's recursion limit)."""


class _NotJson(ValueError):
    """A value the hook stored that has no JSON form; the message says which and why."""


def collect_run_info(config: pytest.Config) -> tuple[dict[str, object], list[str]]:
    """The run info every hook added, as plain JSON, and the problems to report (one per key that
    could not be kept, or the hook's exception)."""
    run_info: dict[object, object] = {}
    problems: list[str] = []
    try:
        config.hook.pytest_devmem_update_run_info(config=config, run_info=run_info)
    except (Exception, SystemExit) as exc:  # the project's code: its error is reported, the measurements kept
        what = f"raised {type(exc).__name__}: {_first_line(exc)}"
        if isinstance(exc, SystemExit):  # a hook's exit is no reason to lose the session's figures
            what = f"called sys.exit({exc.code!r}), which does not end the session"
        problems.append(f"{HOOK} {what}; run_info is kept as it stood")
    if not isinstance(run_info, dict):  # the hook cannot rebind it, but guard the type anyway
        return {}, problems
    plain: dict[str, object] = {}
    for key, value in list(run_info.items()):
        try:
            name = _key(key, f"run_info[{shown_value(key)}]")
            plain[name] = _plain(value, f"run_info[{name!r}]", set(), 0)
        except _NotJson as exc:
            problems.append(f"{HOOK} stored {exc}; that key is left out of the report")
    return plain, problems


def _key(key: object, where: str) -> str:
    """A dict key as JSON writes it: text, and numbers, booleans and None as their text."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return "null" if key is None else str(key).lower()
    if isinstance(key, int):
        return _int_text(key, where)
    if isinstance(key, float):
        return _float(key) if not math.isfinite(key) else repr(key)
    raise _NotJson(f"{where}: a key of type {type(key).__name__}; JSON keys are text")


def _plain(value: Any, where: str, seen: set[int], depth: int) -> object:
    if depth > MAX_DEPTH:
        raise _NotJson(f"{where}: nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        _int_text(value, where)
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _float(value)
    if isinstance(value, (dict, list, tuple)):
        if id(value) in seen:
            raise _NotJson(f"{where}: a cycle (it contains itself)")
        seen = seen | {id(value)}
        if isinstance(value, dict):
            out: dict[str, object] = {}
            for key, item in list(value.items()):
                name = _key(key, f"{where}[{shown_value(key)}]")
                out[name] = _plain(item, f"{where}[{name!r}]", seen, depth + 1)
            return out
        return [_plain(item, f"{where}[{index}]", seen, depth + 1) for index, item in enumerate(value)]
    try:
        return str(value)  # a path, a date, a version: its text, never lost
    except Exception as exc:
        raise _NotJson(f"{where}: a {type(value).__name__} whose text cannot be made ({_first_line(exc)})") from None


def _int_text(value: int, where: str) -> str:
    try:
        return str(value)
    except ValueError:  # beyond Python's limit on digits written (sys.get_int_max_str_digits)
        limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
        raise _NotJson(f"{where}: {shown_value(value)}, more digits than are written ({limit})") from None


def _float(value: float) -> str:
    """NaN and the infinities as the text JSON readers agree on."""
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else ""
