"""A test's memory as a self-contained HTML file, fetching nothing: each lane an interactive chart
(uPlot, inlined: zoom, the values under the cursor, the baseline drawn over the run), the same lane
as SVG for a reader without scripts, the maps as SVG; plot_parts.py holds what it shares with the PNG."""

from __future__ import annotations

import json

from ..model.explain import allocator_name
from ..model.timeline import DeviceLane, PoolView, TimelineView
from ..units import format_size
from .plot_parts import (
    BASELINE_COLOUR,
    LIVE_DATA,
    MAP_SHOWN,
    OOM_COLOUR,
    PALETTE,
    BaselineSide,
    binary_step,
    map_chunks,
    map_extent,
    maps,
    nice_ticks,
    oom_caption,
    owner_colours,
    peak_text,
    steps,
    unit_of,
)
from .text import html_text
from .vendor import uplot

WIDTH, LANE_HEIGHT, HELD_HEIGHT, LEFT = 900.0, 130.0, 60.0, 80.0


def _x(event: float, last: int) -> float:
    return LEFT + (event / max(1, last)) * WIDTH


def _svg_points(
    xs: list[float], ys: list[float], last: int, scale: float, top: float, height: float = LANE_HEIGHT
) -> str:
    return " ".join(f"{_x(x, last):.1f},{top + height - (y / scale) * height:.1f}" for x, y in zip(xs, ys))


def _band(
    values: list[int],
    events: list[int],
    last: int,
    top: float,
    height: float,
    scale: float,
    colour: str,
    fill: bool = False,
) -> str:
    xs, ys = steps(events, [float(v) for v in values], last)
    if not xs:
        return ""
    points = _svg_points(xs, ys, last, scale, top, height)
    if fill:
        base = top + height
        return f"<polygon fill='{colour}' stroke='none' points='{_x(xs[0], last):.1f},{base:.1f} {points} {_x(xs[-1], last):.1f},{base:.1f}'/>"
    return f"<polyline fill='none' stroke='{colour}' stroke-width='1.5' points='{points}'/>"


def _y_ticks(top: float, height: float, scale: float, largest: int) -> str:
    """A band's byte axis in binary steps (0, 8, 16 MiB), in the band's one unit."""
    unit, size = unit_of(largest)
    parts = []
    for value in range(0, int(scale) + 1, binary_step(largest)):
        y = top + height - (value / scale) * height
        parts.append(
            f"<line x1='{LEFT - 4}' y1='{y:.1f}' x2='{LEFT}' y2='{y:.1f}' stroke='#666'/><text x='{LEFT - 6}' y='{y + 4:.1f}' font-size='10' text-anchor='end'>{value / size:.4g} {unit}</text>"
        )
    return "".join(parts)


def _x_ticks(top: float, last: int) -> str:
    """Event numbers under a band: the x axis's ticks."""
    parts = [f"<line x1='{LEFT}' y1='{top:.1f}' x2='{LEFT + WIDTH}' y2='{top:.1f}' stroke='#666'/>"]
    for event in nice_ticks(last):
        x = _x(event, last)
        parts.append(
            f"<line x1='{x:.1f}' y1='{top:.1f}' x2='{x:.1f}' y2='{top + 4:.1f}' stroke='#666'/><text x='{x:.1f}' y='{top + 15:.1f}' font-size='10' text-anchor='middle'>{event}</text>"
        )
    parts.append(
        f"<text x='{LEFT + WIDTH / 2:.0f}' y='{top + 28:.1f}' font-size='10' text-anchor='middle'>event</text>"
    )
    return "".join(parts)


def _lane_svg(
    lane: DeviceLane,
    view: TimelineView,
    last: int,
    in_use_top: int | None = None,
    baseline: tuple[str, int, list[int], list[int]] | None = None,
) -> str:
    """A device's lane: in use alone on its own scale, then held from the device with in use under it
    on one scale (in use is never drawn above what holds it); event numbers below; the peak named
    above the lane, outside the plot, so no label covers the line."""
    largest = in_use_top if in_use_top is not None else max(lane.in_use, default=0)
    in_use_scale = (largest or 1) * 1.15
    held_largest = max(max(lane.reserved, default=0), max(lane.in_use, default=0))
    held_scale = (held_largest or 1) * 1.1
    top, held_top = 22.0, 22.0 + LANE_HEIGHT + 18.0
    axis_top = held_top + HELD_HEIGHT
    parts = [
        f"<h3>{html_text(peak_text(lane, holders=5))}</h3>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH + LEFT + 20:.0f}' height='{axis_top + 36:.0f}' role='img' aria-label='bytes in use and held on {html_text(lane.device)} over the events'>",
        f"<text x='{LEFT}' y='{top - 6:.0f}' font-size='11'>{LIVE_DATA}, on its own scale</text>",
        f"<rect x='{LEFT}' y='{top}' width='{WIDTH:.0f}' height='{LANE_HEIGHT:.0f}' fill='none' stroke='#ccc'/>",
        _band(lane.in_use, lane.events, last, top, LANE_HEIGHT, in_use_scale, PALETTE[0]),
        _baseline_band(baseline, last, top, in_use_scale),
        _y_ticks(top, LANE_HEIGHT, in_use_scale, largest),
        f"<text x='{LEFT}' y='{held_top - 6:.0f}' font-size='11' fill='#555'>held from the device (grey, at most {format_size(lane.peak_reserved)}) with live data (blue) on one scale</text>",
        f"<rect x='{LEFT}' y='{held_top}' width='{WIDTH:.0f}' height='{HELD_HEIGHT:.0f}' fill='none' stroke='#ccc'/>",
        _band(lane.reserved, lane.events, last, held_top, HELD_HEIGHT, held_scale, "#cccccc", fill=True),
        _band(lane.in_use, lane.events, last, held_top, HELD_HEIGHT, held_scale, PALETTE[0]),
        _y_ticks(held_top, HELD_HEIGHT, held_scale, held_largest),
        _x_ticks(axis_top, last),
    ]
    if lane.peak_event >= 0:
        x = _x(lane.peak_event, last)
        y = top + LANE_HEIGHT - (lane.peak_live / in_use_scale) * LANE_HEIGHT
        parts.append(
            f"<line x1='{x:.1f}' y1='{top}' x2='{x:.1f}' y2='{top + LANE_HEIGHT}' stroke='{OOM_COLOUR}' stroke-dasharray='2 3' stroke-width='0.8'/>"
        )
        parts.append(
            f"<circle cx='{x:.1f}' cy='{y:.1f}' r='4' fill='{OOM_COLOUR}'><title>live data {format_size(lane.peak_live)} after event {lane.peak_event}</title></circle>"
        )
        anchor = "end" if lane.peak_event > last / 2 else "start"
        parts.append(
            f"<text x='{x:.1f}' y='{top - 6:.1f}' font-size='11' fill='{OOM_COLOUR}' text-anchor='{anchor}'>live data {format_size(lane.peak_live)}</text>"
        )  # in the margin above the plot
    oom = view.oom
    if oom and oom.get("device") == lane.device:
        x = _x(int(oom.get("event", 0)), last)  # type: ignore[call-overload]
        parts.append(
            f"<line x1='{x:.1f}' y1='{top}' x2='{x:.1f}' y2='{axis_top}' stroke='{OOM_COLOUR}' stroke-width='2'><title>{html_text(oom_caption(view))}</title></line>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _baseline_band(baseline: tuple[str, int, list[int], list[int]] | None, last: int, top: float, scale: float) -> str:
    """The baseline's live data over its own events, dashed, over the run's in-use line."""
    if baseline is None:
        return ""
    _, events, xs, ys = baseline
    band = _band(ys, xs, max(last, events - 1), top, LANE_HEIGHT, scale, BASELINE_COLOUR)
    return band.replace("stroke-width='1.5'", "stroke-width='1.5' stroke-dasharray='5 3'", 1)


def _chart_data(lane: DeviceLane, last: int, baseline: BaselineSide | None) -> dict[str, object]:
    """One lane's interactive chart (uPlot's aligned data): live data, held from the device (drawn when
    asked: a preallocated pool would flatten it), and the baseline's live data over it."""
    run = dict(zip(lane.events, zip(lane.in_use, lane.reserved)))
    if lane.events and last not in run:
        run[last] = run[lane.events[-1]]  # a value holds until the next event: to the last one
    stored = baseline.profile if baseline is not None else None
    xs = sorted(set(run) | set(stored[2] if stored is not None else ()))
    series = [
        {
            "label": f"{LIVE_DATA}; the gated peak in use counts whole chunks: {format_size(lane.peak_in_use)}",
            "colour": PALETTE[0],
            "values": [run[x][0] if x in run else None for x in xs],
        },
        {
            "label": f"held from the device (at most {format_size(lane.peak_reserved)}; click to draw)",
            "colour": "#999999",
            "fill": "rgba(200,200,200,0.35)",
            "show": False,
            "values": [run[x][1] if x in run else None for x in xs],
        },
    ]
    if baseline is not None and stored is not None:
        series.append(
            {
                "label": f"baseline's live data (its {stored[1]} events, {len(stored[2])} stored points, each held to the next)",
                "colour": BASELINE_COLOUR,
                "dash": [6, 4],
                "values": baseline.held_at(xs),
            }
        )
    return {"title": f"{lane.device}: bytes over the events", "x": xs, "series": series}


def _chart_html(data: dict[str, object]) -> str:
    """A chart's data for the page's script; `</` escaped so that no value can end the script."""
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return f"<script type='application/json' class='devmem-chart'>{text}</script>"


CHART_SCRIPT = """
(function () {
  function size(v) {
    if (v == null) return "\u2014";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0, n = Math.abs(v);
    while (n >= 1024 && i < units.length - 1) { n /= 1024; v /= 1024; i++; }
    return (i ? v.toFixed(2) : v.toFixed(0)) + " " + units[i];
  }
  var steps = uPlot.paths.stepped({ align: 1 });
  var BINARY = [];  // the byte axis steps in powers of two: 8, 16, 32 MiB
  for (var p = 0; p < 53; p++) BINARY.push(Math.pow(2, p));
  document.querySelectorAll("script.devmem-chart").forEach(function (node) {
    var data = JSON.parse(node.textContent);
    var series = [{ label: "event" }];
    data.series.forEach(function (s) {
      series.push({ label: s.label, stroke: s.colour, width: 1.5, dash: s.dash, fill: s.fill,
                    show: s.show !== false, spanGaps: true, paths: steps,
                    value: function (u, v) { return size(v); } });
    });
    var box = document.createElement("div");
    node.parentNode.insertBefore(box, node);
    new uPlot({
      title: data.title, width: Math.min(1000, document.body.clientWidth - 40), height: 280,
      scales: { x: { time: false } },
      axes: [{ label: "event" }, { size: 90, incrs: BINARY, values: function (u, vals) { return vals.map(size); } }],
      cursor: { drag: { x: true, y: false } },
      series: series
    }, [data.x].concat(data.series.map(function (s) { return s.values; })), box);
  });
  var held = document.getElementById("show-held");
  if (held) held.addEventListener("change", function () {
    document.body.classList.toggle("held-shown", held.checked);
  });
})();
"""


def _devices_table(view: TimelineView) -> str:
    """Each device's figures; what it held from the device is a column shown on request, stated once
    when every device held the same (a preallocated pool's 75% would dwarf the rest)."""
    held = {lane.peak_reserved for lane in view.lanes}
    rows = "".join(
        f"<tr><td>{html_text(lane.device)}</td><td>{format_size(lane.peak_in_use)}</td>"
        f"<td>{format_size(lane.peak_live)}</td><td>{lane.peak_event}</td>"
        f"<td class='held'>{format_size(lane.peak_reserved)}</td></tr>"
        for lane in view.lanes
    )
    same = (
        f"Held from the device: {format_size(next(iter(held)))} on {'every device' if len(view.lanes) > 1 else html_text(view.lanes[0].device)} under {html_text(view.regime)}. "
        if len(held) == 1
        else ""
    )
    return (
        "<h3>Per device</h3>"
        f"<p>{same}<label><input type='checkbox' id='show-held'> show what each device held</label></p>"
        "<table class='devices'><tr><th>device</th><th>peak in use (chunks)</th><th>peak of live data</th><th>at event</th>"
        "<th class='held'>held from the device</th></tr>"
        f"{rows}</table>"
    )


def _fragmentation_svg(view: TimelineView, last: int) -> str:
    height = 80.0
    parts = [
        "<h3>Fragmentation over the events (XLA's measure: free bytes outside the largest free block, over free bytes)</h3>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH + LEFT + 20:.0f}' height='{height + 45:.0f}'>",
        f"<rect x='{LEFT}' y='5' width='{WIDTH:.0f}' height='{height:.0f}' fill='none' stroke='#ccc'/>",
        f"<text x='2' y='13' font-size='10'>1</text><text x='2' y='{height + 5:.0f}' font-size='10'>0</text>",
    ]
    for i, lane in enumerate(view.lanes):
        xs, ys = steps(lane.events, lane.fragmentation, last)
        points = _svg_points(xs, ys, last, 1.0, 5, height)
        parts.append(
            f"<polyline fill='none' stroke='{PALETTE[i % len(PALETTE)]}' points='{points}'><title>{html_text(lane.device)}</title></polyline>"
        )
    parts.append(_x_ticks(5 + height, last))
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(
    view: TimelineView, title: str, baseline: BaselineSide | None = None, sections: tuple[str, ...] = ()
) -> str:
    """One HTML page, nothing fetched: a lane per device, fragmentation, the holders and the map as
    inline SVG and tables; with `baseline`, the baseline's memory and holders beside the run's;
    `sections` (HTML made by present/ modules: the buffers at each program's peak) after the holders."""
    last = max(0, view.events - 1)
    colours = owner_colours(view)
    head = view.headline
    summary = f"Regime {html_text(view.regime)} on {html_text(view.machine)} ({format_size(view.capacity)} per device); {view.events} events; {len(view.lanes)} device(s)"
    if head is not None:
        summary += f"; peak in use {format_size(head.peak_in_use)} on {html_text(head.device)}"
    script, style = uplot()
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html_text(title)}</title>",
        f"<style>{style}</style>",
        "<style>body{font-family:sans-serif;margin:20px}table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}.oom{color:#d62728;font-weight:bold}"
        "table.devices .held{display:none}body.held-shown table.devices .held{display:table-cell}.hint{color:#555;font-size:90%}</style>",
        f"<script>{script}</script>",
        f"</head><body><h2>{html_text(title)}</h2>",
        f"<p>{summary}.</p>",
    ]
    if view.oom:
        parts.append(f"<p class='oom'>{html_text(oom_caption(view))}</p>")
    shared_top = None
    if baseline is not None and head is not None:  # the run and its baseline on one scale
        shared_top = max(
            max(head.in_use, default=0),
            max(baseline.profile[3], default=0) if baseline.profile else 0,
            baseline.peak_bytes_in_use or 0,
        )
    overlay = baseline.profile if baseline is not None and head is not None else None
    if view.lanes:
        parts.append(_devices_table(view))
        parts.append(
            "<p class='hint'>Drag across a chart to zoom into those events, double-click to zoom out; the values under the"
            " cursor are listed below each chart; click a series' name to draw it or hide it.</p>"
        )
    for lane in view.lanes:
        lane_overlay = overlay if lane is head else None
        parts.append(_chart_html(_chart_data(lane, last, baseline if lane_overlay is not None else None)))
        parts.append(
            "<noscript>"
            + _lane_svg(lane, view, last, shared_top if lane is head else None, lane_overlay)
            + "</noscript>"
        )
    if baseline is not None and head is not None:
        parts.append(_baseline_html(baseline, head))
    parts.append(_fragmentation_svg(view, last))
    if head is not None:
        parts.append(
            f"<h3>Who held the memory at the peak of {html_text(head.device)}</h3><table><tr><th></th><th>holder</th><th>bytes</th></tr>"
        )
        for owner, size in head.at_peak.items():
            parts.append(
                f"<tr><td style='background:{colours.get(owner, PALETTE[-1])}'>&nbsp;&nbsp;</td><td>{html_text(owner)}</td><td>{format_size(size)}</td></tr>"
            )
        parts.append("</table>")
    parts += [section for section in sections if section]
    for caption, pools, pinned, pins in maps(view):
        parts.append(_map_svg(pools, caption, colours, pinned))
        if pins:
            parts.append(
                "<p>The holes are pinned by:</p><ul>" + "".join(f"<li>{html_text(pin)}</li>" for pin in pins) + "</ul>"
            )
    parts.append(f"<script>{CHART_SCRIPT}</script>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _baseline_html(baseline: BaselineSide, head: DeviceLane) -> str:
    """The baseline beside the run: its memory over its own events on the run's in-use scale, and who
    held the memory at each peak."""
    parts = [
        f"<h2>Baseline beside this run</h2><p>{html_text(baseline.file)}: peak in use {format_size(baseline.peak_bytes_in_use) if baseline.peak_bytes_in_use is not None else 'not stored'}; this run: {format_size(head.peak_in_use)} on {html_text(head.device)}.</p>"
    ]
    if baseline.profile is not None:
        device, events = baseline.profile[0], baseline.profile[1]
        parts.append(
            f"<p>{html_text(device)} at the baseline: its live data over its {events} event{'s' if events != 1 else ''}, drawn dashed over this run's line above, on its scale.</p>"
        )
    else:
        parts.append(
            "<p>The baseline stores no profile of its memory over its events (recorded by an older pytest-devmem): refresh it with --devmem-update to draw it here.</p>"
        )
    names = list(dict.fromkeys([*head.at_peak, *baseline.contributors]))
    parts.append(
        f"<h3>Who held the memory at each peak</h3><table><tr><th>holder</th><th>at the baseline's peak</th><th>at this run's peak ({html_text(head.device)})</th></tr>"
    )
    for name in names:
        before, now = baseline.contributors.get(name), head.at_peak.get(name)
        parts.append(
            f"<tr><td>{html_text(name)}</td><td>{format_size(before) if before is not None else '—'}</td><td>{format_size(now) if now is not None else '—'}</td></tr>"
        )
    parts.append("</table><p>The baseline keeps its five largest holders; a holder it does not name shows —.</p>")
    return "\n".join(parts)


def _map_svg(pools: list[PoolView], caption: str, colours: dict[str, str], pinned: set[int]) -> str:
    row, width, label_width = 26, 900.0, 230.0
    rows = [
        (pool, region, size, extent)
        for pool in pools
        for region, (size, extent) in enumerate(zip(pool.region_sizes, map_extent(pool)))
    ]
    parts = [
        f"<h3>{html_text(caption)} ({html_text(MAP_SHOWN)}): coloured in use, grey free</h3>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width + label_width + 10:.0f}' height='{row * len(rows) + 10}'>",
    ]
    scale = width / max((extent for *_, extent in rows), default=1)
    for index, (pool, region, size, extent) in enumerate(rows):
        y = index * row + 4
        parts.append(
            f"<text x='0' y='{y + 15}' font-size='11'>{html_text(allocator_name(pool.allocator))} region {region} ({format_size(size)})</text>"
        )
        for chunk, shown, colour, marked in map_chunks(pool, region, extent, colours, pinned):
            label = html_text(
                f"{chunk.owner or 'free'}: {format_size(chunk.size)} at +{format_size(chunk.offset)}"
                + (" (pins the holes beside it)" if marked else "")
            )
            stroke = "stroke='black' stroke-width='2'" if marked else "stroke='white' stroke-width='0.5'"
            parts.append(
                f"<rect x='{label_width + chunk.offset * scale:.2f}' y='{y}' width='{max(shown * scale, 0.5):.2f}' height='{row - 8}' "
                f"fill='{colour}' {stroke}><title>{label}</title></rect>"
            )
    parts.append("</svg>")
    return "\n".join(parts)
