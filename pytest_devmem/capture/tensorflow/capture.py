"""TensorFlow's allocations in one test window: a profiler session around the window, its allocator
events made trace events; where the profiler cannot serve, the allocator's peak as an upper bound."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from ...model.trace import ALLOCATE_CODE, Trace
from ..framework import Patches
from ..recorder import TraceRecorder
from ..sources.base import Reading
from .conversion import copy_arrays_off_aligned
from .events import ONEDNN_CPU, SOURCE, WindowClock, trace_events
from .op_lines import OpLines
from .profiler import ProfilerRun, ProfilerUnavailable
from .warmup import warm_up
from .xspace import read_profile

PEAK_LABEL = "peak of TensorFlow's allocator over the test (get_memory_info): an upper bound"
OWN_SESSION = "the test started a TensorFlow profiler session of its own (TensorFlow allows one at a time)"


class TensorFlowWindow(NamedTuple):
    """What TensorFlow allocated in one window. `events` is None when TensorFlow ran in it and
    nothing could measure it (the record then has no figure, never 0); `notes` say why and what
    is left out."""

    events: Trace | None
    notes: list[str]


class TensorFlowCapture:
    """TensorFlow's allocator events, one profiler session per test window.

    `install()` once TensorFlow is imported, `begin()` when a window opens (after the recorder's),
    `end(reading)` when it closes (after the recorder's, with the TensorFlow source's reading for
    the fallback). A test that starts a profiler session of its own gets the profiler: the capture
    gives way, and that window falls back to the peak.
    """

    name = SOURCE

    def __init__(self, recorder: TraceRecorder) -> None:
        self._recorder = recorder
        self._patches = Patches()
        self._profiler: ProfilerRun | None = None
        self._has_gpu: bool | None = None
        self._in_window = False
        self._clock: WindowClock | None = None
        self._problem: str | None = None  # why this window has no profile
        self.installed = False
        self._warmed = False  # the warm-up step has run (warmup.py)
        self._op_lines = OpLines()  # each tf.function op's Python line, read once per function and window
        self._reading_lines = False  # from a window's start until its events are converted
        self.note = ""
        self.first_calls_kept = 0  # the window's tf.functions' first calls still hold: no leak of the test's

    # -- the process -------------------------------------------------------------------------

    def install(self) -> bool:
        """Ready the profiler (TensorFlow is imported); start a session if a window is open."""
        if self.installed:
            return True
        try:
            self._profiler = ProfilerRun()
        except ProfilerUnavailable as exc:
            self.note = str(exc)
            return False
        self._patches.replace(self._profiler.module, "ProfilerSession", self._giving_way)
        copy_arrays_off_aligned(self._patches)  # NumPy arrays allocate alike in every run (conversion.py)
        self._read_functions_before_they_go()
        self.installed = True
        if self._in_window:  # imported inside the test: trace from here on
            self._start()
        return True

    def uninstall(self) -> None:
        self._patches.restore()
        if self._profiler is not None:
            self._profiler.close()
            self._profiler = None
        self.installed = False

    def _giving_way(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def ProfilerSession(*args: Any, **kwargs: Any) -> Any:
            profiler = capture._profiler
            if profiler is not None and profiler.active:
                profiler.abandon()
                capture._problem = OWN_SESSION
            return original(*args, **kwargs)

        ProfilerSession.__wrapped__ = original  # type: ignore[attr-defined]  # what a later ProfilerRun uses
        return ProfilerSession

    def _read_functions_before_they_go(self) -> None:
        """A tf.function's runtime function is removed when its last Python holder goes
        (`AtomicFunction.__del__`), at a moment the garbage collector may choose: during a window,
        its ops' lines are read just before, so they are known whenever it went (a function local
        to the test, collected before the window's end), the same in every selection."""
        try:
            from tensorflow.python.eager.polymorphic_function import atomic_function
        except ImportError:
            return
        if "__del__" not in vars(getattr(atomic_function, "AtomicFunction", object)):
            return  # this TensorFlow removes its functions otherwise: those gone by the window's end have no line
        capture = self

        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def __del__(function: Any) -> None:
                if capture._reading_lines:
                    try:
                        capture._op_lines.read(function.name.decode())
                    except Exception:  # inside the collector: never raise there
                        pass
                original(function)

            return __del__

        self._patches.replace(atomic_function.AtomicFunction, "__del__", wrap)

    # -- one window ----------------------------------------------------------------------------

    def begin(self) -> None:
        self.first_calls_kept = 0
        self._in_window = True
        self._reading_lines = True
        self._problem = None
        self._clock = None
        if self.installed:
            self._start()

    def _start(self) -> None:
        assert self._profiler is not None
        if not self._warmed:  # at the first window, after the session has configured TensorFlow's devices
            self._warmed = True
            tensorflow = sys.modules.get("tensorflow")
            if tensorflow is not None and hasattr(tensorflow, "function"):
                with self._recorder.paused():  # no test's: every test is then measured as one after it
                    self.note = warm_up(tensorflow) or self.note
        try:
            self._profiler.start()
        except ProfilerUnavailable as exc:
            self._problem = str(exc)
            return
        self._clock = WindowClock.read(self._recorder.now)

    def end(self, reading: Reading | None = None) -> TensorFlowWindow:
        """Close the window: its trace events, in time order on the recorder's clock, and notes."""
        try:
            return self._end(reading)
        finally:
            self._reading_lines = False
            self._op_lines.forget()  # read again in the next window that asks: nothing held after this one

    def _end(self, reading: Reading | None) -> TensorFlowWindow:
        self._in_window = False
        profiler, clock = self._profiler, self._clock
        if not self.installed or profiler is None:
            if "tensorflow" not in sys.modules:
                return TensorFlowWindow(Trace(), [])
            return peak_window(reading, self.note or "TensorFlow's profiler is not available")
        if self._problem is not None or clock is None or not profiler.active:
            profiler.abandon()
            return peak_window(reading, self._problem or "TensorFlow's profiler was not running")
        try:
            space = profiler.stop()
        except ProfilerUnavailable as exc:
            return peak_window(reading, str(exc))
        profile = read_profile(space, start_ns=clock.wall_ns)
        if not profile.events:
            if not profile.host_events:
                return TensorFlowWindow(Trace(), [])  # TensorFlow did nothing in this window
            if reading is not None and not reading.available:
                return TensorFlowWindow(None, [no_statistics(reading)])
            if reading is not None and reading.peak_bytes_in_use:
                return peak_window(reading, "TensorFlow's allocator recorded no allocation events")
            return TensorFlowWindow(Trace(), [])
        converted = trace_events(
            profile.events,
            clock,
            end=self._recorder.ended_at,
            tensorflow_has_gpu=self._tensorflow_has_gpu(),
            paused=self._recorder.paused_spans,
            site_of=self._op_lines.site,
        )
        self.first_calls_kept = converted.first_calls_kept
        for time, device, size, kept in converted.paused:  # a shared fixture's: the allocator it started
            self._recorder.fixtures.note_at(time, SOURCE, device, size, kept)
        notes = []
        if profile.functions and len(converted.events):  # a note beside no event marks a test unmeasured
            notes.append(
                f"the kernels of {', '.join(sorted(profile.functions))} hold any constants made at their first call in the process "
                "(on a GPU, in its memory while the function lives): not in the trace, nor is the host's work of that call"
            )
        if converted.host_allocators:
            notes.append(
                f"TensorFlow's host allocations ({', '.join(sorted(converted.host_allocators))}) are host memory beside its GPU: not in the trace"
            )
        if ONEDNN_CPU in converted.allocators:
            notes.append(
                "TensorFlow's CPU allocator here is oneDNN's, which records only its large allocations: "
                "TF_CPU_ALLOCATOR_USE_BFC=true was not in effect when TensorFlow started, so its small ones are not in the trace"
            )
        return TensorFlowWindow(converted.events, notes)

    def _tensorflow_has_gpu(self) -> bool:
        if self._has_gpu is None:
            try:
                self._has_gpu = bool(sys.modules["tensorflow"].config.list_physical_devices("GPU"))
            except Exception:
                self._has_gpu = False
        return self._has_gpu


def no_statistics(reading: Reading) -> str:
    return (
        "TensorFlow ran but its allocator keeps no statistics and records no allocations here "
        f"({reading.note or 'no statistics'}; TF_CPU_ALLOCATOR_USE_BFC=true, set before TensorFlow starts, gives them on every CPU): not measured"
    )


def peak_window(reading: Reading | None, why: str) -> TensorFlowWindow:
    """The fallback: TensorFlow's peak over the test (its source's reading) as one allocation held
    for the whole window, an upper bound of what its allocator held at any moment."""
    if reading is None or reading.unused:
        return TensorFlowWindow(Trace(), [])
    if not reading.available:
        return TensorFlowWindow(
            Trace(),
            [f"TensorFlow's allocations are not measured: {why}, and {reading.note or 'it keeps no statistics'}"],
        )
    peak = int(reading.peak_bytes_in_use or 0)
    if peak <= 0:
        return TensorFlowWindow(Trace(), [])
    device = str(reading.figures.get("device", "CPU:0")).lower()
    note = f"{why}: TensorFlow's part of the trace is its allocator's peak over the test (get_memory_info), held for the whole test: an upper bound"
    trace = Trace()
    trace.add(ALLOCATE_CODE, 1, peak, 0.0, 0, 0, SOURCE, PEAK_LABEL, device)
    return TensorFlowWindow(trace, [note])
