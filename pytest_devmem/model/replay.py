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
from .pool.tracing import replay
from .trace import ALLOCATE, FREE, Trace


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
    at_peak: dict[str, int] = field(default_factory=dict)  # who held the memory at the peak, largest first

    def to_json(self) -> dict[str, object]:
        return {
            "events": self.events,
            "peak_bytes_in_use": self.peak_bytes_in_use,
            "peak_bytes_reserved": self.peak_bytes_reserved,
            "fragmentation": self.fragmentation,
            "by_source": {name: figures.to_json() for name, figures in sorted(self.by_source.items())},
            "out_of_memory": self.out_of_memory,
            "at_peak": self.at_peak,
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
        at_peak=contributors_at_peak(trace),
    )


TOP_CONTRIBUTORS = 5


def contributor(source: str, label: str) -> str:
    """Who an allocation belongs to, for people: the executable and what for (`jit(layer) temp`),
    or the source where nothing more is known (`pool`, `tensorflow`)."""
    if source == "jax" and label:
        return label
    return source or "unknown"


def contributors_at_peak(trace: Trace, top: int = TOP_CONTRIBUTORS) -> dict[str, int]:
    """The bytes each contributor held live at the moment the trace held most, the `top` largest,
    largest first: what to look at when a test grows. Two passes: find the moment, then sum."""
    sizes: dict[int, int] = {}
    current = peak = 0
    peak_index = -1
    for index, event in enumerate(trace):
        if event.action == ALLOCATE:
            sizes[event.pointer] = event.size
            current += event.size
            if current > peak:
                peak, peak_index = current, index
        elif event.action == FREE and event.pointer in sizes:
            current -= sizes.pop(event.pointer)
    live: dict[int, tuple[str, int]] = {}
    for event in trace.events[: peak_index + 1]:
        if event.action == ALLOCATE:
            live[event.pointer] = (contributor(event.source, event.label), event.size)
        elif event.action == FREE:
            live.pop(event.pointer, None)
    held: dict[str, int] = {}
    for name, size in live.values():
        held[name] = held.get(name, 0) + size
    ranked = sorted(held.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:top])


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
