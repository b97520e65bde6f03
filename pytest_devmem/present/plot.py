"""Pictures of a test's memory: per device, bytes in use and held over its events as steps (a value
holds until the next event), the peak marked with its largest holders, where it ran out of memory,
fragmentation over the events, and each pool's memory map at the peak. PNG through matplotlib
(imported here only, and only when a PNG is asked for); HTML self-contained (inline SVG, no
script, no network). Both draw the same `TimelineView`."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from ..files import write_atomic
from ..model.explain import allocator_name
from ..model.machine import KIND_TEXT
from ..model.timeline import DeviceLane, PoolView, TimelineView
from ..units import format_size
from .text import html_text, matplotlib_text

MiB = 2**20
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
FREE_COLOUR = "#dddddd"
OOM_COLOUR = "#d62728"
MAP_SHOWN = "the part of each region up to its last chunk in use"


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
        drawn.append((f"memory map of {view.oom.get('device')} when it ran out of memory", view.oom_pools, view.oom_pinned, view.oom_pins))
    elif view.headline is not None:
        lane = view.headline
        drawn.append((f"memory map of {lane.device} at its peak (event {lane.peak_event})", lane.pools_at_peak, set(), []))
    for lane in view.lanes:
        if lane.pools_at_worst and (lane.worst_fragmentation or 0.0) >= MARKED_FRAGMENTATION and not view.oom:
            caption = f"memory map of {lane.device} at its most fragmented (event {lane.worst_map_event}, fragmentation {lane.worst_fragmentation:.2f}), pinning buffers outlined"
            drawn.append((caption, lane.pools_at_worst, lane.pinned, lane.pins))
    return drawn


PICTURE_SUFFIXES = (".png", ".html", ".htm")


def check_picture_path(path: str | os.PathLike[str]) -> None:
    """ValueError, before any drawing, when `path` cannot take a picture: another extension, or a
    directory in the way."""
    if Path(path).suffix.lower() not in PICTURE_SUFFIXES:
        raise ValueError(f"cannot draw {os.fspath(path)!r}: the file must end in .png or .html")
    if os.path.isdir(path):
        raise ValueError(f"cannot draw {os.fspath(path)!r}: it is a directory")


def write_plot(view: TimelineView, path: str | os.PathLike[str], title: str) -> None:
    """A PNG or a self-contained HTML file, by the extension, written atomically; ValueError for
    another extension, OSError (naming the file) when it cannot be written."""
    check_picture_path(path)
    if Path(path).suffix.lower() == ".png":
        render_png(view, path, title)
    else:
        write_atomic(path, render_html(view, title))


def save_png(figure: Any, path: str | os.PathLike[str], dpi: int) -> None:
    """A matplotlib figure as a PNG, drawn in memory and written as every other output is (atomic,
    never through a link); the figure is closed either way."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=dpi)
    finally:
        plt.close(figure)
    write_atomic(path, buffer.getvalue())


def _steps(xs: list[int], ys: list[float], last: int) -> tuple[list[float], list[float]]:
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


# -- PNG ------------------------------------------------------------------------------------


def render_png(view: TimelineView, path: str | os.PathLike[str], title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("a PNG needs matplotlib (pip install 'pytest-devmem[plot]'); an .html file needs nothing") from None
    drawn = maps(view)
    heights = [2.2] * len(view.lanes) + [1.2] + [max(1.0, 0.35 * sum(len(pool.region_sizes) for pool in pools) + 0.6 + 0.15 * len(pins)) for _, pools, _, pins in drawn]
    figure, grid = plt.subplots(len(heights), 1, figsize=(11, sum(heights) + 0.8), gridspec_kw={"height_ratios": heights}, squeeze=False)
    axes = list(grid[:, 0])  # a trace with no events has the fragmentation panel alone
    last = max(0, view.events - 1)
    colours = owner_colours(view)
    for axis, lane in zip(axes, view.lanes):
        _png_lane(axis, lane, view, last, plt)
    frag = axes[len(view.lanes)]
    for i, lane in enumerate(view.lanes):
        xs, ys = _steps(lane.events, lane.fragmentation, last)
        frag.plot(xs, ys, color=PALETTE[i % len(PALETTE)], linewidth=1, label=matplotlib_text(lane.device))
    frag.set_ylim(0, 1)
    frag.set_xlim(0, max(1, last))
    frag.set_ylabel("fragmentation", fontsize=8)
    frag.set_xlabel("event", fontsize=8)
    if len(view.lanes) > 1:
        frag.legend(fontsize=7, loc="upper left")
    for axis, (caption, pools, pinned, pins) in zip(axes[len(view.lanes) + 1:], drawn):
        _png_map(axis, pools, caption, colours, plt, pinned, pins)
    figure.suptitle(matplotlib_text(title), fontsize=10)
    figure.tight_layout()
    save_png(figure, path, dpi=110)


def _png_lane(axis: object, lane: DeviceLane, view: TimelineView, last: int, plt: object) -> None:
    ax = axis  # type: ignore[assignment]
    xs, ys = _steps(lane.events, [b / MiB for b in lane.in_use], last)
    ax.plot(xs, ys, color=PALETTE[0], linewidth=1.2, label="in use")  # type: ignore[attr-defined]
    top_in_use = max(lane.in_use, default=0) / MiB or 1
    ax.set_ylim(0, top_in_use * 1.25)  # type: ignore[attr-defined]
    ax.set_xlim(0, max(1, last))  # type: ignore[attr-defined]
    ax.set_ylabel(f"{matplotlib_text(lane.device)}\nin use (MiB)", fontsize=8)  # type: ignore[attr-defined]
    right = ax.twinx()  # type: ignore[attr-defined]
    rx, ry = _steps(lane.events, [b / MiB for b in lane.reserved], last)
    right.plot(rx, ry, color="#999999", linestyle="--", linewidth=1, label="held from the device")
    right.set_ylim(0, (max(lane.reserved, default=0) / MiB or 1) * 1.25)  # from 0: a flat line sits where it is
    right.set_ylabel("held (MiB)", color="#666666", fontsize=8)
    if lane.peak_event >= 0:
        peak = lane.peak_in_use / MiB
        ax.plot([lane.peak_event], [peak], "o", color=OOM_COLOUR)  # type: ignore[attr-defined]
        holders = "\n".join(f"{matplotlib_text(name)}: {format_size(size)}" for name, size in list(lane.at_peak.items())[:3])
        on_left = lane.peak_event > last / 2
        ax.annotate(  # type: ignore[attr-defined]
            f"peak {format_size(lane.peak_in_use)}\n{holders}", (lane.peak_event, peak), textcoords="offset points",
            xytext=(-12 if on_left else 12, -6), ha="right" if on_left else "left", va="top", fontsize=7,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "#cccccc"},
        )
    oom = view.oom
    if oom and oom.get("device") == lane.device:
        event = int(oom.get("event", 0))  # type: ignore[call-overload]
        ax.axvline(event, color=OOM_COLOUR, linewidth=1.5)  # type: ignore[attr-defined]
        ax.set_title(matplotlib_text(oom_caption(view)), color=OOM_COLOUR, fontsize=8)  # type: ignore[attr-defined]  # above the lane: never over its lines or legends
    ax.legend(loc="upper left", fontsize=7)  # type: ignore[attr-defined]
    right.legend(loc="upper right", fontsize=7)


def _png_map(axis: object, pools: list[PoolView], caption: str, colours: dict[str, str], plt: object, pinned: set[int], pins: list[str]) -> None:
    ax = axis  # type: ignore[assignment]
    labels, row = [], 0
    for pool in pools:
        extents = map_extent(pool)
        for region, (size, extent) in enumerate(zip(pool.region_sizes, extents)):
            for chunk in pool.chunks:
                if chunk.region != region or chunk.offset >= extent:
                    continue
                width = min(chunk.size, extent - chunk.offset)
                colour = colours.get(chunk.owner, PALETTE[-1]) if chunk.owner else FREE_COLOUR
                marked = chunk.event in pinned
                ax.barh(row, width / MiB, left=chunk.offset / MiB, color=colour, edgecolor="black" if marked else "white", linewidth=1.5 if marked else 0.5)  # type: ignore[attr-defined]
            labels.append(matplotlib_text(f"{allocator_name(pool.allocator)} region {region} ({format_size(size)})"))
            row += 1
    ax.set_yticks(range(len(labels)), labels, fontsize=7)  # type: ignore[attr-defined]
    ax.invert_yaxis()  # type: ignore[attr-defined]
    ax.set_xlabel("\n".join(matplotlib_text(line) for line in [f"MiB from the region's start ({MAP_SHOWN})", *(f"pinning: {pin}" for pin in pins)]), fontsize=7)  # type: ignore[attr-defined]
    ax.set_title(matplotlib_text(f"{caption}: coloured in use, grey free"), fontsize=9)  # type: ignore[attr-defined]
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in colours.values()] + [plt.Rectangle((0, 0), 1, 1, color=FREE_COLOUR)]  # type: ignore[attr-defined]
    ax.legend(handles, [*(matplotlib_text(owner) for owner in colours), "free"], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # type: ignore[attr-defined]


# -- HTML ------------------------------------------------------------------------------------

WIDTH, LANE_HEIGHT, LEFT = 900.0, 150.0, 70.0


def _svg_points(xs: list[float], ys: list[float], last: int, scale: float, top: float) -> str:
    return " ".join(f"{LEFT + (x / max(1, last)) * WIDTH:.1f},{top + LANE_HEIGHT - (y / scale) * LANE_HEIGHT:.1f}" for x, y in zip(xs, ys))


def _lane_svg(lane: DeviceLane, view: TimelineView, last: int) -> str:
    in_use_scale = (max(lane.in_use, default=0) or 1) * 1.15
    reserved_scale = (max(lane.reserved, default=0) or 1) * 1.15
    top = 10.0
    xs, ys = _steps(lane.events, [float(v) for v in lane.in_use], last)
    rx, ry = _steps(lane.events, [float(v) for v in lane.reserved], last)
    parts = [
        f"<h3>{html_text(lane.device)}: peak in use {format_size(lane.peak_in_use)}, held at most {format_size(lane.peak_reserved)}</h3>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH + LEFT + 110:.0f}' height='{LANE_HEIGHT + 45:.0f}' role='img' aria-label='bytes in use and held on {html_text(lane.device)} over the events'>",
        f"<rect x='{LEFT}' y='{top}' width='{WIDTH:.0f}' height='{LANE_HEIGHT:.0f}' fill='none' stroke='#ccc'/>",
        f"<polyline fill='none' stroke='#999' stroke-dasharray='4 3' points='{_svg_points(rx, ry, last, reserved_scale, top)}'/>",
        f"<polyline fill='none' stroke='{PALETTE[0]}' stroke-width='1.5' points='{_svg_points(xs, ys, last, in_use_scale, top)}'/>",
        f"<text x='2' y='{top + LANE_HEIGHT - (max(lane.in_use, default=0) / in_use_scale) * LANE_HEIGHT + 4:.0f}' font-size='10'>{format_size(max(lane.in_use, default=0))}</text>",
        f"<text x='2' y='{top + LANE_HEIGHT:.0f}' font-size='10'>0</text>",
        f"<text x='{LEFT + WIDTH + 4:.0f}' y='{top + LANE_HEIGHT - (max(lane.reserved, default=0) / reserved_scale) * LANE_HEIGHT + 4:.0f}' font-size='10' fill='#666'>{format_size(max(lane.reserved, default=0))} held</text>",
        f"<text x='{LEFT + WIDTH + 4:.0f}' y='{top + LANE_HEIGHT:.0f}' font-size='10' fill='#666'>0</text>",
        f"<text x='{LEFT}' y='{top + LANE_HEIGHT + 30:.0f}' font-size='10'>in use (blue, left scale) and held from the device (grey dashes, right scale) over {view.events} events; each value holds until the next event</text>",
    ]
    if lane.peak_event >= 0:
        x = LEFT + (lane.peak_event / max(1, last)) * WIDTH
        y = top + LANE_HEIGHT - (lane.peak_in_use / in_use_scale) * LANE_HEIGHT
        anchor, dx = ("end", -8) if lane.peak_event > last / 2 else ("start", 8)
        parts.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='4' fill='{OOM_COLOUR}'><title>peak {format_size(lane.peak_in_use)} after event {lane.peak_event}</title></circle>")
        parts.append(f"<text x='{x + dx:.1f}' y='{y + 14:.1f}' font-size='11' fill='{OOM_COLOUR}' text-anchor='{anchor}'>peak {format_size(lane.peak_in_use)}</text>")
    oom = view.oom
    if oom and oom.get("device") == lane.device:
        x = LEFT + (int(oom.get("event", 0)) / max(1, last)) * WIDTH  # type: ignore[call-overload]
        parts.append(f"<line x1='{x:.1f}' y1='{top}' x2='{x:.1f}' y2='{top + LANE_HEIGHT}' stroke='{OOM_COLOUR}' stroke-width='2'><title>{html_text(oom_caption(view))}</title></line>")
    parts.append("</svg>")
    return "\n".join(parts)


def _fragmentation_svg(view: TimelineView, last: int) -> str:
    height = 80.0
    parts = [
        "<h3>Fragmentation over the events (XLA's measure: free bytes outside the largest free block, over free bytes)</h3>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH + LEFT + 110:.0f}' height='{height + 20:.0f}'>",
        f"<rect x='{LEFT}' y='5' width='{WIDTH:.0f}' height='{height:.0f}' fill='none' stroke='#ccc'/>",
        f"<text x='2' y='13' font-size='10'>1</text><text x='2' y='{height + 5:.0f}' font-size='10'>0</text>",
    ]
    for i, lane in enumerate(view.lanes):
        xs, ys = _steps(lane.events, lane.fragmentation, last)
        points = " ".join(f"{LEFT + (x / max(1, last)) * WIDTH:.1f},{5 + height - y * height:.1f}" for x, y in zip(xs, ys))
        parts.append(f"<polyline fill='none' stroke='{PALETTE[i % len(PALETTE)]}' points='{points}'><title>{html_text(lane.device)}</title></polyline>")
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(view: TimelineView, title: str) -> str:
    """One HTML page, nothing fetched: a lane per device, fragmentation, the holders and the map as
    inline SVG and tables."""
    last = max(0, view.events - 1)
    colours = owner_colours(view)
    head = view.headline
    summary = f"Regime {html_text(view.regime)} on {html_text(view.machine)} ({format_size(view.capacity)} per device); {view.events} events; {len(view.lanes)} device(s)"
    if head is not None:
        summary += f"; peak in use {format_size(head.peak_in_use)} on {html_text(head.device)}"
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html_text(title)}</title>",
        "<style>body{font-family:sans-serif;margin:20px}table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}.oom{color:#d62728;font-weight:bold}</style>",
        f"</head><body><h2>{html_text(title)}</h2>",
        f"<p>{summary}.</p>",
    ]
    if view.oom:
        parts.append(f"<p class='oom'>{html_text(oom_caption(view))}</p>")
    parts += [_lane_svg(lane, view, last) for lane in view.lanes]
    parts.append(_fragmentation_svg(view, last))
    if head is not None:
        parts.append(f"<h3>Who held the memory at the peak of {html_text(head.device)}</h3><table><tr><th></th><th>holder</th><th>bytes</th></tr>")
        for owner, size in head.at_peak.items():
            parts.append(f"<tr><td style='background:{colours.get(owner, PALETTE[-1])}'>&nbsp;&nbsp;</td><td>{html_text(owner)}</td><td>{format_size(size)}</td></tr>")
        parts.append("</table>")
    for caption, pools, pinned, pins in maps(view):
        parts.append(_map_svg(pools, caption, colours, pinned))
        if pins:
            parts.append("<p>The holes are pinned by:</p><ul>" + "".join(f"<li>{html_text(pin)}</li>" for pin in pins) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _map_svg(pools: list[PoolView], caption: str, colours: dict[str, str], pinned: set[int]) -> str:
    row, width, label_width = 26, 900.0, 230.0
    rows = [(pool, region, size, extent) for pool in pools for region, (size, extent) in enumerate(zip(pool.region_sizes, map_extent(pool)))]
    parts = [
        f"<h3>{html_text(caption)} ({html_text(MAP_SHOWN)}): coloured in use, grey free</h3>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width + label_width + 10:.0f}' height='{row * len(rows) + 10}'>",
    ]
    scale = width / max((extent for *_, extent in rows), default=1)
    for index, (pool, region, size, extent) in enumerate(rows):
        y = index * row + 4
        parts.append(f"<text x='0' y='{y + 15}' font-size='11'>{html_text(allocator_name(pool.allocator))} region {region} ({format_size(size)})</text>")
        for chunk in pool.chunks:
            if chunk.region != region or chunk.offset >= extent:
                continue
            shown = min(chunk.size, extent - chunk.offset)
            colour = colours.get(chunk.owner, PALETTE[-1]) if chunk.owner else FREE_COLOUR
            marked = chunk.event in pinned
            label = html_text(f"{chunk.owner or 'free'}: {format_size(chunk.size)} at +{format_size(chunk.offset)}" + (" (pins the holes beside it)" if marked else ""))
            stroke = "stroke='black' stroke-width='2'" if marked else "stroke='white' stroke-width='0.5'"
            parts.append(
                f"<rect x='{label_width + chunk.offset * scale:.2f}' y='{y}' width='{max(shown * scale, 0.5):.2f}' height='{row - 8}' "
                f"fill='{colour}' {stroke}><title>{label}</title></rect>"
            )
    parts.append("</svg>")
    return "\n".join(parts)
