"""Pictures of a test's memory: per device, bytes in use and held over its events as steps (a value
holds until the next event), the peak marked with its largest holders, where it ran out of memory,
fragmentation over the events, and each pool's memory map at the peak. `write_plot` draws a PNG here,
through matplotlib (imported only when a PNG is asked for), or a self-contained HTML file
(plot_html.py); both draw the same `TimelineView` (plot_parts.py: what they share)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from ..files import write_atomic
from ..model.explain import allocator_name
from ..model.timeline import DeviceLane, PoolView, TimelineView
from ..units import MiB, format_size
from .plot_html import render_html
from .plot_parts import (
    FREE_COLOUR,
    LIVE_DATA,
    MAP_SHOWN,
    OOM_COLOUR,
    PALETTE,
    BaselineSide,
    binary_step,
    map_chunks,
    map_extent,
    maps,
    oom_caption,
    owner_colours,
    peak_text,
    steps,
    unit_of,
)
from .text import matplotlib_text

PICTURE_SUFFIXES = (".png", ".html", ".htm")


def check_picture_path(path: str | os.PathLike[str]) -> None:
    """ValueError, before any drawing, when `path` cannot take a picture: another extension, or a
    directory in the way."""
    if Path(path).suffix.lower() not in PICTURE_SUFFIXES:
        raise ValueError(f"cannot draw {os.fspath(path)!r}: the file must end in .png or .html")
    if os.path.isdir(path):
        raise ValueError(f"cannot draw {os.fspath(path)!r}: it is a directory")


def write_plot(
    view: TimelineView,
    path: str | os.PathLike[str],
    title: str,
    baseline: BaselineSide | None = None,
    sections: tuple[str, ...] = (),
) -> None:
    """A PNG or a self-contained HTML file, by the extension, written atomically; ValueError for
    another extension, OSError (naming the file) when it cannot be written. With `baseline` (a
    failure's artifact), the HTML shows the baseline beside the run."""
    check_picture_path(path)
    if Path(path).suffix.lower() == ".png":
        render_png(view, path, title)
    else:
        write_atomic(path, render_html(view, title, baseline, sections))


def save_png(figure: Any, path: str | os.PathLike[str], dpi: int) -> None:
    """A matplotlib figure as a PNG, drawn in memory and written as every other output is (atomic,
    never through a link); the figure is closed either way."""
    import matplotlib.pyplot as plt  # the plot extra, optional

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=dpi)
    finally:
        plt.close(figure)
    write_atomic(path, buffer.getvalue())


def pyplot() -> Any:
    """matplotlib's pyplot, drawing off-screen; a ValueError saying what to install where the plot
    extra is missing (every PNG: a test's picture, the targets' picture)."""
    try:
        import matplotlib  # the plot extra, optional

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError(
            "a PNG needs matplotlib (pip install 'pytest-devmem[plot]'); an .html file needs nothing"
        ) from None
    return plt


def render_png(view: TimelineView, path: str | os.PathLike[str], title: str) -> None:
    plt = pyplot()
    drawn = maps(view)
    heights = (
        [1.9, 1.0] * len(view.lanes)
        + [1.0]
        + [
            max(1.0, 0.35 * sum(len(pool.region_sizes) for pool in pools) + 0.6 + 0.15 * len(pins))
            for _, pools, _, pins in drawn
        ]
    )
    figure, grid = plt.subplots(
        len(heights), 1, figsize=(11, sum(heights) + 1.2), gridspec_kw={"height_ratios": heights}, squeeze=False
    )
    axes = list(grid[:, 0])  # a trace with no events has the fragmentation panel alone
    last = max(0, view.events - 1)
    colours = owner_colours(view)
    for number, lane in enumerate(view.lanes):
        _png_lane(axes[2 * number], axes[2 * number + 1], lane, view, last)
    frag = axes[2 * len(view.lanes)]
    for i, lane in enumerate(view.lanes):
        xs, ys = steps(lane.events, lane.fragmentation, last)
        frag.plot(xs, ys, color=PALETTE[i % len(PALETTE)], linewidth=1, label=matplotlib_text(lane.device))
    frag.set_ylim(0, 1)
    frag.set_xlim(0, max(1, last))
    frag.set_ylabel("fragmentation", fontsize=8)
    frag.set_xlabel("event", fontsize=8)
    if len(view.lanes) > 1:
        frag.legend(fontsize=7, loc="upper left")
    for axis, (caption, pools, pinned, pins) in zip(axes[2 * len(view.lanes) + 1 :], drawn):
        _png_map(axis, pools, caption, colours, plt, pinned, pins)
    figure.suptitle(matplotlib_text(title), fontsize=10)
    figure.tight_layout()
    save_png(figure, path, dpi=110)


def _png_lane(axis: object, held_axis: object, lane: DeviceLane, view: TimelineView, last: int) -> None:
    """Two panels, each on one scale: in use alone (its own detail), then held from the device with
    in use under it on the same scale, so in use is never drawn above what holds it."""
    from matplotlib.ticker import MultipleLocator  # the plot extra, loaded by pyplot()

    ax, hx = axis, held_axis
    top_in_use = max(lane.in_use, default=0)
    unit, size = unit_of(top_in_use)
    xs, ys = steps(lane.events, [b / size for b in lane.in_use], last)
    ax.plot(xs, ys, color=PALETTE[0], linewidth=1.2, label=LIVE_DATA)  # type: ignore[attr-defined]
    ax.yaxis.set_major_locator(MultipleLocator(binary_step(top_in_use) / size))  # type: ignore[attr-defined]
    ax.set_ylim(0, (top_in_use / size or 1) * 1.15)  # type: ignore[attr-defined]
    ax.set_xlim(0, max(1, last))  # type: ignore[attr-defined]
    ax.set_ylabel(f"{matplotlib_text(lane.device)}\nlive data ({unit})", fontsize=8)  # type: ignore[attr-defined]
    ax.set_title(matplotlib_text(peak_text(lane)), fontsize=8, loc="left")  # type: ignore[attr-defined]  # above the panel: never over its line
    if lane.peak_event >= 0:
        ax.plot([lane.peak_event], [lane.peak_live / size], "o", color=OOM_COLOUR, markersize=4)  # type: ignore[attr-defined]
        ax.axvline(lane.peak_event, color=OOM_COLOUR, linewidth=0.6, linestyle=":")  # type: ignore[attr-defined]
    top_held = max(max(lane.reserved, default=0), top_in_use)
    held_unit, held_size = unit_of(top_held)
    rx, ry = steps(lane.events, [b / held_size for b in lane.reserved], last)
    hx.fill_between(rx, ry, color="#cccccc", step=None, label="held from the device")  # type: ignore[attr-defined]
    ix, iy = steps(lane.events, [b / held_size for b in lane.in_use], last)
    hx.plot(ix, iy, color=PALETTE[0], linewidth=1.0, label=LIVE_DATA)  # type: ignore[attr-defined]
    hx.yaxis.set_major_locator(MultipleLocator(binary_step(top_held) / held_size))  # type: ignore[attr-defined]
    hx.set_ylim(0, (top_held / held_size or 1) * 1.1)  # type: ignore[attr-defined]
    hx.set_xlim(0, max(1, last))  # type: ignore[attr-defined]
    hx.set_ylabel(f"held ({held_unit})", fontsize=8)  # type: ignore[attr-defined]
    hx.legend(loc="upper left", fontsize=7)  # type: ignore[attr-defined]
    hx.set_title(  # type: ignore[attr-defined]
        matplotlib_text(
            f"{lane.device}: held from the device (grey), at most {format_size(lane.peak_reserved)}, with in use on the same scale"
        ),
        fontsize=7,
        loc="left",
        color="#555555",
    )
    oom = view.oom
    if oom and oom.get("device") == lane.device:
        event = int(oom.get("event", 0))  # type: ignore[call-overload]
        for panel in (ax, hx):
            panel.axvline(event, color=OOM_COLOUR, linewidth=1.5)  # type: ignore[attr-defined]
        hx.set_title(matplotlib_text(oom_caption(view)), color=OOM_COLOUR, fontsize=8, loc="left")  # type: ignore[attr-defined]  # in place of the held panel's own title: never over a line or the peak's title


def _png_map(
    axis: object,
    pools: list[PoolView],
    caption: str,
    colours: dict[str, str],
    plt: object,
    pinned: set[int],
    pins: list[str],
) -> None:
    ax = axis
    labels, row = [], 0
    for pool in pools:
        extents = map_extent(pool)
        for region, (size, extent) in enumerate(zip(pool.region_sizes, extents)):
            for chunk, width, colour, marked in map_chunks(pool, region, extent, colours, pinned):
                ax.barh(  # type: ignore[attr-defined]
                    row,
                    width / MiB,
                    left=chunk.offset / MiB,
                    color=colour,
                    edgecolor="black" if marked else "white",
                    linewidth=1.5 if marked else 0.5,
                )
            labels.append(matplotlib_text(f"{allocator_name(pool.allocator)} region {region} ({format_size(size)})"))
            row += 1
    ax.set_yticks(range(len(labels)), labels, fontsize=7)  # type: ignore[attr-defined]
    ax.invert_yaxis()  # type: ignore[attr-defined]
    ax.set_xlabel(  # type: ignore[attr-defined]
        "\n".join(
            matplotlib_text(line)
            for line in [f"MiB from the region's start ({MAP_SHOWN})", *(f"pinning: {pin}" for pin in pins)]
        ),
        fontsize=7,
    )
    ax.set_title(matplotlib_text(f"{caption}: coloured in use, grey free"), fontsize=9)  # type: ignore[attr-defined]
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in colours.values()] + [  # type: ignore[attr-defined]
        plt.Rectangle((0, 0), 1, 1, color=FREE_COLOUR)  # type: ignore[attr-defined]
    ]
    ax.legend(  # type: ignore[attr-defined]
        handles,
        [*(matplotlib_text(owner) for owner in colours), "free"],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
    )
