"""One trace per test: the captures' event streams merged in time order."""

from __future__ import annotations

from typing import Iterable

from ..model.trace import ALLOCATE, Trace, TraceEvent


def merge(*streams: Iterable[TraceEvent]) -> Trace:
    """The streams' events in time order (stable: equal times keep stream order), with buffer ids
    renumbered 1, 2, 3... across streams in allocation order, so ids never collide."""
    tagged = [(event.time, index, position, event) for index, stream in enumerate(streams) for position, event in enumerate(stream)]
    tagged.sort(key=lambda item: item[:3])
    numbers: dict[tuple[int, int], int] = {}
    events = []
    for _, index, _, event in tagged:
        key = (index, event.pointer)
        if event.action == ALLOCATE or key not in numbers:
            numbers[key] = len(numbers) + 1
        events.append(TraceEvent(event.action, numbers[key], event.size, event.time, event.thread, event.stream, event.source, event.label))
    return Trace(events)
