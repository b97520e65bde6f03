"""The picture of a targets table (`devmem plot REPORT --targets`): a test per row (under the regime
the session ran it under), a target per column (named with the regime it ran the tests under where
that is not the row's, as a TPU's runtime does), each cell the test's peak in use there as a share of that target's capacity per device (the
colour, from green for little to orange for nearly all), red where it ran out of memory (with its
kind), grey where it was not measured. PNG through matplotlib (imported only for a PNG); HTML
self-contained (a table, no script, no network)."""

from __future__ import annotations

import os
from pathlib import Path

from ..files import write_atomic
from ..gate.targets import FAILED, FITS, NOT_MEASURED, OOM, TargetResult, TargetTable
from ..units import format_size
from .plot import check_picture_path, pyplot, save_png
from .plot_parts import FREE_COLOUR, OOM_COLOUR
from .targets import OTHER_REGIME, Row, other_regimes, ranked_rows, sized_by
from .text import html_text, matplotlib_text

ROWS_DRAWN = 60
"""Tests a picture shows: those that do not fit somewhere first, then the largest; the title says how many are left out."""

SCALE = ((0.0, (0xC7, 0xE9, 0xC0)), (0.5, (0xFE, 0xE0, 0x8B)), (1.0, (0xF4, 0x6D, 0x43)))
"""Share of capacity in use -> colour: light green, yellow at half, orange when full."""


def fill_colour(result: TargetResult | None) -> str:
    if result is None or result.status in (NOT_MEASURED, FAILED):
        return FREE_COLOUR
    if result.status == OOM:
        return OOM_COLOUR
    share = min(1.0, max(0.0, result.share or 0.0))
    for (low, first), (high, second) in zip(SCALE, SCALE[1:]):
        if share <= high:
            t = (share - low) / (high - low)
            return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(first, second))
    return "#f46d43"


def cell_lines(result: TargetResult | None) -> tuple[str, str]:
    """The two lines a cell shows; `*` after the first where the target ran the test under another
    regime than the row's (its column's title names it)."""
    if result is None:
        return "-", ""
    first, second = _cell_lines(result)
    return first + (OTHER_REGIME if result.other_regime else ""), second


def _cell_lines(result: TargetResult) -> tuple[str, str]:
    if result.status == NOT_MEASURED:
        return "not measured", (result.reason or "")[:40]
    if result.status == OOM:
        return "out of memory", f"kind: {result.oom_kind}" if result.oom_kind else ""
    if result.status == FAILED:
        return "failed", (result.reason or "")[:40]
    peak = format_size(result.peak_bytes_in_use) if result.peak_bytes_in_use is not None else "n/a"
    share = result.share
    return peak, f"{share:.1%} of capacity" if share is not None else ""


def column_title(table: TargetTable, index: int) -> tuple[str, ...]:
    """A column's name, capacity per device, the compile that sized JAX's executables there, and
    the regime it ran tests under where that is not their row's (never silently another regime)."""
    target = table.targets[index]

    title = (
        target.name + (" (this run)" if target.session else ""),
        f"{format_size(target.capacity_bytes)} per device",
        f"sized by {sized_by(table, target.name)}",
    )
    others = other_regimes(table, target.name)
    return title + ((f"{OTHER_REGIME} run under {', '.join(others)}",) if others else ())


def write_targets_plot(table: TargetTable, path: str | os.PathLike[str], title: str, test: str | None = None) -> None:
    """The picture at `path` (.png or .html); ValueError when there is nothing to draw or it cannot be drawn."""
    check_picture_path(path)
    rows, hidden = ranked_rows(table, ROWS_DRAWN, test)
    if not rows:
        raise ValueError(f"no test{f' matching {test!r}' if test else ''} in the report's targets table")
    if hidden:
        title += f" ({hidden} more test(s) that fit everywhere not drawn)"
    if Path(path).suffix.lower() == ".png":
        render_png(table, rows, path, title)
    else:
        write_atomic(path, render_html(table, rows, title))


def render_png(table: TargetTable, rows: list[Row], path: str | os.PathLike[str], title: str) -> None:
    plt = pyplot()
    from matplotlib.patches import Patch, Rectangle  # the plot extra, there once pyplot() is

    columns = len(table.targets)
    label_width = min(5.5, 0.3 + 0.06 * max(len(f"{t} [{r}]") for t, r, _ in rows))
    titles = [column_title(table, x) for x in range(columns)]
    cell_width, cell_height, bottom, right = 1.9, 0.55, 0.45, 0.2
    top = 0.7 + 0.15 * max(len(title) for title in titles)  # 1.15 for three lines
    width, height = label_width + cell_width * columns + right, top + bottom + cell_height * len(rows)
    figure = plt.figure(figsize=(width, height))
    axis = figure.add_axes(
        (label_width / width, bottom / height, cell_width * columns / width, cell_height * len(rows) / height)
    )
    for y, (_test, _regime, cells) in enumerate(rows):
        for x, target in enumerate(table.targets):
            result = cells.get(target.name)
            colour = fill_colour(result)
            axis.add_patch(Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white", linewidth=2))
            first, second = cell_lines(result)
            ink = "white" if colour == OOM_COLOUR else "black"
            axis.text(
                x + 0.5,
                y + 0.38,
                matplotlib_text(first),
                ha="center",
                va="center",
                fontsize=8,
                color=ink,
                weight="bold" if result is not None and result.status == OOM else "normal",
            )
            axis.text(x + 0.5, y + 0.7, matplotlib_text(second), ha="center", va="center", fontsize=6.5, color=ink)
    axis.set_xlim(0, columns)
    axis.set_ylim(len(rows), 0)
    axis.set_yticks(
        [y + 0.5 for y in range(len(rows))],
        [matplotlib_text(f"{test} [{regime}]") for test, regime, _ in rows],
        fontsize=7,
    )
    axis.set_xticks(
        [x + 0.5 for x in range(columns)],
        ["\n".join(matplotlib_text(part) for part in title) for title in titles],
        fontsize=7,
    )
    axis.xaxis.tick_top()
    axis.tick_params(length=0)
    for side in axis.spines.values():
        side.set_visible(False)
    handles = [
        Patch(
            color=fill_colour(TargetResult("", "", "", FITS, 100, peak_bytes_in_use=share)),
            label=f"fits, {share}% of capacity in use",
        )
        for share in (0, 50, 100)
    ]
    handles += [Patch(color=OOM_COLOUR, label="out of memory"), Patch(color=FREE_COLOUR, label="not measured")]
    figure.legend(handles=handles, loc="lower center", ncol=5, fontsize=7, frameon=False, bbox_to_anchor=(0.5, 0.0))
    figure.suptitle(matplotlib_text(title), fontsize=9, y=1 - 0.08 / height, va="top")
    save_png(figure, path, dpi=110)


def render_html(table: TargetTable, rows: list[Row], title: str) -> str:
    """One HTML page: the same grid as a table, each cell's figures in bytes in its tooltip."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html_text(title)}</title>",
        "<style>body{font-family:sans-serif;margin:20px}table{border-collapse:collapse}td,th{padding:4px 10px;border:2px solid white;text-align:center;font-size:13px}th.test{text-align:left;font-weight:normal}small{color:#333}</style>",
        f"</head><body><h2>{html_text(title)}</h2>",
        (
            "<p>Each measured test's peak in use on each target, as a share of that target's capacity per device: "
            "green little, orange nearly all, red out of memory, grey not measured.</p>"
        ),
        "<table><tr><th></th>",
    ]
    for index in range(len(table.targets)):
        name, *details = column_title(table, index)
        parts.append(f"<th>{html_text(name)}<br><small>{'<br>'.join(html_text(part) for part in details)}</small></th>")
    parts.append("</tr>")
    for test, regime, cells in rows:
        parts.append(f"<tr><th class='test'>{html_text(test)} [{html_text(regime)}]</th>")
        for target in table.targets:
            result = cells.get(target.name)
            first, second = cell_lines(result)
            colour = fill_colour(result)
            ink = "white" if colour == OOM_COLOUR else "black"
            tip = _tooltip(result)
            parts.append(
                f"<td style='background:{colour};color:{ink}' title='{html_text(tip)}'>{html_text(first)}<br><small style='color:{ink}'>{html_text(second)}</small></td>"
            )
        parts.append("</tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts) + "\n"


def _tooltip(result: TargetResult | None) -> str:
    if result is None:
        return "not run on this target"
    regime = f"regime {result.regime}" + (
        f" (the target's; the test's own: {result.row_regime})" if result.other_regime else ""
    )
    figures = [
        f"{result.status}" + (f" ({result.oom_kind})" if result.oom_kind else ""),
        regime,
        f"capacity {result.capacity_bytes} bytes",
    ]
    if result.peak_bytes_in_use is not None:
        figures.append(f"peak in use {result.peak_bytes_in_use} bytes, reserved {result.peak_bytes_reserved} bytes")
    figures.append(f"sized by {result.sized_by or 'no JAX'}")
    if result.reason:
        figures.append(result.reason)
    return "; ".join(figures)
