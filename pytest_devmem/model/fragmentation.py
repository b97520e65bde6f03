"""Fragmentation you can act on: the live buffers that pin the holes of a pool, and what a
defragmenting (compacting) allocator, or allocating long-lived buffers first, would have changed.
Each answer comes from the machine's own maps and replays. No pytest, no frameworks here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..json_fields import attributes
from ..units import format_size
from .frameworks import AllocatorSetup
from .machine import MachineRun, MachineSpec, MapSnapshot, allocator_name, contributor, run_machine
from .trace import ALLOCATE_CODE, Trace

TOP_PINS = 3


@dataclass(frozen=True)
class Pin:
    """A live buffer with free memory on both sides: moving it would join two free blocks."""

    allocator: str
    owner: str  # who made it: the executable, op or call site
    size: int  # bytes asked
    chunk: int  # bytes its chunk takes
    event: int  # the trace event that allocated it
    offset: int  # bytes from its region's start
    free_before: int
    free_after: int

    def text(self) -> str:
        return (
            f"a {format_size(self.size)} buffer of {self.owner} ({self.allocator}, allocated at event {self.event}) sits between "
            f"free blocks of {format_size(self.free_before)} and {format_size(self.free_after)}"
        )

    def to_json(self) -> dict[str, object]:
        return attributes(self, "allocator owner size event offset free_before free_after")


def pinning_buffers(snapshot: MapSnapshot | None, trace: Trace, top: int = TOP_PINS) -> list[Pin]:
    """The live buffers that separate the largest free blocks of each pool in `snapshot`, those
    that would join the most free memory first."""
    if snapshot is None:
        return []
    names = trace.names
    pins = []
    for pool in snapshot.pools:
        allocator = allocator_name(pool.source, pool.process)
        chunks = pool.chunks
        for i in range(1, len(chunks) - 1):
            before, chunk, after = chunks[i - 1], chunks[i], chunks[i + 1]
            if chunk[3] < 0 or before[3] >= 0 or after[3] >= 0 or not before[0] == chunk[0] == after[0]:
                continue
            event = chunk[3]
            owner = names[trace.labels[event]] or contributor(
                names[trace.sources[event]], ""
            )  # the fixture's call site too
            pins.append(Pin(allocator, owner, trace.sizes[event], chunk[2], event, chunk[1], before[2], after[2]))
    pins.sort(key=lambda pin: (-(pin.free_before + pin.free_after), pin.event))
    return pins[:top]


@dataclass(frozen=True)
class Defragmentation:
    """The same trace on a compacting allocator: whether it fits, at what peak, moving how much."""

    fits: bool
    peak_bytes_in_use: int
    moved_bytes: int

    def text(self) -> str:
        if not self.fits:
            return "a defragmenting allocator would not fit it either"
        return f"a defragmenting allocator (regime compact) would fit it, at a peak of {format_size(self.peak_bytes_in_use)}, moving {format_size(self.moved_bytes)}"

    def to_json(self) -> dict[str, object]:
        return {"fits": self.fits, "peak_bytes_in_use": self.peak_bytes_in_use, "moved_bytes": self.moved_bytes}


def defragment(
    trace: Trace, setups: Mapping[str, AllocatorSetup], spec: MachineSpec, sources: tuple[str, ...]
) -> Defragmentation:
    """Replay with the allocators of `sources` compacting (at their own fractions)."""
    compacting = {
        kind: replace(setup, mode="compact") if kind in sources and setup.mode in ("prealloc", "compact") else setup
        for kind, setup in setups.items()
    }
    run = run_machine(trace, compacting, spec)
    peak = max((d.peak_bytes_in_use for d in run.devices), default=0)
    moved = sum(a.moved_bytes for d in run.devices for a in d.allocators)
    return Defragmentation(run.fits, peak, moved)


def long_lived_first(trace: Trace, run: MachineRun) -> Trace:
    """The trace with the buffers still live when it failed allocated first, in their order, and the
    rest as it was: what "allocate long-lived buffers first" means for this test."""
    assert run.oom is not None
    live: set[tuple[int, int, int, int]] = set()
    for index, (action, pointer, source, device, process) in enumerate(
        zip(trace.actions, trace.pointers, trace.sources, trace.devices, trace.processes)
    ):
        if index >= run.oom.event:
            break
        key = (pointer, source, device, process)
        if action == ALLOCATE_CODE:
            live.add(key)
        else:
            live.discard(key)
    early = [
        i
        for i in range(run.oom.event)
        if trace.actions[i] == ALLOCATE_CODE
        and (trace.pointers[i], trace.sources[i], trace.devices[i], trace.processes[i]) in live
    ]
    moved = set(early)
    reordered = Trace()
    first_time = trace.times[0] if len(trace) else 0.0
    for index in early:
        event = trace.event(index)
        reordered.append(replace(event, time=first_time))
    for index in range(len(trace)):
        if index not in moved:
            reordered.append(trace.event(index))
    return reordered
