"""Capturing each test's device-allocation trace: one recorder, one small capture per framework.

`TraceRecorder` collects the events of one test in the order they happen; the captures feed it:
`jax.JaxCapture` (executable runs, transfers, deletions; `jax/` also holds the GPU and TPU compile
targets), `fixture_pool.RecordingPool` (the `devmem` fixture's calls). `tensorflow.TensorFlowCapture`
reads TensorFlow's allocator events from its profiler when the window closes, and `measurement` puts
them in time order beside the recorder's. `imports.on_import` runs a capture's install as soon as its
framework is imported, even inside a test. Each capture imports its framework lazily; nothing here
imports pytest.
"""

from __future__ import annotations

from .recorder import TraceRecorder

__all__ = ["TraceRecorder"]
