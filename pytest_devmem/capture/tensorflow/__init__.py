"""TensorFlow's device memory as trace events.

TensorFlow reports its allocations to its profiler: each BFC allocator records every allocation and
deallocation, with the op that asked. The capture runs one profiler session per test window and
turns those events into the window's trace (`capture`, `profiler`, `xspace`, `events`). On CPU
TensorFlow's allocator is a BFC allocator only with `TF_CPU_ALLOCATOR_USE_BFC=true`, which the
plugin sets before TensorFlow starts (`cpu_allocator`). Nothing here imports TensorFlow until it is
imported by the tests.
"""

from __future__ import annotations

from .capture import PEAK_LABEL, TensorFlowCapture, TensorFlowWindow
from .events import SOURCE

__all__ = ["PEAK_LABEL", "SOURCE", "TensorFlowCapture", "TensorFlowWindow"]
