"""One TensorFlow profiler session per test window, its XSpace read back.

TensorFlow's Python profiler session (`_pywrap_profiler.ProfilerSession`, what
`tf.profiler.experimental.start` uses) hands its XSpace over only as a file: `stop()` returns the
trace-viewer form, from which the allocator events are dropped (they are internal events to it),
while `export_to_tb()` writes the XSpace itself as `plugins/profile/<run>/<host>.xplane.pb` under the
session's folder. So each session writes to a private folder, the file is read and removed. A
session starts in well under a millisecond; collecting and writing cost about 2 µs per event
TensorFlow recorded.

The options ask for the host tracer at level 2 (TraceMe's kInfo, where the allocator events are) and
no device tracer, since the allocator events come from the host. TensorFlow 2.21's binding ignores
every option it is given (its own `tf.profiler.experimental.start` too: "expects an i value"), so
there its defaults apply: the same host level, and the device tracer on where there is a GPU.
TensorFlow logs each session's start, collection and export to stderr (INFO lines from C++): those
calls run with the process's stderr pointed at the null device, which also drops whatever another
thread writes there in that fraction of a millisecond.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

OPTIONS = {"host_tracer_level": 2, "device_tracer_level": 0, "python_tracer_level": 0}


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 on the null device inside: TensorFlow's C++ logging writes there."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _private_folder() -> Path:
    """A new folder for the sessions' files: in memory (/dev/shm) where there is one, else the temp folder."""
    shared = Path("/dev/shm")
    if shared.is_dir() and os.access(shared, os.W_OK):
        try:
            return Path(tempfile.mkdtemp(prefix="pytest-devmem-tensorflow-", dir=shared))
        except OSError:
            pass
    return Path(tempfile.mkdtemp(prefix="pytest-devmem-tensorflow-"))


class ProfilerUnavailable(Exception):
    """TensorFlow's profiler cannot serve this window; the message says why."""


def _xspace_class() -> Any:
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:
        from tensorflow.core.profiler.protobuf import xplane_pb2  # before TensorFlow 2.13
    return xplane_pb2.XSpace


class ProfilerRun:
    """Starts and stops TensorFlow's profiler, one session at a time, and reads each session's XSpace."""

    def __init__(self) -> None:
        try:
            from tensorflow.python.profiler.internal import _pywrap_profiler  # TensorFlow: imported only where it runs

            self._xspace = _xspace_class()
        except ImportError as exc:
            raise ProfilerUnavailable(f"TensorFlow's profiler could not be imported ({exc})") from None
        self.module = _pywrap_profiler
        # kept: the module's name may be patched; a capture's patch (capture.py) names the class it wraps
        self.session_class = inspect.unwrap(_pywrap_profiler.ProfilerSession)
        missing = [name for name in ("start", "export_to_tb") if not hasattr(self.session_class, name)]
        if missing:
            raise ProfilerUnavailable(f"this TensorFlow's profiler session lacks {', '.join(missing)}")
        self._folder: Path | None = None
        self._session: Any = None

    @property
    def active(self) -> bool:
        return self._session is not None

    def start(self) -> None:
        """Start a session; ProfilerUnavailable when TensorFlow refuses (another session is active)."""
        if self._session is not None:
            self.abandon()
        if self._folder is None:
            self._folder = _private_folder()
        session = self.session_class()
        try:
            with _quiet_stderr():
                session.start(str(self._folder), dict(OPTIONS))
        except Exception as exc:  # AlreadyExistsError when another session runs, whatever an old TensorFlow raises
            raise ProfilerUnavailable(
                f"TensorFlow's profiler did not start: {type(exc).__name__}: {exc}".rstrip(": ")
            ) from None
        self._session = session

    def stop(self) -> Any:
        """Stop the session and return its XSpace; ProfilerUnavailable when there is none to read."""
        session, self._session = self._session, None
        if session is None or self._folder is None:
            raise ProfilerUnavailable("no TensorFlow profiler session was running")
        try:
            with _quiet_stderr():
                try:
                    session.export_to_tb()
                finally:
                    session = None  # its end, logged too
        except Exception as exc:
            raise ProfilerUnavailable(
                f"TensorFlow's profiler could not collect its events: {type(exc).__name__}: {exc}"
            ) from None
        files = sorted(self._folder.glob("plugins/profile/*/*.xplane.pb"))
        try:
            if len(files) != 1:
                raise ProfilerUnavailable(
                    f"TensorFlow's profiler wrote {len(files)} XSpace files where one was expected"
                )
            space = self._xspace()
            space.ParseFromString(files[0].read_bytes())
            return space
        except ProfilerUnavailable:
            raise
        except Exception as exc:  # an unreadable file, or bytes protobuf cannot decode
            raise ProfilerUnavailable(f"TensorFlow's profile could not be read: {type(exc).__name__}: {exc}") from None
        finally:
            for file in files:  # the run's folder is named by the second: the next run may reuse it
                file.unlink(missing_ok=True)

    def abandon(self) -> None:
        """Stop the session without reading it (the test wants the profiler for itself)."""
        session, self._session = self._session, None
        if session is not None:
            try:
                with _quiet_stderr():
                    session.stop()
                    session = None
            except Exception:
                pass

    def close(self) -> None:
        self.abandon()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
