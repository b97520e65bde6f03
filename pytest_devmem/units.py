"""Byte sizes: parse what users type, format what they read.

Binary (KiB, MiB, GiB, TiB) and decimal (kB, MB, GB, TB) units are both accepted and never confused:
`1.5GB` is 1,500,000,000 bytes, `1.5GiB` is 1,610,612,736. A bare `16G` is refused because it is
ambiguous; the error says which two spellings were probably meant.
"""

from __future__ import annotations

import math
import re

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
"""The binary units as numbers of bytes, for code and tests that write sizes (`64 * MiB`)."""

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_AMBIGUOUS = {"k", "m", "g", "t"}
_SIZE_RE = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[A-Za-z]*)\s*$")

ALLOWED_UNITS = "B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)"


def shown_value(value: object) -> str:
    """A value as an error names it: its repr, cut short when long; a number too long to read (a
    marker's `10**400`) by its length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        try:
            digits = f"a {len(str(abs(value)))}-digit number"
        except ValueError:  # more digits than Python writes (sys.get_int_max_str_digits)
            digits = f"a number of some {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
        return f"{'-' if value < 0 else ''}({digits})"
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def byte_count_problem(value: object, largest: int | None = None, holder: str = "") -> str | None:
    """Why `value`, read back from a file, cannot be a number of bytes (at most `largest`), or None:
    the rule a size from a user meets (parse_size), for numbers no user typed. A whole number: never
    a boolean (`true` is 1 to Python), a float (JSON's `Infinity`, `1e999`), text or null; never
    negative; never more than `largest` (what `holder` holds, where named)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{shown_value(value)} is not a whole number of bytes"
    if value < 0:
        return f"{shown_value(value)} is negative"
    if largest is not None and value > largest:
        shown = f"{value} ({format_size(value)})" if value < 10**30 else shown_value(value)
        return f"{shown} is more than {format_size(largest)}{f', what {holder} holds' if holder else ''}"
    return None


def parse_size(text: str | int) -> int:
    """Return the number of bytes `text` names; raise ValueError naming the text and the allowed units.

    Fractional results are rounded down to whole bytes (`0.5KiB` is 512, `1.0000001B` is 1).
    """
    if isinstance(text, bool):
        raise ValueError(f"invalid size {shown_value(text)}: expected a number of bytes or a string such as '16GiB'")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"invalid size {shown_value(text)}: a size cannot be negative")
        return text
    if not isinstance(text, str):
        raise ValueError(f"invalid size {shown_value(text)}: expected a number of bytes or a string such as '16GiB'")
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"invalid size {shown_value(text)}: expected a number and a unit, such as '16GiB' or '1.5GB'")
    unit = match.group("unit").lower()
    if unit in _AMBIGUOUS:
        number = match.group("number")
        raise ValueError(
            f"ambiguous size {shown_value(text)}: write {number}{unit.upper()}iB (powers of 1024) "
            f"or {number}{unit.upper()}B (powers of 1000)"
        )
    if unit not in _UNITS:
        raise ValueError(
            f"invalid size {shown_value(text)}: unknown unit {match.group('unit')!r}; allowed: {ALLOWED_UNITS}"
        )
    value = float(match.group("number")) * _UNITS[unit]
    if not math.isfinite(value):
        raise ValueError(f"invalid size {shown_value(text)}: too large")
    return int(value)


def format_short_of(available: int, needed: int) -> str:
    """`available` as a size, with the bytes it lacks when rounding would hide them: a largest free
    block of 2 GiB - 256 B for 2 GiB needed reads `2.00 GiB (256 bytes short of the 2147483648 needed)`,
    never the same figure as the request it cannot hold."""
    text = format_size(available)
    if 0 <= available < needed and text == format_size(needed):
        text += f" ({needed - available} bytes short of the {needed} needed)"
    return text


def format_size(nbytes: float) -> str:
    """Human-readable binary size, e.g. `1.50 GiB`; exact bytes below 1 KiB."""
    sign = "-" if nbytes < 0 else ""
    magnitude = abs(nbytes)
    if magnitude < 1024:
        return f"{sign}{int(magnitude)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        magnitude /= 1024
        if magnitude < 1024 or unit == "TiB":
            return f"{sign}{magnitude:.2f} {unit}"
    raise AssertionError("unreachable")


def format_sizes_apart(first: float, second: float) -> tuple[str, str]:
    """Two sizes for people, each with its exact bytes where rounding would show two different
    sizes alike (`1.00 MiB (1048576 bytes)` and `1.00 MiB (1052672 bytes)`): a message that says
    two figures differ never shows them the same."""
    shown = format_size(first), format_size(second)
    if shown[0] != shown[1] or first == second:
        return shown
    return f"{shown[0]} ({_exact(first)} bytes)", f"{shown[1]} ({_exact(second)} bytes)"


def _exact(nbytes: float) -> str:
    return str(int(nbytes)) if float(nbytes).is_integer() else repr(nbytes)


def round_up(nbytes: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= nbytes."""
    return -(-nbytes // multiple) * multiple
