"""Answers from a recorded allocation trace, without a GPU: the smallest preallocated fraction a test
needs, and whether it would run out of memory on a device of another size. No pytest here."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .device import SimulatedDevice
from .pool import Policy, make_pool
from .pool.tracing import replay
from .trace import Trace


def fits(trace: Trace, policy: Policy, capacity: int) -> bool:
    """Whether `trace` replays under `policy` on a fresh simulated device of `capacity` without OOM."""
    return replay(trace, make_pool(SimulatedDevice(capacity), policy)).ok


MIN_FRACTION_FLOOR = 0.01
"""Where the search for the smallest fraction stops: answers are in hundredths of the device, so an
answer of 0.01 means "0.01 or less" (the trace may fit in less; that was not tried)."""


def find_min_fraction(trace: Trace, capacity: int) -> float | None:
    """The smallest fraction (in hundredths) at which `trace` passes under prealloc, or None if even
    the whole device is too small; MIN_FRACTION_FLOOR when it passes there (it may pass below).

    The BFC pool's success is not strictly monotonic in the region size (a region under twice a
    request is handed out whole), so the answer is found by walking up from the lower bound the
    live peak sets, and is verified: it passes, and one hundredth less does not.
    """
    peak = trace.peak_live_bytes()
    if peak == 0:
        return MIN_FRACTION_FLOOR
    start = max(1, math.floor(peak / capacity * 100))
    for hundredths in range(start, 101):
        if fits(trace, Policy.of("fraction", hundredths / 100), capacity):
            return hundredths / 100
    return None


def min_fraction_text(value: float | None) -> str:
    """An answer of find_min_fraction for people: `0.37`, `0.01 or less (the search stops at 0.01)`,
    or that it does not fit at all."""
    if value is None:
        return "does not fit even at 1.00"
    if value <= MIN_FRACTION_FLOOR:
        return f"{MIN_FRACTION_FLOOR:.2f} or less (the search stops at {MIN_FRACTION_FLOOR:.2f})"
    return f"{value:.2f}"


@dataclass(frozen=True)
class WhatIf:
    """How a trace fares under a policy on a device of another size."""

    capacity: int
    ok: bool
    message: str = ""


def what_if(trace: Trace, policy: Policy, capacity: int) -> WhatIf:
    """Replay `trace` under `policy` on a simulated device of `capacity`."""
    result = replay(trace, make_pool(SimulatedDevice(capacity), policy))
    if result.ok:
        return WhatIf(capacity, True)
    first_line = str(result.error).splitlines()[0] if result.error else "out of memory"
    return WhatIf(capacity, False, f"event {result.failed_at}: {first_line}")
