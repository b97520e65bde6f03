"""One pool and a trace: record what a workload asks of a pool, or replay a trace into any pool.

The model of the machine (`model/machine/`) replays a test's trace over devices and allocators;
this is the single-pool case, for the pool as a library (RMM's logging adaptor and replay benchmark
do the same).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import InvalidFreeError, OutOfMemoryError
from ..trace import ALLOCATE_CODE, FAILURE_CODE, FREE_CODE, Trace
from .base import Pool


class TracingPool:
    """Adaptor that records every alloc and free of the pool it wraps, as RMM's logging adaptor does.

    Everything else (stats, memory_map, policy, device...) is the wrapped pool's.
    """

    def __init__(self, pool: Pool, clock: Callable[[], float] = time.perf_counter) -> None:
        self.pool = pool
        self.trace = Trace()
        self._clock = clock

    def alloc(self, nbytes: int) -> int:
        try:
            pointer = self.pool.alloc(nbytes)
        except OutOfMemoryError:
            self.trace.add(FAILURE_CODE, 0, int(nbytes), self._clock(), threading.get_ident())
            raise
        self.trace.add(ALLOCATE_CODE, pointer, int(nbytes), self._clock(), threading.get_ident())
        return pointer

    def free(self, handle: int) -> None:
        size = self.pool.size_of(handle)  # type: ignore[attr-defined]
        self.pool.free(handle)
        self.trace.add(FREE_CODE, handle, size, self._clock(), threading.get_ident())

    def __getattr__(self, name: str):
        return getattr(self.pool, name)


@dataclass(frozen=True)
class ReplayResult:
    """How a replay went: whether every allocation fit, where the first one failed, and the pool's stats."""

    ok: bool
    events_replayed: int
    peak_live_bytes: int
    stats: dict[str, int | float]
    error: OutOfMemoryError | None = None
    failed_at: int | None = None


def replay(trace: Trace, pool: Pool, *, stop_on_oom: bool = True) -> ReplayResult:
    """Run a trace's allocations and frees against `pool`, mapping recorded pointers to new ones,
    whatever device or allocator each event names.

    Recorded failures are skipped (they held nothing). With `stop_on_oom` the replay ends at the first
    allocation the pool cannot serve; otherwise that buffer is dropped, its later free ignored, and
    the replay goes on. A free of a pointer the trace never allocated is an InvalidFreeError.
    """
    mapping: dict[int, int] = {}
    sizes: dict[int, int] = {}
    dropped: set[int] = set()
    live = peak = 0
    first_error: OutOfMemoryError | None = None
    failed_at: int | None = None
    index = -1
    alloc, free = pool.alloc, pool.free
    for index, (action, pointer, size) in enumerate(zip(trace.actions, trace.pointers, trace.sizes)):
        if action == ALLOCATE_CODE:
            try:
                mapping[pointer] = alloc(size)
            except OutOfMemoryError as exc:
                if first_error is None:
                    first_error, failed_at = exc, index
                if stop_on_oom:
                    break
                dropped.add(pointer)
                continue
            sizes[pointer] = size
            live += size
            if live > peak:
                peak = live
        elif action == FREE_CODE:
            handle = mapping.pop(pointer, None)
            if handle is None:
                if pointer in dropped:
                    dropped.discard(pointer)
                    continue
                raise InvalidFreeError(f"trace event {index}: free of {pointer:#x}, which the trace never allocated")
            free(handle)
            live -= sizes.pop(pointer)
    return ReplayResult(
        ok=first_error is None,
        events_replayed=failed_at if stop_on_oom and failed_at is not None else index + 1,
        peak_live_bytes=peak,
        stats=pool.stats(),
        error=first_error,
        failed_at=failed_at,
    )
