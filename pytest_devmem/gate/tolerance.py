"""Tolerance specs: how far a metric may move from its baseline before it counts as a change.

A spec is a comma-separated list of `[metric:]amount` items. An amount is relative (`10%`), a byte
size (`64MiB`, only for byte metrics) or a plain number (only for `fragmentation`, e.g.
`fragmentation:0.05`). An item without a metric applies to `peak_bytes_in_use`. Only the metrics a
spec names are gated. A metric may have one relative and one absolute amount: a change then fails
only beyond both.

The default, `10%,1MiB`, allows a peak to move by 10% or 1 MiB, whichever is larger. Figures come
from a BFC pool, which rounds every buffer to 256 bytes and grows in regions of 2 MiB and more, and
small tests move by a few scalars or a constant: without the floor, `4 B -> 8 B` reads as +100%.
So a percentage given alone for a byte metric keeps that floor (`5%` means `5%,1MiB`); `5%,0B`
asks for none. A bare number for a byte metric is refused: `10` would be 10 bytes to some readers
and 10% to others. A percentage of a zero baseline is never a failure (nothing to take a percentage
of); the floor still catches a test that went from nothing to a lot.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..units import format_size, format_sizes_apart, parse_size

BYTE_METRICS = ("peak_bytes_in_use", "peak_bytes_reserved", "peak_bytes_requested")
METRICS = (*BYTE_METRICS, "fragmentation")
DEFAULT_FLOOR = "1MiB"
"""The absolute amount a byte metric may always move by, unless a spec gives its own (`5%,0B`: none)."""
DEFAULT_TOLERANCE = f"10%,{DEFAULT_FLOOR}"
TOLERANCE_HELP = (
    "e.g. '10%' (a byte metric keeps the 1MiB floor unless given its own: '10%,0B'), "
    "'peak_bytes_in_use:5%,fragmentation:0.05', '64MiB'; metrics: " + ", ".join(METRICS)
)

_UNIT_RE = re.compile(r"[A-Za-z]")


def format_metric(metric: str, value: float | None) -> str:
    """A metric's value for people: sizes for byte metrics, four decimals otherwise, n/a when missing."""
    if value is None:
        return "n/a"
    return format_size(value) if metric in BYTE_METRICS else f"{value:.4f}"


def format_metrics_apart(metric: str, first: float | None, second: float | None) -> tuple[str, str]:
    """Two values of a metric for people, told apart where rounding would show different values
    alike: sizes with their bytes (units.format_sizes_apart), fractions with every digit."""
    if first is None or second is None:
        return format_metric(metric, first), format_metric(metric, second)
    if metric in BYTE_METRICS:
        return format_sizes_apart(first, second)
    shown = format_metric(metric, first), format_metric(metric, second)
    return shown if shown[0] != shown[1] or first == second else (repr(first), repr(second))


@dataclass(frozen=True)
class Allowance:
    """How much one metric may move: `relative` as a fraction of the baseline, or `absolute`."""

    relative: float | None = None
    absolute: float | None = None

    def allowed(self, baseline: float) -> float:
        """How far the metric may move from `baseline`; infinite for a percentage of zero without a
        floor (`10%,0B`: a percentage of nothing cannot be exceeded)."""
        relative = abs(baseline) * self.relative if self.relative is not None else 0.0
        if self.relative is not None and baseline == 0 and not self.absolute:
            return math.inf
        return max(relative, float(self.absolute or 0.0))

    def describe(self, metric: str) -> str:
        parts = []
        if self.relative is not None:
            parts.append(f"{self.relative:.0%}" if (self.relative * 100).is_integer() else f"{self.relative:.2%}")
        if self.absolute is not None:
            parts.append(format_size(self.absolute) if metric in BYTE_METRICS else f"{self.absolute:g}")
        return " or ".join(parts)


@dataclass(frozen=True)
class Tolerance:
    """The allowances of a parsed spec, by metric."""

    spec: str
    allowances: dict[str, Allowance]


def parse_tolerance(spec: str) -> Tolerance:
    """Parse a spec; ValueError naming the bad part and what is allowed."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"invalid devmem tolerance {spec!r}: expected {TOLERANCE_HELP}")
    allowances: dict[str, Allowance] = {}
    for item in spec.split(","):
        item = item.strip()
        metric, _, amount = item.rpartition(":")
        metric = metric.strip() or "peak_bytes_in_use"
        amount = amount.strip()
        if metric not in METRICS:
            raise ValueError(
                f"invalid devmem tolerance {spec!r}: unknown metric {metric!r}; metrics: {', '.join(METRICS)}"
            )
        allowance = _parse_amount(spec, metric, amount)
        known = allowances.get(metric)
        if known is not None:
            kinds = {"relative" if a.relative is not None else "absolute" for a in (known, allowance)}
            if len(kinds) == 1:
                raise ValueError(
                    f"invalid devmem tolerance {spec!r}: {metric} is given two {kinds.pop()} amounts; give at most one percentage and one absolute amount"
                )
            allowance = Allowance(
                relative=known.relative if known.relative is not None else allowance.relative,
                absolute=known.absolute if known.absolute is not None else allowance.absolute,
            )
        allowances[metric] = allowance
    floor = float(parse_size(DEFAULT_FLOOR))
    for metric, allowance in allowances.items():
        if metric in BYTE_METRICS and allowance.absolute is None:  # a percentage alone keeps the floor
            allowances[metric] = Allowance(relative=allowance.relative, absolute=floor)
    return Tolerance(spec, allowances)


def _parse_amount(spec: str, metric: str, amount: str) -> Allowance:
    problem = f"invalid devmem tolerance {spec!r}: {amount!r} for {metric}"
    if amount.endswith("%"):
        try:
            value = float(amount[:-1])
        except ValueError:
            raise ValueError(f"{problem} is not a percentage such as '10%'") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{problem}: a percentage must be a finite number, 0 or more")
        return Allowance(relative=value / 100)
    if _UNIT_RE.search(amount) and amount.strip().lstrip("+-").lower() not in ("nan", "inf", "infinity"):
        if metric not in BYTE_METRICS:
            raise ValueError(
                f"{problem}: a byte size only fits {', '.join(BYTE_METRICS)}; use a number or a percentage"
            )
        try:
            return Allowance(absolute=float(parse_size(amount)))
        except ValueError as exc:
            raise ValueError(f"{problem}: {exc}") from None
    try:
        value = float(amount)
    except ValueError:
        raise ValueError(f"{problem}: expected a percentage, a size or a number ({TOLERANCE_HELP})") from None
    if metric in BYTE_METRICS:
        raise ValueError(
            f"{problem}: a number without a unit is ambiguous for a byte metric; write {amount}% for a share of the baseline, or a size such as {amount}MiB or {amount}B"
        )
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{problem}: must be a finite number, 0 or more")
    return Allowance(absolute=value)
