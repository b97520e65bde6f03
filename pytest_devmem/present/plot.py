"""Pictures of a timeline: bytes in use and reserved over the test's events with the peak marked and
its largest holders named, and the pool's memory map at the peak. PNG through matplotlib (imported
here only, and only when a PNG is asked for); HTML self-contained (inline SVG, no script, no network)."""

from __future__ import annotations

import html
import os
from pathlib import Path

from ..files import write_atomic
from ..model.timeline import Timeline
from ..units import format_size

MiB = 2**20
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
FREE_COLOUR = "#dddddd"
MAX_POINTS = 2000
MAP_SHOWN = "the part of each region up to its last chunk in use"


def owner_colours(timeline: Timeline) -> dict[str, str]:
    """One colour per holder at the peak, largest first; the rest share the last."""
    owners = list(timeline.at_peak)
    return {owner: PALETTE[min(i, len(PALETTE) - 1)] for i, owner in enumerate(owners)}


def map_extent(timeline: Timeline) -> list[int]:
    """How much of each region the map shows: up to the end of its last chunk in use (a 12 GiB
    preallocated region with 40 MiB in use would otherwise be one grey bar), at least 1 MiB."""
    ends = [MiB] * len(timeline.region_sizes)
    for chunk in timeline.chunks_at_peak:
        if chunk.owner and chunk.region < len(ends):
            ends[chunk.region] = max(ends[chunk.region], chunk.offset + chunk.size)
    return [min(size, end + end // 8) for size, end in zip(timeline.region_sizes, ends)]


def write_plot(timeline: Timeline, path: str | os.PathLike[str], title: str) -> None:
    """A PNG or a self-contained HTML file, by the extension; ValueError for another one."""
    suffix = Path(path).suffix.lower()
    if suffix == ".png":
        render_png(timeline, path, title)
    elif suffix in (".html", ".htm"):
        write_atomic(path, render_html(timeline, title))
    else:
        raise ValueError(f"cannot draw {os.fspath(path)!r}: the file must end in .png or .html")


def render_png(timeline: Timeline, path: str | os.PathLike[str], title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("a PNG needs matplotlib (pip install 'pytest-devmem[plot]'); an .html file needs nothing") from None
    colours = owner_colours(timeline)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), gridspec_kw={"height_ratios": [3, 2]})
    steps = range(len(timeline.in_use))
    top.plot(steps, [b / MiB for b in timeline.in_use], color="#1f77b4", label="in use")
    right = top.twinx()
    right.step(steps, [b / MiB for b in timeline.reserved], where="post", color="#999999", linestyle="--", label="reserved")
    right.set_ylabel("reserved (MiB)", color="#666666")
    if timeline.peak_index >= 0:
        peak = timeline.in_use[timeline.peak_index] / MiB
        top.plot([timeline.peak_index], [peak], "o", color="#d62728")
        holders = "\n".join(f"{name}: {format_size(size)}" for name, size in list(timeline.at_peak.items())[:4])
        top.annotate(f"peak {format_size(timeline.peak_in_use)}\n{holders}", (timeline.peak_index, peak), textcoords="offset points", xytext=(10, -10), va="top", fontsize=8)
    top.set_xlabel("event")
    top.set_ylabel("in use (MiB)")
    top.set_title(title, fontsize=10)
    top.legend(loc="upper left", fontsize=8)
    right.legend(loc="upper right", fontsize=8)
    extents = map_extent(timeline)
    for chunk in timeline.chunks_at_peak:
        if chunk.region >= len(extents) or chunk.offset >= extents[chunk.region]:
            continue
        width = min(chunk.size, extents[chunk.region] - chunk.offset)
        bottom.barh(chunk.region, width / MiB, left=chunk.offset / MiB, color=colours.get(chunk.owner, FREE_COLOUR) if chunk.owner else FREE_COLOUR, edgecolor="white", linewidth=0.5)
    bottom.set_yticks(range(len(extents)), [f"region {i} ({format_size(size)})" for i, size in enumerate(timeline.region_sizes)], fontsize=8)
    bottom.set_xlabel(f"MiB from the region's start ({MAP_SHOWN})")
    bottom.set_title(f"memory map at the peak under {timeline.regime}: coloured in use, grey free", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in colours.values()] + [plt.Rectangle((0, 0), 1, 1, color=FREE_COLOUR)]
    bottom.legend(handles, [*colours, "free"], fontsize=7, loc="lower right")
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(os.fspath(path), dpi=110)
    plt.close(figure)


def _points(values: list[int], width: float, height: float, top: float, scale: float) -> str:
    count = len(values)
    stride = max(1, count // MAX_POINTS)
    picked = list(range(0, count, stride))
    if picked and picked[-1] != count - 1:
        picked.append(count - 1)
    return " ".join(f"{(i / max(1, count - 1)) * width + 60:.1f},{top + height - (values[i] / scale) * height:.1f}" for i in picked)


def render_html(timeline: Timeline, title: str) -> str:
    """One HTML page, nothing fetched: the timeline and the map as inline SVG, the holders as a table."""
    width, height = 900.0, 260.0
    in_use_scale = max(timeline.in_use, default=0) or 1
    reserved_scale = max(timeline.reserved, default=0) or 1
    colours = owner_colours(timeline)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:20px}table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}</style>",
        f"</head><body><h2>{html.escape(title)}</h2>",
        f"<p>Regime {html.escape(timeline.regime)} on {html.escape(timeline.device)} ({format_size(timeline.capacity)}); "
        f"{len(timeline.in_use)} events; peak in use {format_size(timeline.peak_in_use)}; most reserved {format_size(max(timeline.reserved, default=0))}.</p>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width + 220:.0f}' height='{height + 60:.0f}' role='img' aria-label='bytes in use and reserved over the events'>",
        f"<rect x='60' y='10' width='{width:.0f}' height='{height:.0f}' fill='none' stroke='#ccc'/>",
        f"<polyline fill='none' stroke='#999' stroke-dasharray='4 3' points='{_points(timeline.reserved, width, height, 10, reserved_scale)}'/>",
        f"<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='{_points(timeline.in_use, width, height, 10, in_use_scale)}'/>",
        f"<text x='5' y='20' font-size='11'>{format_size(in_use_scale)}</text><text x='5' y='{height + 10:.0f}' font-size='11'>0</text>",
        f"<text x='{width + 65:.0f}' y='20' font-size='11' fill='#666'>{format_size(reserved_scale)} reserved</text>",
        f"<text x='60' y='{height + 35:.0f}' font-size='11'>in use (blue, left scale) and reserved (grey dashes, right scale) after each event</text>",
    ]
    if timeline.peak_index >= 0:
        x = (timeline.peak_index / max(1, len(timeline.in_use) - 1)) * width + 60
        y = 10 + height - (timeline.in_use[timeline.peak_index] / in_use_scale) * height
        parts.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='5' fill='#d62728'><title>peak {format_size(timeline.peak_in_use)}</title></circle>")
        parts.append(f"<text x='{x + 8:.1f}' y='{y + 14:.1f}' font-size='11' fill='#d62728'>peak {format_size(timeline.peak_in_use)}</text>")
    parts.append("</svg>")
    parts.append("<h3>Who held the memory at the peak</h3><table><tr><th></th><th>holder</th><th>bytes</th></tr>")
    for owner, size in timeline.at_peak.items():
        parts.append(f"<tr><td style='background:{colours[owner]}'>&nbsp;&nbsp;</td><td>{html.escape(owner)}</td><td>{format_size(size)}</td></tr>")
    parts.append("</table>")
    parts.append(_map_svg(timeline, colours))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _map_svg(timeline: Timeline, colours: dict[str, str]) -> str:
    extents = map_extent(timeline)
    row, width = 26, 900.0
    parts = [
        f"<h3>Memory map at the peak ({html.escape(MAP_SHOWN)}): coloured in use, grey free</h3>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width + 200:.0f}' height='{row * len(extents) + 10}'>",
    ]
    for region, extent in enumerate(extents):
        y = region * row + 4
        parts.append(f"<text x='0' y='{y + 15}' font-size='11'>region {region} ({format_size(timeline.region_sizes[region])})</text>")
    scale = width / max(extents, default=1)
    for chunk in timeline.chunks_at_peak:
        if chunk.region >= len(extents) or chunk.offset >= extents[chunk.region]:
            continue
        shown = min(chunk.size, extents[chunk.region] - chunk.offset)
        colour = colours.get(chunk.owner, FREE_COLOUR) if chunk.owner else FREE_COLOUR
        label = html.escape(f"{chunk.owner or 'free'}: {format_size(chunk.size)} at +{format_size(chunk.offset)}")
        parts.append(
            f"<rect x='{180 + chunk.offset * scale:.2f}' y='{chunk.region * row + 4}' width='{max(shown * scale, 0.5):.2f}' height='{row - 8}' "
            f"fill='{colour}' stroke='white' stroke-width='0.5'><title>{label}</title></rect>"
        )
    parts.append("</svg>")
    return "\n".join(parts)
