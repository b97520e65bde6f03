"""Text from outside (test ids, trace labels and sources, baseline and report fields, paths) made
safe for where it is shown: one escaping for the terminal, one for Markdown, one for HTML, one for
matplotlib's labels. Every renderer passes such text through these; none escapes on its own."""

from __future__ import annotations

import html
import re

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


def html_text(text: str) -> str:
    """Text for HTML, in an element or a quoted attribute."""
    return html.escape(terminal(text), quote=True)


def matplotlib_text(text: str) -> str:
    """Text for a matplotlib label: a `$` would start mathtext (and a stray one fail the drawing)."""
    return terminal(text).replace("$", "\\$")


def markdown_code(text: str) -> str:
    """Text as a Markdown code span: fenced by more backticks than it holds in a row (CommonMark),
    so a backtick in it cannot end the span; everything inside is shown as it is, never as HTML."""
    shown = terminal(text)
    longest = max((len(run) for run in re.findall("`+", shown)), default=0)
    fence = "`" * (longest + 1)
    padding = " " if shown.startswith("`") or shown.endswith("`") or not shown.strip() else ""
    return f"{fence}{padding}{shown}{padding}{fence}"
