"""TensorFlow's device memory as trace events.

TensorFlow's allocators report allocation events only to its profiler, and on CPU its allocator
emits none (TensorFlow 2.21: a profiler session around CPU ops holds no `MemoryAllocation`
event), so the capture uses what TensorFlow reports everywhere: `get_memory_info`'s peak over the
test. That peak becomes one allocation held from TensorFlow's first activity in the test (its
first op, or its first tensor) to the end, an upper bound of what its allocator held at any
moment, and the record says so. Placing it at TensorFlow's first activity keeps the order in which
TensorFlow and JAX began to allocate, which decides who gets the device when they share it.
"""

from __future__ import annotations

from typing import Any, Callable

from ..model.trace import ALLOCATE, TraceEvent
from .sources.base import Reading
from .patches import Patches
from .recorder import TraceRecorder

SOURCE = "tensorflow"
PEAK_LABEL = "peak of TensorFlow's allocator over the test (get_memory_info), held from its first activity"
NOTE = "TensorFlow reports only its peak, which the trace holds from TensorFlow's first activity in the test to its end"


class TensorFlowCapture:
    """Notes when TensorFlow first does something in a test window: an eager op, a function call or
    a tensor made from host data. Hooks TensorFlow's Python entry points once per process."""

    name = SOURCE

    def __init__(self, recorder: TraceRecorder) -> None:
        self._recorder = recorder
        self._patches = Patches()
        self.installed = False
        self.note = ""
        self.first_activity: float | None = None

    def install(self) -> bool:
        if self.installed:
            return True
        try:
            from tensorflow.python import pywrap_tfe  # type: ignore[import-not-found]
            from tensorflow.python.eager import context  # type: ignore[import-not-found]
        except ImportError as exc:
            self.note = f"TensorFlow's eager entry points could not be imported ({exc}): its peak is placed at the start of the test"
            return False
        targets = [(pywrap_tfe, "TFE_Py_FastPathExecute"), (pywrap_tfe, "TFE_Py_Execute"), (context.Context, "ensure_initialized")]
        missing = [name for owner, name in targets if not hasattr(owner, name)]
        if missing:
            self.note = f"this TensorFlow lacks {', '.join(missing)}: its peak is placed at the start of the test"
            return False
        for owner, name in targets:
            self._patches.replace(owner, name, self._noting)
        self.installed = True
        return True

    def _noting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def noted(*args: Any, **kwargs: Any) -> Any:
            if capture.first_activity is None:
                capture.first_activity = capture._recorder.elapsed()
            return original(*args, **kwargs)

        return noted

    def uninstall(self) -> None:
        self._patches.restore()
        self.installed = False

    def begin(self) -> None:
        self.first_activity = None


def tensorflow_events(reading: Reading, at: float | None = None) -> list[TraceEvent]:
    """The trace events a TensorFlow reading stands for: its peak as one allocation from time `at`
    (TensorFlow's first activity in the test; the start of the test when unknown)."""
    if not reading.available or not reading.peak_bytes_in_use:
        return []
    return [TraceEvent(ALLOCATE, 1, int(reading.peak_bytes_in_use), at or 0.0, 0, 0, SOURCE, PEAK_LABEL)]
