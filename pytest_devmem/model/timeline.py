"""What a picture of a test shows, from its one machine run: per device, bytes in use, held and
fragmentation over the events (thinned for long traces without losing a peak), the peak with who
held the memory then, each pool's map at that peak, and where the test ran out of memory. Plain
data for the renderers in `present/plot.py`. No pytest, no plotting library here."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

from .fragmentation import pinning_buffers
from .frameworks import AllocatorSetup
from .machine import MachineRun, MapSnapshot, allocator_name, contributor, holders, maps_after
from .trace import Trace

MAX_POINTS = 2000
"""Points per series a picture draws at most: a longer series keeps, per stretch of events, its
first, lowest, highest and last values, so no peak or dip is lost however long the trace."""


@dataclass(frozen=True)
class Chunk:
    """One piece of a pool region at the peak: where, how big, and whose (empty for free memory)."""

    region: int  # the region's index in its pool, in the order the pool took them
    offset: int  # bytes from the region's start
    size: int
    owner: str  # contributor name, or "" when free
    event: int = -1  # the allocation that made it, -1 when free


@dataclass(frozen=True)
class PoolView:
    """One allocator's regions and chunks at a moment."""

    allocator: str
    region_sizes: list[int]
    chunks: list[Chunk]


@dataclass
class DeviceLane:
    """One device over the test."""

    device: str
    events: list[int] = field(default_factory=list)  # event indexes (after each), thinned
    in_use: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    peak_event: int = -1  # the event of its peak of live data (the lane's line), where `at_peak` is taken
    peak_in_use: int = 0  # the chunks in use at their peak, as BFC counts them (the headline)
    peak_live: int = 0  # the live data at `peak_event`, each request rounded as XLA rounds it
    peak_reserved: int = 0
    at_peak: dict[str, int] = field(default_factory=dict)  # who held the memory at the peak, largest first
    pools_at_peak: list[PoolView] = field(default_factory=list)
    worst_fragmentation: float | None = None
    worst_fragmentation_event: int | None = None
    pools_at_worst: list[PoolView] = field(default_factory=list)  # its pools at (about) their most fragmented
    worst_map_event: int = -1
    pins: list[str] = field(default_factory=list)  # the buffers that pinned the holes then, for people
    pinned: set[int] = field(default_factory=set)  # their allocation events, to mark them on the map
    map_fragmentation: float | None = None  # the fragmentation at the moment its fragmentation map shows


@dataclass
class TimelineView:
    """Everything a picture of one test shows."""

    regime: str
    machine: str
    capacity: int
    events: int
    lanes: list[DeviceLane]
    oom: dict[str, object] | None = None  # the machine's out-of-memory result, with its event
    oom_pools: list[PoolView] = field(default_factory=list)  # the failing device's pools when it failed
    oom_pins: list[str] = field(default_factory=list)
    oom_pinned: set[int] = field(default_factory=set)

    @property
    def headline(self) -> DeviceLane | None:
        return max(self.lanes, key=lambda lane: lane.peak_in_use) if self.lanes else None

    @property
    def peak_in_use(self) -> int:
        lane = self.headline
        return lane.peak_in_use if lane is not None else 0


def thin(xs: list[int], ys: list[int], extra: list[float] | None = None, limit: int = MAX_POINTS) -> list[int]:
    """Which of the points to draw: all of a short series; of a long one, per stretch of events its
    first, lowest, highest and last (and, with `extra`, the highest of that too), in order."""
    count = len(xs)
    if count <= limit:
        return list(range(count))
    buckets = max(1, limit // 4)
    span = (xs[-1] - xs[0]) or 1
    picked: list[int] = []
    start = 0
    for bucket in range(buckets):
        end_x = xs[0] + span * (bucket + 1) / buckets
        end = start
        while end < count and (xs[end] <= end_x or bucket == buckets - 1):
            end += 1
        if end > start:
            part = range(start, end)
            chosen = {start, end - 1, min(part, key=ys.__getitem__), max(part, key=ys.__getitem__)}
            if extra is not None:
                chosen.add(max(part, key=extra.__getitem__))
            picked.extend(sorted(chosen))
        start = end
    return picked


def remap(
    lane: DeviceLane,
    run: MachineRun,
    trace: Trace,
    setups: Mapping[str, AllocatorSetup],
    xs: list[int],
    in_use: list[int],
    reserved: list[int],
    fragmentation: list[float],
) -> None:
    """Map the lane's fragmentation where it matters, when the replay's map of its most fragmented
    moment came after the device had freed nearly everything."""
    mapped_at = lane.worst_map_event
    position = bisect_right(xs, mapped_at) - 1
    if position >= 0 and in_use[position] >= lane.peak_in_use * MEANINGFUL_IN_USE:
        return  # the replay's own map is of a moment that matters
    full = DeviceLane(
        lane.device,
        events=xs,
        in_use=in_use,
        reserved=reserved,
        fragmentation=fragmentation,
        peak_in_use=lane.peak_in_use,
    )
    moment = fragmentation_that_matters(full)
    if moment is None:
        lane.pools_at_worst, lane.pins, lane.pinned = [], [], set()  # nothing worth a map
        return
    event, value = moment
    snapshot = maps_after(trace, setups, run.spec, event).get(lane.device)
    if snapshot is None:
        return
    pins = pinning_buffers(snapshot, trace)
    lane.pools_at_worst, lane.worst_map_event, lane.map_fragmentation = pool_views(snapshot, trace), event, value
    lane.pins, lane.pinned = [pin.text() for pin in pins], {pin.event for pin in pins}


def pool_views(snapshot: MapSnapshot | None, trace: Trace) -> list[PoolView]:
    if snapshot is None:
        return []
    names = trace.names
    views = []
    for pool in snapshot.pools:
        chunks = [
            Chunk(
                region,
                offset,
                size,
                contributor(names[trace.sources[event]], names[trace.labels[event]]) if event >= 0 else "",
                event,
            )
            for region, offset, size, event in pool.chunks
        ]
        views.append(PoolView(allocator_name(pool.source, pool.process), list(pool.regions), chunks))
    return views


MEANINGFUL_IN_USE = 0.10
"""A moment's fragmentation matters to a picture while the device still holds at least this share of
its peak in use: a test that has freed nearly everything leaves holes no allocation of its is waiting for."""


def fragmentation_that_matters(lane: DeviceLane) -> tuple[int, float] | None:
    """The moment to map a device's fragmentation at, from its timeline: the most free but unusable
    bytes (fragmentation x free, free taken as held - in use) while it holds a meaningful share of
    its peak; None when no such moment strands anything."""
    best: tuple[float, int, float] | None = None
    floor = lane.peak_in_use * MEANINGFUL_IN_USE
    for event, in_use, held, fragmentation in zip(lane.events, lane.in_use, lane.reserved, lane.fragmentation):
        if in_use < floor or fragmentation <= 0:
            continue
        stranded = fragmentation * max(0, held - in_use)
        if best is None or stranded > best[0]:
            best = (stranded, event, fragmentation)
    return None if best is None or best[0] <= 0 else (best[1], best[2])


def build_view(
    run: MachineRun, trace: Trace, regime: str, setups: Mapping[str, AllocatorSetup] | None = None
) -> TimelineView:
    """The picture's data from a run made with `timeline=True` (without one: peaks and maps only).
    With the run's `setups`, a device whose most fragmented moment came when it held almost nothing
    is mapped instead where its fragmentation matters (`fragmentation_that_matters`)."""
    lanes = []
    recorded = run.timeline
    for figures in run.devices:
        lane = DeviceLane(
            figures.device,
            peak_event=figures.peak_event,
            peak_in_use=figures.peak_bytes_in_use,
            peak_live=figures.peak_bytes_requested,
            peak_reserved=figures.peak_bytes_reserved,
            at_peak=holders(run.snapshots.get(figures.device), trace, top=None),
            pools_at_peak=pool_views(run.snapshots.get(figures.device), trace),
            worst_fragmentation=figures.worst_fragmentation,
            worst_fragmentation_event=figures.worst_fragmentation_event,
        )
        fragmented = run.fragmented.get(figures.device)
        if fragmented is not None:
            pins = pinning_buffers(fragmented, trace)
            lane.pools_at_worst, lane.worst_map_event = pool_views(fragmented, trace), fragmented.event
            lane.pins, lane.pinned = [pin.text() for pin in pins], {pin.event for pin in pins}
            lane.map_fragmentation = figures.worst_fragmentation
        if recorded is not None:
            xs, in_use, reserved, fragmentation = recorded.series(figures.device)
            keep = thin(xs, in_use, fragmentation)
            lane.events = [xs[i] for i in keep]
            lane.in_use = [in_use[i] for i in keep]
            lane.reserved = [reserved[i] for i in keep]
            lane.fragmentation = [fragmentation[i] for i in keep]
            if setups is not None and lane.pools_at_worst and run.oom is None:
                remap(lane, run, trace, setups, xs, in_use, reserved, fragmentation)
        lanes.append(lane)
    oom = run.oom.to_json() if run.oom is not None else None
    oom_pins = pinning_buffers(run.failure, trace) if run.oom is not None and run.oom.kind == "fragmentation" else []
    return TimelineView(
        regime,
        run.spec.name or run.spec.default_device,
        run.spec.capacity,
        run.events,
        lanes,
        oom,
        pool_views(run.failure, trace),
        [pin.text() for pin in oom_pins],
        {pin.event for pin in oom_pins},
    )
