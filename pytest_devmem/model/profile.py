"""A test's memory over its events in a few points, small enough to keep in its baseline: its live
data on one device (requests rounded to 256 bytes, as XLA rounds them; not the allocator's chunks,
though stored as `in_use`) after each event, thinned
to at most PROFILE_POINTS points without losing the peak. A failure's picture draws the baseline's
profile beside the run's timeline. Stored as one line of text (`event:bytes` pairs), so a baseline
file still reads and diffs line by line. No pytest here."""

from __future__ import annotations

from .timeline import thin
from .trace import ALLOCATE_CODE, FREE_CODE, Trace

PROFILE_POINTS = 32


def in_use_profile(trace: Trace, device: str, default_device: str = "cpu:0") -> dict[str, object]:
    """`{"device", "events", "in_use"}`: `device`'s live data after each of the trace's events
    that touch it (events that name no device are on `default_device`), thinned."""
    names = trace.names
    codes = {code for code in set(trace.devices) if (names[code] or default_device) == device}
    xs: list[int] = [0]
    ys: list[int] = [0]
    live = 0
    for index, (action, size, code) in enumerate(zip(trace.actions, trace.sizes, trace.devices)):
        if code not in codes:
            continue
        if action == ALLOCATE_CODE:
            live += (size + 255) & -256
        elif action == FREE_CODE:
            live -= (size + 255) & -256
        else:
            continue
        xs.append(index)
        ys.append(max(live, 0))
    keep = thin(xs, ys, limit=PROFILE_POINTS)
    return {"device": device, "events": len(trace), "in_use": " ".join(f"{xs[i]}:{ys[i]}" for i in keep)}


def decode_profile(profile: object) -> tuple[str, int, list[int], list[int]] | None:
    """A stored profile's device, event count and points; None for anything that is not one."""
    if not isinstance(profile, dict):
        return None
    device, events, text = profile.get("device"), profile.get("events"), profile.get("in_use")
    if (
        not isinstance(device, str)
        or isinstance(events, bool)
        or not isinstance(events, int)
        or not isinstance(text, str)
    ):
        return None
    xs, ys = [], []
    try:
        for pair in text.split():
            event, size = pair.split(":")
            xs.append(int(event))
            ys.append(int(size))
    except ValueError:
        return None
    if any(y < 0 for y in ys) or xs != sorted(xs):
        return None
    return device, events, xs, ys
