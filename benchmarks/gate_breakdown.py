"""A pytest plugin that times where pytest-devmem's per-test work goes, for `bench_gate --breakdown`.

Loaded with `-p benchmarks.gate_breakdown` beside the plugin; at the session's end it prints the
seconds (wall and CPU of the process) spent in each piece: the window's garbage collections and
freezes at each test, the thaw and full collection at each module's first test, the rest of
opening and closing the window, making the record (the replay on the model of the machine),
writing its trace (with `--devmem-traces`), and the session's end (reports, baselines).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

_totals: dict[str, list[float]] = {}  # piece -> [wall, cpu, calls]
_tests = 0


def _add(piece: str, wall: float, cpu: float) -> None:
    entry = _totals.setdefault(piece, [0.0, 0.0, 0])
    entry[0] += wall
    entry[1] += cpu
    entry[2] += 1


def _timed(piece: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            _add(piece, time.perf_counter() - wall, time.process_time() - cpu)

    return timed


class _TimedGc:
    """`gc` as the measurement module sees it: collections counted apart after a thaw (the module's
    first test: everything unfrozen is scanned) and at other tests."""

    def __init__(self) -> None:
        self.thawed = False

    def unfreeze(self) -> None:
        self.thawed = True
        _timed("gc.unfreeze (each module's first test)", gc.unfreeze)()

    def collect(self, *args: Any) -> int:
        piece = "gc.collect after a thaw" if self.thawed else "gc.collect (other tests, and leak checks)"
        self.thawed = False
        return int(_timed(piece, gc.collect)(*args))

    def freeze(self) -> None:
        _timed("gc.freeze", gc.freeze)()

    def __getattr__(self, name: str) -> Any:
        return getattr(gc, name)


def pytest_configure(config: pytest.Config) -> None:
    from pytest_devmem.capture import measurement
    from pytest_devmem.plugin import checks

    measurement.gc = _TimedGc()  # type: ignore[assignment]
    measurement.Measurement.start = _timed("window start, in all", measurement.Measurement.start)  # type: ignore[method-assign]
    measurement.Measurement.stop = _timed("window stop, in all", measurement.Measurement.stop)  # type: ignore[method-assign]
    checks.make_record = _timed("record (replay on the model)", checks.make_record)
    checks.Checks.write_trace = _timed("trace written (--devmem-traces)", checks.Checks.write_trace)  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    global _tests
    _tests += 1
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        _add("test bodies (with the capture's hooks)", time.perf_counter() - wall, time.process_time() - cpu)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        _add("session finish (reports, baselines)", time.perf_counter() - wall, time.process_time() - cpu)


def pytest_unconfigure(config: pytest.Config) -> None:
    print(f"\ndevmem breakdown over {_tests} tests: piece, calls, wall s, CPU s, wall ms a test")
    for piece, (wall, cpu, calls) in sorted(_totals.items(), key=lambda item: -item[1][0]):
        print(f"  {piece:<45} {int(calls):>6} {wall:>8.3f} {cpu:>8.3f} {wall / max(_tests, 1) * 1e3:>8.2f}")
