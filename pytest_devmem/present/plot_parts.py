"""What both pictures of a test's memory draw (plot.py's PNG, plot_html.py's HTML): the colours,
each pool's map at the peak, the captions, the axes' units and ticks, the baseline shown beside a
failure's run, and the step line every lane is drawn as."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..model.explain import allocator_name
from ..model.machine import KIND_TEXT
from ..model.profile import decode_profile
from ..model.timeline import Chunk, DeviceLane, PoolView, TimelineView
from ..units import MiB, format_size

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
FREE_COLOUR = "#dddddd"
OOM_COLOUR = "#d62728"
BASELINE_COLOUR = "#444444"
MAP_SHOWN = "the part of each region up to its last chunk in use"
LIVE_DATA = "live data (each request rounded to 256 B)"
"""What a lane's line draws; the gated peak in use counts the allocator's whole chunks."""


def owner_colours(view: TimelineView) -> dict[str, str]:
    """One colour per holder at the headline peak, largest first; the rest share the last."""
    lane = view.headline
    owners = list(lane.at_peak) if lane is not None else []
    return {owner: PALETTE[min(i, len(PALETTE) - 1)] for i, owner in enumerate(owners)}


def map_extent(pool: PoolView) -> list[int]:
    """How much of each region the map shows: up to the end of its last chunk in use (a 12 GiB
    preallocated region with 40 MiB in use would otherwise be one grey bar), at least 1 MiB."""
    ends = [MiB] * len(pool.region_sizes)
    for chunk in pool.chunks:
        if chunk.owner and chunk.region < len(ends):
            ends[chunk.region] = max(ends[chunk.region], chunk.offset + chunk.size)
    return [min(size, end + end // 8) for size, end in zip(pool.region_sizes, ends)]


def map_chunks(
    pool: PoolView, region: int, extent: int, colours: dict[str, str], pinned: set[int]
) -> Iterator[tuple[Chunk, int, str, bool]]:
    """The chunks of one region of a pool's map as both pictures draw them: each chunk that starts
    within the drawn `extent`, the width of it drawn, its colour (its holder's, or free) and whether
    it pins the holes beside it."""
    for chunk in pool.chunks:
        if chunk.region != region or chunk.offset >= extent:
            continue
        colour = colours.get(chunk.owner, PALETTE[-1]) if chunk.owner else FREE_COLOUR
        yield chunk, min(chunk.size, extent - chunk.offset), colour, chunk.event in pinned


def oom_caption(view: TimelineView) -> str:
    oom = view.oom
    if not oom:
        return ""
    kind = str(oom.get("kind", ""))
    return f"out of memory at event {oom.get('event')}: {allocator_name(str(oom.get('allocator')))} asked {format_size(int(oom.get('requested', 0)))} on {oom.get('device')} ({KIND_TEXT.get(kind, kind)})"  # type: ignore[call-overload]


MARKED_FRAGMENTATION = 0.05
"""A device this fragmented at its worst gets a second map, of that moment, with its pins marked."""


def maps(view: TimelineView) -> list[tuple[str, list[PoolView], set[int], list[str]]]:
    """The maps to draw: (caption, pools, allocation events of the buffers to mark, what they are).
    The failing device's pools when it ran out of memory, else the headline device's at its peak;
    and each device's at its most fragmented, where that is marked, with the buffers that pin its holes."""
    drawn = []
    if view.oom and view.oom_pools:
        drawn.append(
            (
                f"memory map of {view.oom.get('device')} when it ran out of memory",
                view.oom_pools,
                view.oom_pinned,
                view.oom_pins,
            )
        )
    elif view.headline is not None:
        lane = view.headline
        drawn.append(
            (
                f"memory map of {lane.device} at its peak of live data (event {lane.peak_event})",
                lane.pools_at_peak,
                set(),
                [],
            )
        )
    for lane in view.lanes:
        shown = lane.map_fragmentation if lane.map_fragmentation is not None else lane.worst_fragmentation
        if lane.pools_at_worst and (shown or 0.0) >= MARKED_FRAGMENTATION and not view.oom:
            caption = f"memory map of {lane.device} at its most fragmented while it held memory (event {lane.worst_map_event}, fragmentation {shown:.2f}), pinning buffers outlined"
            drawn.append((caption, lane.pools_at_worst, lane.pinned, lane.pins))
    return drawn


@dataclass(frozen=True)
class BaselineSide:
    """What a failure's picture shows of the test's baseline beside the run: its file, its peak, who
    held the memory at that peak, and its memory over its events (its stored profile, when it has one)."""

    file: str
    peak_bytes_in_use: int | None
    contributors: dict[str, int]
    profile: tuple[str, int, list[int], list[int]] | None

    @classmethod
    def of(
        cls, file: str, metrics: Mapping[str, object], contributors: dict[str, int], profile: object
    ) -> BaselineSide:
        """From a stored baseline entry's plain fields (its profile decoded, None where unreadable)."""
        peak = metrics.get("peak_bytes_in_use")
        return cls(file, int(peak) if isinstance(peak, (int, float)) else None, contributors, decode_profile(profile))

    def held_at(self, xs: list[int]) -> list[int | None]:
        """Its live data at each event of `xs`: each stored point held to the next, as its stepped
        line draws it; None beyond its own events."""
        if self.profile is None or not self.profile[2]:
            return [None] * len(xs)
        _, events, stored, values = self.profile
        end = max(events - 1, stored[-1])
        return [values[bisect_right(stored, x) - 1] if stored[0] <= x <= end else None for x in xs]


def steps(xs: list[int], ys: list[float], last: int) -> tuple[list[float], list[float]]:
    """A step line through (x, y): each value holds until the next point, the last to `last`."""
    if not xs:
        return [], []
    px: list[float] = []
    py: list[float] = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        if i:
            px.append(x)
            py.append(ys[i - 1])
        px.append(x)
        py.append(y)
    px.append(max(last, xs[-1]))
    py.append(ys[-1])
    return px, py


def unit_of(largest: float) -> tuple[str, float]:
    """The unit a panel's axis counts in: GiB from 1 GiB up, else MiB (KiB below 1 MiB)."""
    if largest >= 2**30:
        return "GiB", 2.0**30
    if largest >= MiB or largest == 0:
        return "MiB", float(MiB)
    return "KiB", 1024.0


def binary_step(largest: float, count: int = 4) -> int:
    """The power of two that cuts `largest` bytes into at most `count` steps: 8 MiB for 21 MiB."""
    step = 1
    while step * count < largest:
        step *= 2
    return step


def nice_ticks(last: int, count: int = 8) -> list[int]:
    """Event numbers for the x axis: steps of 1, 2 or 5 times a power of ten, about `count` of them."""
    if last <= 0:
        return [0]
    raw = last / count
    power = 10 ** max(0, len(str(int(raw))) - 1)
    step = next((m * power for m in (1, 2, 5, 10) if m * power >= raw), 10 * power)
    return list(range(0, last + 1, max(1, int(step))))


def peak_text(lane: DeviceLane, holders: int = 3) -> str:
    """The peak and its largest holders, in one line: drawn above the lane, never over its line."""
    if lane.peak_event < 0:
        return f"{lane.device}: nothing allocated"
    who = ", ".join(f"{name} {format_size(size)}" for name, size in list(lane.at_peak.items())[:holders])
    peak = f"live data {format_size(lane.peak_live)} at event {lane.peak_event}"
    if lane.peak_in_use != lane.peak_live:  # whole chunks: at their own moment, not the line's
        peak = f"peak in use {format_size(lane.peak_in_use)} in chunks; {peak}"
    return f"{lane.device}: {peak}" + (f" ({who})" if who else "")
