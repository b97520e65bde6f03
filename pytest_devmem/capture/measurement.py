"""Measuring one test at a time: the trace recorder, the framework captures and the raw sources,
bracketed around the test; what they saw comes out as one trace (the captures' streams merged in time
order, `merge`) and the raw readings. No pytest here.

A process the test starts is in no capture of this one: a child made by `os.fork` (or multiprocessing's
`fork` start method) writes into its own copy of the recorder, which is never read; one started by
`subprocess` or multiprocessing's `spawn` or `forkserver` is a new program. Their memory is not
measured, and a window that saw one says so rather than recording the child's work as nothing. Forks
are counted by `os.register_at_fork` (CPython calls `before` in the parent ahead of every `os.fork`).
The others are counted by `subprocess.Popen` and multiprocessing's `Process.start`, wrapped once
(a forkserver's child is forked by the server, so no hook of this process sees it).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing.process
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..model.device import Device, DeviceKind
from ..model.framework_rules import BY_SOURCE, JAX, TENSORFLOW
from ..model.trace import ALLOCATE, START, Trace, TraceEvent
from . import TraceRecorder
from .framework import FrameworkCapture
from .imports import forget, on_import
from .jax import JaxCapture, jax_backend_started
from .sources import Reading, Sampler, Source
from .sources.jax import JaxSource, ran_nothing
from .sources.nvml import NvmlSource
from .sources.pool import PoolSource
from .sources.tensorflow import TensorFlowSource
from .tensorflow import TensorFlowCapture

STARTED_BEFORE = "started by a shared fixture"
"""The label of a `start` event of an allocator a fixture the test shares with others started."""
KEPT_BEFORE = "what shared fixture {} keeps"
"""The label of a `start` event holding a buffer such a fixture keeps, the fixture's name in it (an
out of memory there reads "could not allocate 1.00 GiB for what shared fixture params keeps")."""
FIRST_KEPT_POINTER = 2**64 - 1
"""The pointer of the first `start` event, the next one below it...: above every address and id a
capture records (JAX's ids count up from 1, TensorFlow's are addresses), so none is met again."""

_forks = 0


def _count_fork() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(before=_count_fork)

_started = 0


def _counting(start: Callable[..., None]) -> Callable[..., None]:
    """`start`, counting each process it starts that is not a fork (a fork counted itself). A probe
    run by an import (TensorFlow's runs `uname -p`) is not counted: which test imports first varies."""

    @functools.wraps(start)
    def counted(*args: Any, **kwargs: Any) -> None:
        global _started
        forks = _forks
        start(*args, **kwargs)
        frame: Any = sys._getframe(1)
        while frame is not None and not frame.f_code.co_filename.startswith("<frozen importlib"):
            frame = frame.f_back
        _started += _forks == forks and frame is None

    counted.devmem_counts = True  # type: ignore[attr-defined]
    return counted


for _owner, _name in ((subprocess.Popen, "__init__"), (multiprocessing.process.BaseProcess, "start")):
    if not hasattr(getattr(_owner, _name), "devmem_counts"):  # once, even if this module is loaded again
        setattr(_owner, _name, _counting(getattr(_owner, _name)))


def merge(*streams: Trace | Iterable[TraceEvent]) -> Trace:
    """The streams' events in time order (stable: equal times keep stream order), with buffer ids
    renumbered 1, 2, 3... across streams in allocation order, so ids never collide. One non-empty
    stream that is a Trace comes back as it is (the recorder numbered it already)."""
    listed = [stream if isinstance(stream, Trace) else list(stream) for stream in streams]
    present = [stream for stream in listed if len(stream)]
    if len(present) == 1 and isinstance(present[0], Trace):
        return present[0]
    tagged = [
        (event.time, index, position, event)
        for index, stream in enumerate(present)
        for position, event in enumerate(stream)
    ]
    tagged.sort(key=lambda item: item[:3])
    numbers: dict[tuple[int, int], int] = {}
    merged = Trace()
    for _, index, _, event in tagged:
        key = (index, event.pointer)
        if event.action == ALLOCATE or key not in numbers:
            numbers[key] = len(numbers) + 1
        merged.append(event)
        merged.pointers[-1] = numbers[key]
    return merged


def _tensorflow_kept(readings: list[Reading], first_calls: int) -> dict[str, int]:
    """TensorFlow's allocator holding more after the test than before it (its current bytes), less
    what its tf.functions' first calls keep, whichever test called them first."""
    for reading in readings:
        if reading.source == "tensorflow" and reading.available:
            kept = (
                int(reading.figures.get("current_bytes", 0)) - int(reading.figures.get("start_bytes", 0)) - first_calls
            )
            return {"tensorflow": kept} if kept > 0 else {}
    return {}


@dataclass
class Captured:
    """What one test left: its recorded events and each raw source's reading."""

    events: Trace
    readings: list[Reading]
    notes: list[str] = field(default_factory=list)
    tensorflow_events: Trace | None = field(default_factory=Trace)  # None: TensorFlow ran and could not be measured
    compiled: list[str] | None = None  # executables JAX compiled during the test; None where JAX is not traced
    kept: dict[str, int] | None = None  # what the frameworks still hold that the test allocated; None: not checked
    runs: dict[str, int] = field(default_factory=dict)  # JAX executables run in the test, by name
    # per executable: whose compile sized it, where not the CPU's
    sizes: dict[str, dict[str, object]] = field(default_factory=dict)
    # per function, the executables the test needed, compiled or cached (JaxWindow.needed)
    needed: dict[str, int] | None = None
    # per function run: its executables' shapes, where it is defined (JaxWindow.functions)
    functions: dict[str, dict[str, object]] = field(default_factory=dict)
    buffers: dict[str, dict[str, object]] = field(default_factory=dict)  # per executable: its buffers at its peak
    padded_sizes: dict[int, set[int]] = field(default_factory=dict)  # a TPU's tiled shard size -> its dense sizes
    # the target compiler's entries its executables and arrays were sized by, by cache key (compile_store.py)
    compiler_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    # per owner of a pause of this window (a shared fixture set up in it): the allocators it started
    # and the buffers it keeps, (source, device, bytes), in order (`FixtureNotes.started_by`)
    started_by: dict[object, list[tuple[str, str, int]]] = field(default_factory=dict)
    # per such owner: the target compiler's entries it needed (the programs it ran), by cache key
    needed_by: dict[object, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # what the shared fixtures it uses started and keep, whichever test set them up, in order:
    # (source, device, bytes, the fixture's name) (the caller says; a `start` event each, first)
    started: list[tuple[str, str, int, str]] = field(default_factory=list)


def _install(capture: FrameworkCapture, module: object) -> None:
    """Install `capture` as its framework's module is imported."""
    capture.install()


class Measurement:
    """The session's measuring kit. `start()` before a test's setup, `stop()` after its call."""

    def __init__(self, device: Device, sizer: Any = None) -> None:
        """`sizer`: a GPU sizer (capture/jax/gpu_compile.py) for JAX's temp sizes; None keeps the CPU compile's."""
        self.device = device
        self.recorder = TraceRecorder()
        self.jax_capture = JaxCapture(self.recorder, sizer)
        self.tensorflow_capture = TensorFlowCapture(self.recorder)
        self.captures: dict[str, FrameworkCapture] = {  # one per framework with a module to watch
            JAX.source: self.jax_capture,
            TENSORFLOW.source: self.tensorflow_capture,
        }
        self.sampler = Sampler()
        self.pool_source = PoolSource()
        self.sources: list[Source] = [self.pool_source, JaxSource(), TensorFlowSource()]
        if device.kind is DeviceKind.CUDA and device.index is not None:  # NVML reads what its driver says
            self.sources.insert(0, NvmlSource(self.sampler, device.index, uuid=device.uuid))
        self._watching = False
        self._waiting: list[tuple[str, Callable[[Any], None]]] = []  # import hooks, forgotten at close
        self._warned_platform = False
        self._children_before = (0, 0)  # this process's forks and started processes when the window opened

    def watch_frameworks(self) -> None:
        """Hook each framework now if it is imported, else the moment it is (a test body may import it)."""
        if not self._watching:
            self._watching = True
            for source, capture in self.captures.items():
                waiting = (str(BY_SOURCE[source].module), functools.partial(_install, capture))
                self._waiting.append(waiting)
                on_import(*waiting)

    def start(self, thaw: bool = False) -> None:
        """Open the test's window. `thaw`: first return what earlier windows froze to the collector
        (the first test of a module: what the last module's fixtures left is collected then)."""
        self.watch_frameworks()
        # Python's collector frees cyclic garbage (framework tensors among it) when its allocation
        # counters say so, and those counters carry what ran before: a full collection here starts
        # every test's counters at zero, so its buffers are freed at the same moments in any order.
        # What survives it is frozen (kept out of later collections, as gc.freeze documents for
        # long-lived objects), so the next test's collection scans only what is new: milliseconds,
        # where a full scan of a process with JAX and TensorFlow loaded takes about half a second.
        # Frozen objects are never collected, so they are thawed once per module: a Keras model a
        # module's fixture built (cycles) is freed after the module, with its device memory.
        if thaw:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
        for source in self.sources:  # first: what they ask the frameworks is no activity of the test's
            source.start()
        self._children_before = (_forks, _started)
        self.recorder.begin()
        for capture in self.captures.values():
            capture.begin()
        self.sampler.resume()

    def stop(self, check_leaks: bool = False) -> Captured:
        """Close the test's window. With `check_leaks`, first collect garbage, then note what the
        frameworks still hold of what the test itself allocated (its leak), by who allocated it."""
        self.sampler.pause()
        kept: dict[str, int] | None = None
        if check_leaks:
            gc.collect()
            kept = self.recorder.held_since_mark("jax")
        events = self.recorder.end()
        readings = [source.stop() for source in self.sources]
        jax_ran = any(events.names[code] == "jax" for code in set(events.sources)) or self.jax_capture.window.failure
        if self.jax_capture.installed and not jax_ran:  # JAX's counters hold what earlier tests left
            readings = [ran_nothing() if reading.source == "jax" else reading for reading in readings]
        tensorflow_events, tensorflow_notes = self.tensorflow_capture.end(
            next((r for r in readings if r.source == "tensorflow"), None)
        )
        if kept is not None:
            kept.update(_tensorflow_kept(readings, self.tensorflow_capture.first_calls_kept))
        notes = []
        platform_problem = self.jax_platform_problem()
        if platform_problem:
            notes.append(platform_problem)
            if not self._warned_platform:
                self._warned_platform = True
                warnings.warn(RuntimeWarning(platform_problem), stacklevel=1)
        if "jax" in sys.modules and not self.jax_capture.installed:
            notes.append(self.jax_capture.note or "JAX is imported but its allocations could not be traced")
        if self.jax_capture.window.failure:
            notes.append(self.jax_capture.window.failure)
        for count, how in (
            (_forks - self._children_before[0], "forked {} child process(es) (os.fork, or multiprocessing's 'fork'"),
            (
                _started - self._children_before[1],
                "started {} process(es) (subprocess, or multiprocessing's 'spawn' or 'forkserver'",
            ),
        ):
            if count:  # a child's memory is in no capture here
                notes.append(
                    f"the test {how.format(count)} start method): what they allocated is not captured; "
                    "only this process's memory is in the trace"
                )
        sizer = self.jax_capture.sizer
        for problem in sizer.take_cache_problems() if sizer is not None else ():  # a bad cache entry: a miss
            notes.append(problem)
            warnings.warn(RuntimeWarning(problem), stacklevel=1)
        unsized = sorted(getattr(self.jax_capture.sizer, "unsized_arrays", ()) or ())
        if unsized and self.jax_capture.window.executables:
            notes.append(
                f"arrays of dtype {', '.join(unsized)} keep their dense size: the target's compiler could not size them"
            )
        unknown = sorted(self.jax_capture.window.temp_unknown)
        if unknown:
            notes.append("no memory analysis for " + ", ".join(unknown) + ": their temp buffers are not in the trace")
        notes.extend(tensorflow_notes)
        window, installed = self.jax_capture.window, self.jax_capture.installed
        return Captured(
            events,
            readings,
            notes,
            tensorflow_events,
            list(window.compiled) if installed else None,
            kept,
            dict(window.executables),
            window.sizes() if self.jax_capture.sizer is not None else {},
            window.needed() if installed else None,
            window.functions() if installed else {},
            window.buffers() if installed else {},
            self.jax_capture.padded_sizes(),
            self.jax_capture.window_compiler_entries() if self.jax_capture.installed else {},
            self.recorder.fixtures.started_by(),
            {
                owner: self.jax_capture.compiler_entries(keys)
                for owner, keys in self.recorder.fixtures.entries_by().items()
            },
        )

    def jax_platform_problem(self) -> str | None:
        """On a GPU session, JAX must run on the GPU: jaxlib falls back to CPU, with only a log line,
        when it cannot load its CUDA plugin or refuses its options. Never take that for the GPU."""
        if self.device.kind is not DeviceKind.CUDA or not jax_backend_started():
            return None
        try:
            backend = str(sys.modules["jax"].default_backend())
        except Exception:
            return None
        if backend == "gpu":
            return None
        return (
            f"JAX runs on {backend}, not on {self.device.name}: jaxlib did not take the GPU (no CUDA jaxlib installed, "
            "or options it refuses, such as XLA_CLIENT_MEM_FRACTION and XLA_PYTHON_CLIENT_MEM_FRACTION both set); "
            "its memory here is not the GPU's"
        )

    def trace_of(self, captured: Captured) -> tuple[Trace, list[str], bool]:
        """The test's one trace, every capture's events merged on one clock, after a `start` event
        for each allocator started and each buffer kept before it (`Captured.started`); the notes
        that go with it (what could not be traced, and why); and whether a framework ran but nothing
        traced it."""
        trace = merge(captured.events, captured.tensorflow_events or Trace())
        traced_nothing = (not len(trace) and bool(captured.notes)) or captured.tensorflow_events is None
        if captured.started:
            trace = trace.after(
                TraceEvent(
                    START,
                    FIRST_KEPT_POINTER - index,
                    size,
                    source=source,
                    label=KEPT_BEFORE.format(fixture) if size else STARTED_BEFORE,
                    device=device,
                )
                for index, (source, device, size, fixture) in enumerate(captured.started)
            )
        return trace, list(captured.notes), traced_nothing

    def close(self) -> None:
        gc.unfreeze()  # the process's collector as it was: nothing stays frozen after the session
        while self._waiting:  # a framework first imported after this session installs nothing of it
            forget(*self._waiting.pop())
        try:
            for source in self.sources:
                source.close()
            self.sampler.close()
        finally:  # every framework's patches go (and the TPU sizer's worker stops) even where one fails
            with contextlib.ExitStack() as uninstalls:
                for capture in self.captures.values():
                    uninstalls.callback(capture.uninstall)
