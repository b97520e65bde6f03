"""One trace per test: the captures' event streams merged in time order."""

from __future__ import annotations

from collections.abc import Iterable

from ..model.trace import ALLOCATE, Trace, TraceEvent


def merge(*streams: Trace | Iterable[TraceEvent]) -> Trace:
    """The streams' events in time order (stable: equal times keep stream order), with buffer ids
    renumbered 1, 2, 3... across streams in allocation order, so ids never collide. One non-empty
    stream that is a Trace comes back as it is (the recorder numbered it already)."""
    listed = [stream if isinstance(stream, Trace) else list(stream) for stream in streams]
    present = [stream for stream in listed if len(stream)]
    if len(present) == 1 and isinstance(present[0], Trace):
        return present[0]
    tagged = [
        (event.time, index, position, event)
        for index, stream in enumerate(present)
        for position, event in enumerate(stream)
    ]
    tagged.sort(key=lambda item: item[:3])
    numbers: dict[tuple[int, int], int] = {}
    merged = Trace()
    for _, index, _, event in tagged:
        key = (index, event.pointer)
        if event.action == ALLOCATE or key not in numbers:
            numbers[key] = len(numbers) + 1
        merged.append(event)
        merged.pointers[-1] = numbers[key]
    return merged
