"""A capture installs when its framework is imported, and only while its session lasts: one process
may run several sessions (pytester's in-process runs, an IDE's runner), and a hook left by a closed
session once installed its capture in a later one, where it took TensorFlow's profiler class for
good: every later session's TensorFlow figures fell back to the allocator's peak."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from pytest_devmem.capture import imports
from pytest_devmem.capture.measurement import Measurement
from pytest_devmem.model.device import SimulatedDevice


def test_a_hook_runs_right_after_its_module_is_imported_and_a_forgotten_one_never(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "devmem_probe_module.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[tuple[str, int]] = []

    def kept(module: ModuleType) -> None:
        seen.append(("kept", module.VALUE))

    def forgotten(module: ModuleType) -> None:
        seen.append(("forgotten", module.VALUE))

    imports.on_import("devmem_probe_module", kept)
    imports.on_import("devmem_probe_module", forgotten)
    imports.forget("devmem_probe_module", forgotten)
    imports.forget("devmem_probe_module", forgotten)  # twice: nothing to drop, no error
    try:
        import devmem_probe_module  # noqa: F401
    finally:
        sys.modules.pop("devmem_probe_module", None)
    assert seen == [("kept", 42)]
    imports.on_import("sys", lambda module: seen.append(("now", 0)))  # imported already: runs at once
    assert seen[-1] == ("now", 0)


def test_a_closed_measurement_leaves_no_hook_waiting_for_a_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    # as in a process where TensorFlow is not imported yet (hidden, not removed: nothing here imports it)
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    measurement = Measurement(SimulatedDevice(2**30))
    capture = measurement.tensorflow_capture

    def waiting() -> list[object]:
        return [hook for hook in imports._finder.callbacks.get("tensorflow", []) if capture in hook.args]

    try:
        measurement.watch_frameworks()
        assert len(waiting()) == 1
    finally:
        measurement.close()
    assert waiting() == [] and not capture.installed
