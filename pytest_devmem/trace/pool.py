"""The `devmem` fixture's pool calls as trace events."""

from __future__ import annotations

from typing import Any

from ..pool.base import Pool
from .recorder import TraceRecorder

SOURCE = "pool"


class RecordingPool:
    """Adaptor over the fixture's pool that reports each alloc and free to the test's recorder.

    Everything else (stats, memory_map, policy, device...) is the wrapped pool's.
    """

    def __init__(self, pool: Pool, recorder: TraceRecorder) -> None:
        self.pool = pool
        self._recorder = recorder
        self._ids: dict[int, tuple[int, int]] = {}  # handle -> (trace id, bytes asked)

    def alloc(self, nbytes: int) -> int:
        handle = self.pool.alloc(nbytes)
        size = int(nbytes)
        self._ids[handle] = (self._recorder.allocate(size, SOURCE), size)
        return handle

    def free(self, handle: int) -> None:
        self.pool.free(handle)
        buffer_id, size = self._ids.pop(handle, (0, 0))
        self._recorder.free(buffer_id, size, SOURCE)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)
