"""Text from outside (test ids, trace labels and sources, baseline and report fields, paths) made
safe for where it is shown: one escaping for the terminal, one for Markdown, one for HTML, one for
matplotlib's labels. Every renderer passes such text through these; none escapes on its own."""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable, Sequence

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
"""Control characters (C0, DEL, C1: terminal escapes, BEL, a carriage return that rewrites a line),
line and paragraph separators, and the bidirectional marks that reorder what a reader sees."""
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def terminal(text: str) -> str:
    """One line for a terminal: each control character shown as its escape (`\\x1b`, `\\n`), so
    nothing in it can move the cursor, recolour, retitle or ring the terminal, or start a line."""
    return _CONTROL.sub(_visible, text)


def terminal_lines(text: str) -> str:
    """Several lines for a terminal: each line as `terminal` makes it, the line breaks kept."""
    return "\n".join(terminal(line) for line in text.split("\n"))


_MARKDOWN = str.maketrans(
    {"\\": "\\\\", "|": "\\|", "`": "\\`", "*": "\\*", "~": "\\~", "<": "&lt;", ">": "&gt;", "&": "&amp;"}
)


def markdown(text: str) -> str:
    """Text for Markdown, in a table cell or a sentence: a pipe cannot split a row nor a line break
    end it (and start a heading), no raw HTML, entity, code span, emphasis or link forms."""
    return terminal(text.translate(_MARKDOWN).replace("](", "\\]("))


def markdown_rows(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table's lines: the header, its rule, then one line per row, every cell through `markdown`."""
    return [_markdown_row(header), "|" + "---|" * len(header), *(_markdown_row(row) for row in rows)]


def _markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(markdown(cell) for cell in cells) + " |"


def html_text(text: str) -> str:
    """Text for HTML, in an element or a quoted attribute."""
    return html.escape(terminal(text), quote=True)


def matplotlib_text(text: str) -> str:
    """Text for a matplotlib label: a `$` would start mathtext (and a stray one fail the drawing),
    and a character the font draws no glyph for (an emoji in a test id) is shown as its escape
    (`\\U0001f525`): matplotlib would draw an empty box for it and warn, naming its own source file."""
    shown = terminal(text).replace("$", "\\$")
    drawn = _font_characters()
    if drawn is None or all(ord(character) in drawn for character in shown):
        return shown
    return "".join(
        character
        if ord(character) in drawn
        else f"\\x{ord(character):02x}"
        if ord(character) < 0x100
        else f"\\u{ord(character):04x}"
        if ord(character) < 0x10000
        else f"\\U{ord(character):08x}"
        for character in shown
    )


@functools.lru_cache(maxsize=1)
def _font_characters() -> frozenset[int] | None:
    """The characters matplotlib's default font has glyphs for (matplotlib imported already: only a
    picture being drawn asks); None where it cannot be told, and the text is left as it is."""
    try:
        from matplotlib import font_manager, ft2font  # the plot extra, optional

        path = font_manager.findfont(font_manager.FontProperties(), fallback_to_default=True)
        return frozenset(ft2font.FT2Font(path).get_charmap()) | frozenset(range(0x20))
    except Exception:
        return None


def markdown_code(text: str) -> str:
    """Text as a Markdown code span: fenced by more backticks than it holds in a row (CommonMark),
    so a backtick in it cannot end the span; everything inside is shown as it is, never as HTML."""
    shown = terminal(text)
    longest = max((len(run) for run in re.findall("`+", shown)), default=0)
    fence = "`" * (longest + 1)
    padding = " " if shown.startswith("`") or shown.endswith("`") or not shown.strip() else ""
    return f"{fence}{padding}{shown}{padding}{fence}"
