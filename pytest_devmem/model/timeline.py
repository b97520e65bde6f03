"""A trace replayed step by step, for pictures: bytes in use and reserved after every event, who held
the memory at the peak, and the pool's layout at that moment. No pytest, no plotting library here."""

from __future__ import annotations

from dataclasses import dataclass, field

from .device import SimulatedDevice
from ..errors import OutOfMemoryError
from .pool import Policy, make_pool
from .pool.base import Pool
from .trace import ALLOCATE, FREE, Trace
from .replay import contributor


@dataclass(frozen=True)
class Chunk:
    """One piece of a region at the peak: where, how big, and whose (empty for free memory)."""

    region: int  # the region's index, in the order the pool took them
    offset: int  # bytes from the region's start
    size: int
    owner: str  # contributor name, or "" when free


@dataclass
class Timeline:
    regime: str
    device: str
    capacity: int
    in_use: list[int] = field(default_factory=list)  # after each event
    reserved: list[int] = field(default_factory=list)  # after each event
    peak_index: int = -1
    at_peak: dict[str, int] = field(default_factory=dict)  # owner -> bytes in use at the peak, largest first
    chunks_at_peak: list[Chunk] = field(default_factory=list)
    region_sizes: list[int] = field(default_factory=list)
    out_of_memory_at: int | None = None

    @property
    def peak_in_use(self) -> int:
        return self.in_use[self.peak_index] if self.peak_index >= 0 else 0


def build_timeline(trace: Trace, policy: Policy, capacity: int, device: str) -> Timeline:
    """Replay `trace` under `policy` on a fresh simulated device of `capacity`: the figures after
    every event, then (a second replay, up to the peak) who held what and the pool's chunks then."""
    timeline = Timeline(policy.label, device, capacity)
    _replay(trace, policy, capacity, timeline, stop_at=None)
    if timeline.peak_index >= 0:
        _replay(trace, policy, capacity, timeline, stop_at=timeline.peak_index)
    return timeline


def _replay(trace: Trace, policy: Policy, capacity: int, timeline: Timeline, stop_at: int | None) -> None:
    pool = make_pool(SimulatedDevice(capacity), policy)
    handles: dict[int, int] = {}
    owners: dict[int, str] = {}  # pool handle -> contributor
    try:
        for index, event in enumerate(trace):
            if event.action == ALLOCATE:
                try:
                    handle = pool.alloc(event.size)
                except OutOfMemoryError:
                    if timeline.out_of_memory_at is None:
                        timeline.out_of_memory_at = index
                    handle = 0
                if handle:
                    handles[event.pointer] = handle
                    owners[handle] = contributor(event.source, event.label)
            elif event.action == FREE and event.pointer in handles:
                handle = handles.pop(event.pointer)
                pool.free(handle)
                owners.pop(handle, None)
            if stop_at is None:
                in_use = int(pool.bytes_in_use)  # type: ignore[attr-defined]
                timeline.in_use.append(in_use)
                timeline.reserved.append(int(pool.pool_bytes) or int(pool.bytes_reserved))  # type: ignore[attr-defined]
                if timeline.peak_index < 0 or in_use > timeline.in_use[timeline.peak_index]:
                    timeline.peak_index = index
            elif index == stop_at:
                _snapshot(timeline, pool, owners)
                return
    finally:
        pool.close()


def _snapshot(timeline: Timeline, pool: Pool, owners: dict[int, str]) -> None:
    held: dict[str, int] = {}
    for handle, owner in owners.items():
        held[owner] = held.get(owner, 0) + pool.allocated_size(handle)  # type: ignore[attr-defined]
    timeline.at_peak = dict(sorted(held.items(), key=lambda item: (-item[1], item[0])))
    chunks = getattr(pool, "chunks", None)
    if chunks is None:  # ondemand: each buffer is its own allocation from the device
        sizes = [pool.allocated_size(handle) for handle in owners]  # type: ignore[attr-defined]
        timeline.region_sizes = sizes
        timeline.chunks_at_peak = [Chunk(i, 0, size, owner) for i, (size, owner) in enumerate(zip(sizes, owners.values()))]
        return
    starts: dict[int, int] = {}
    result = []
    for region_start, address, size, in_use, _ in chunks():
        region = starts.setdefault(region_start, len(starts))
        result.append(Chunk(region, address - region_start, size, owners.get(address, "?") if in_use else ""))
    timeline.chunks_at_peak = result
    timeline.region_sizes = [size for _, size in pool.regions()]  # type: ignore[attr-defined]
