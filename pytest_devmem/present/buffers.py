"""The buffers at each program's peak, and the arrays held at the test's peak by the line that made them,
as tables: Markdown for `devmem show`, HTML for a failure's picture (the baseline's beside this run's,
each line a link to its file). Takes plain data (model/buffers.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..model.buffers import SMALL_SHARE, PeakBuffer, ProgramBuffers, line_text
from ..units import format_size
from .text import html_text, markdown, markdown_rows


@dataclass(frozen=True)
class BufferRow:
    """One buffer of one program: its bytes at the baseline's peak and at this run's (None: not listed)."""

    program: str
    buffer: PeakBuffer
    before: int | None
    now: int | None


def buffer_rows(
    now: Mapping[str, ProgramBuffers], before: Mapping[str, ProgramBuffers] | None = None
) -> list[BufferRow]:
    """Each program's buffers, now's and the baseline's matched by shape, op, line and memory space;
    by program, then largest first."""
    rows = []
    for program in sorted(set(now) | set(before or {})):
        current = now[program].keyed() if program in now else {}
        earlier = (before or {})[program].keyed() if program in (before or {}) else {}
        for key in dict.fromkeys([*current, *earlier]):
            shown = current.get(key) or earlier[key]
            rows.append(
                BufferRow(
                    program,
                    shown,
                    earlier[key].bytes if key in earlier else None,
                    current[key].bytes if key in current else None,
                )
            )
    rows.sort(key=lambda row: (row.program, -max(row.now or 0, row.before or 0), row.buffer.key))
    return rows


@dataclass
class Hidden:
    """What a listing left out by default, counted so that it can say so."""

    programs: int = 0  # JAX's own: none of their buffers names a line of the user's
    rows: int = 0  # held-at-peak lines under SMALL_SHARE of the test's peak

    def text(self) -> str:
        """`hidden: 2 program(s) of JAX's own ...; --all shows them`, or "" where nothing was."""
        if not self.programs and not self.rows:
            return ""
        return (
            f"hidden: {self.programs} program(s) of JAX's own (no buffer of theirs names a line of yours) and "
            f"{self.rows} held line(s) under {SMALL_SHARE:.0%} of a test's peak; --all shows them\n"
        )


def worth_reading(
    programs: Mapping[str, ProgramBuffers], lines: Mapping[str, Mapping[str, int]], peak: float | None, hidden: Hidden
) -> tuple[dict[str, ProgramBuffers], dict[str, dict[str, int]]]:
    """A test's buffers and held lines less JAX's own programs and rows under SMALL_SHARE of its
    peak (a program's small buffers join its "more, smaller"), counted in `hidden`."""
    floor = SMALL_SHARE * (peak or 0)
    kept = {}
    for name, program in programs.items():
        if program.buffers and not any(buffer.at for buffer in program.buffers):
            hidden.programs += 1
            continue
        large = tuple(buffer for buffer in program.buffers if buffer.bytes >= floor)
        kept[name] = replace(program, buffers=large, more=program.more + len(program.buffers) - len(large))
    held = {holder: {site: size for site, size in sites.items() if size >= floor} for holder, sites in lines.items()}
    hidden.rows += sum(map(len, lines.values())) - sum(map(len, held.values()))
    return kept, {holder: sites for holder, sites in held.items() if sites}


def _space(buffer: PeakBuffer) -> str:
    return "main" if not buffer.memory_space else f"space {buffer.memory_space}"


def markdown_table(title: str, programs: Mapping[str, ProgramBuffers]) -> str:
    """A test's buffers at each program's peak, as `devmem show` lists them."""
    header = ("program", "buffer", "op", "line", "bytes", "padding", "memory")
    rows: list[tuple[str, ...]] = [
        (
            row.program,
            row.buffer.shape,
            row.buffer.op,
            row.buffer.at or "(not known)",
            format_size(row.buffer.bytes),
            format_size(row.buffer.padding) if row.buffer.padding else "",
            _space(row.buffer),
        )
        for row in buffer_rows(programs)
    ]
    rows += [
        (name, f"{program.more} more, smaller", *[""] * 5) for name, program in sorted(programs.items()) if program.more
    ]
    return (
        "\n".join([f"\n**{markdown(title)}**: buffers at each program's peak\n", *markdown_rows(header, rows)]) + "\n"
    )


def line_rows(
    now: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]] | None = None
) -> list[tuple[str, str, int | None, int | None]]:
    """(holder, line, bytes at the baseline's peak, now) for each line either side names; by holder,
    then largest first."""
    rows = []
    for holder in sorted(set(now) | set(before or {})):
        current, earlier = now.get(holder, {}), (before or {}).get(holder, {})
        for site in dict.fromkeys([*current, *earlier]):
            rows.append((holder, site, earlier.get(site), current.get(site)))
    rows.sort(key=lambda row: (row[0], -max(row[3] or 0, row[2] or 0), row[1]))
    return rows


def markdown_lines_table(title: str, lines: Mapping[str, Mapping[str, int]]) -> str:
    """A test's arrays held at its peak, by holder and the user's line that made them, as `devmem show` lists them."""
    rows = [(holder, line_text(site), format_size(size or 0)) for holder, site, _, size in line_rows(lines)]
    title_line = f"\n**{markdown(title)}**: arrays held at the peak, by the line that made them\n"
    return "\n".join([title_line, *markdown_rows(("held by", "line", "bytes"), rows)]) + "\n"


def html_lines_section(
    now: Mapping[str, Mapping[str, int]],
    before: Mapping[str, Mapping[str, int]] | None = None,
    root: Path | None = None,
) -> str:
    """The arrays held at the test's peak by the line that made them, the baseline's beside this run's."""
    if not now and not before:
        return ""
    parts = [
        "<h3>Arrays held at the peak, by the line that made them</h3>",
        "<table><tr><th>held by</th><th>line</th><th>at the baseline's peak</th><th>at this run's peak</th></tr>",
    ]
    for holder, site, earlier, current in line_rows(now, before):
        parts.append(
            f"<tr><td>{html_text(holder)}</td><td>{_link(site, root) if site else html_text(line_text(site))}</td>"
            f"<td>{format_size(earlier) if earlier is not None else '—'}</td>"
            f"<td>{format_size(current) if current is not None else '—'}</td></tr>"
        )
    parts.append(
        "</table><p>Each holder's three largest lines: the user's line of the call that made its arrays "
        "(the executable's run, the put, TensorFlow's op); — marks a line one side does not list.</p>"
    )
    return "\n".join(parts)


def _link(at: str, root: Path | None) -> str:
    """Each `file:line` of a buffer, linked to its file (below `root` where relative)."""
    links = []
    for part in (item.strip() for item in at.split(",") if item.strip()):
        file = part.rsplit(":", 1)[0]
        path = Path(file) if Path(file).is_absolute() or root is None else Path(root, file)
        try:
            href = path.resolve().as_uri()
        except ValueError:
            links.append(html_text(part))
            continue
        links.append(f"<a href='{html_text(href)}'>{html_text(part)}</a>")
    return ", ".join(links) or "(not known)"


def html_section(
    now: Mapping[str, ProgramBuffers], before: Mapping[str, ProgramBuffers] | None = None, root: Path | None = None
) -> str:
    """The largest buffers at each program's peak, the baseline's beside this run's, with lines."""
    if not now and not before:
        return ""
    parts = [
        "<h3>The largest buffers at each program's peak</h3>",
        "<table><tr><th>program</th><th>buffer</th><th>op</th><th>line</th><th>at the baseline's peak</th><th>at this run's peak</th><th>padding</th><th>memory</th></tr>",
    ]
    for row in buffer_rows(now, before):
        buffer = row.buffer
        parts.append(
            f"<tr><td>{html_text(row.program)}</td><td>{html_text(buffer.shape)}</td><td>{html_text(buffer.op)}</td>"
            f"<td>{_link(buffer.at, root)}</td>"
            f"<td>{format_size(row.before) if row.before is not None else '—'}</td>"
            f"<td>{format_size(row.now) if row.now is not None else '—'}</td>"
            f"<td>{format_size(buffer.padding) if buffer.padding else ''}</td><td>{_space(buffer)}</td></tr>"
        )
    parts.append(
        "</table><p>Each program's five largest buffers live at its peak, from its compile's buffer assignment; "
        "— marks a buffer one side does not list (absent there, or not among its largest).</p>"
    )
    return "\n".join(parts)
