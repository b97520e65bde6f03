"""The `devmem` fixture's pool calls as trace events."""

from __future__ import annotations

import os
import sys
from typing import Any

from ..errors import InvalidRequestError, OutOfMemoryError
from ..model.pool.base import Pool
from .recorder import TraceRecorder

SOURCE = "pool"


class RecordingPool:
    """Adaptor over the fixture's pool that reports each alloc and free to the test's recorder, and
    refuses both once its test has ended (a pool kept in a global would otherwise go on taking the
    session's device and never give it back).

    Everything else (stats, memory_map, policy, device...) is the wrapped pool's.
    """

    def __init__(self, pool: Pool, recorder: TraceRecorder, device: str = "cpu:0") -> None:
        """`device`: the device its events name, as JAX's and TensorFlow's name theirs (`cpu:0`, `gpu:0`)."""
        self.pool = pool
        self._recorder = recorder
        self.device_name = device
        self._ids: dict[int, tuple[int, int]] = {}  # handle -> (trace id, bytes asked)
        self.closed = False

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise InvalidRequestError(
                f"devmem pool {what} after its test ended: the fixture closed this pool and gave its memory back; "
                "use the devmem fixture of the test that allocates"
            )

    def close(self) -> None:
        self.closed = True
        self.pool.close()

    def alloc(self, nbytes: int) -> int:
        self._check_open(f"alloc({nbytes!r})")
        frame = sys._getframe(1)
        label = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"  # who asked, for people
        site = f"{frame.f_code.co_filename}:{frame.f_lineno}"  # the line, as the frameworks' captures name theirs
        try:
            handle = self.pool.alloc(nbytes)
        except OutOfMemoryError as error:
            # the request happened: the trace keeps it, so the model replays the failure with its analysis
            self._recorder.allocate(int(nbytes), SOURCE, label, self.device_name, site)
            __tracebackhide__ = True  # the test's line is where it failed; the pool's insides say nothing more
            raise error.with_traceback(None) from None
        size = int(nbytes)
        self._ids[handle] = (self._recorder.allocate(size, SOURCE, label, self.device_name, site), size)
        return handle

    def free(self, handle: int) -> None:
        self._check_open(f"free({handle!r})")
        self.pool.free(handle)
        buffer_id, _ = self._ids.pop(handle, (0, 0))
        self._recorder.free(buffer_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)
