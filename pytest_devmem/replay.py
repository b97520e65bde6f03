"""A test's figures from its trace: replayed into a fresh pool of its regime on a twin of the device.

This is the one path every figure in a record takes (regime -> trace -> pool -> record), so the same
work gives the same figures in any test order, process or xdist worker. The twin is a simulated
device of the session device's capacity: replaying never touches a real GPU, and what other tests
or processes hold does not leak into a test's figures. No pytest and no frameworks here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .device import SimulatedDevice
from .pool import Policy, make_pool
from .pool.trace import ALLOCATE, FREE, Trace, replay


@dataclass(frozen=True)
class SourceFigures:
    """One source's share of a trace (bytes as asked, before the pool rounds them)."""

    allocations: int
    peak_live_bytes: int

    def to_json(self) -> dict[str, int]:
        return {"allocations": self.allocations, "peak_live_bytes": self.peak_live_bytes}


@dataclass(frozen=True)
class ReplayFigures:
    """What the regime's pool made of a test's trace.

    `peak_bytes_in_use` counts chunks as XLA does (rounded to 256 bytes); `peak_bytes_reserved` is
    what the pool held from the device at most (its regions; under `ondemand`, the buffers);
    `fragmentation` is XLA's `GetFragmentation` at the moment of peak use, None for an empty trace.
    `out_of_memory` is the pool's message for the first allocation that did not fit.
    """

    events: int
    peak_bytes_in_use: int
    peak_bytes_reserved: int
    fragmentation: float | None
    by_source: dict[str, SourceFigures] = field(default_factory=dict)
    out_of_memory: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "events": self.events,
            "peak_bytes_in_use": self.peak_bytes_in_use,
            "peak_bytes_reserved": self.peak_bytes_reserved,
            "fragmentation": self.fragmentation,
            "by_source": {name: figures.to_json() for name, figures in sorted(self.by_source.items())},
            "out_of_memory": self.out_of_memory,
        }


def replay_figures(trace: Trace, policy: Policy, capacity: int) -> ReplayFigures:
    """Replay `trace` under `policy` on a fresh simulated device of `capacity` bytes."""
    if not len(trace):  # nothing allocated: nothing reserved, no pool to speak of
        return ReplayFigures(events=0, peak_bytes_in_use=0, peak_bytes_reserved=0, fragmentation=None)
    pool = make_pool(SimulatedDevice(capacity), policy)
    try:
        result = replay(trace, pool, stop_on_oom=False)
    finally:
        pool.close()
    stats = result.stats
    reserved = int(stats["peak_pool_bytes"]) or int(stats["peak_bytes_reserved"])  # ondemand holds no pool
    return ReplayFigures(
        events=len(trace),
        peak_bytes_in_use=int(stats["peak_bytes_in_use"]),
        peak_bytes_reserved=reserved,
        fragmentation=float(stats["fragmentation_at_peak"]) if len(trace) else None,
        by_source=source_figures(trace),
        out_of_memory=str(result.error) if result.error is not None else None,
    )


def source_figures(trace: Trace) -> dict[str, SourceFigures]:
    """Per source: how many allocations it made and the most bytes it had live at once."""
    live: dict[str, int] = {}
    peaks: dict[str, int] = {}
    counts: dict[str, int] = {}
    sizes: dict[int, tuple[str, int]] = {}
    for event in trace:
        source = event.source or "unknown"
        if event.action == ALLOCATE:
            sizes[event.pointer] = (source, event.size)
            counts[source] = counts.get(source, 0) + 1
            live[source] = live.get(source, 0) + event.size
            peaks[source] = max(peaks.get(source, 0), live[source])
        elif event.action == FREE and event.pointer in sizes:
            owner, size = sizes.pop(event.pointer)
            live[owner] -= size
    return {name: SourceFigures(counts[name], peaks[name]) for name in counts}
