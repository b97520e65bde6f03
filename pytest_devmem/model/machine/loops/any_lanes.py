"""The loop for any trace (on-demand and compacting pools, sizes that are not positive, a timeline),
each pool through its own methods; and for the events the compiled loop hands back (`compiled_bfc`:
a pool that starts, grows, moves buffers or fails, an unknown pointer or action), over a range."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice, repeat

from ....errors import InvalidFreeError, OutOfMemoryError
from ...pool.chunk_table import SIZE_SHIFT
from ..state import AllocatorState, DeviceState, Replay


def replay_lanes(replay: Replay, first: int = 0, stop: int | None = None) -> int:
    """Events `first` to `stop` (not included; the end by default): each event's lane picks its
    allocator; the index of the last event run. Every counter lives on the device and allocator
    objects, so runs of consecutive ranges give what one run gives (a range never parts a
    temporary from its free: the compiled loop hands both back)."""
    trace = replay.trace
    lanes, recorded, stop_on_oom = replay.lanes, replay.recorded, replay.stop_on_oom
    snapshots, fragmented = replay.snapshots, replay.fragmented
    step, dropped = replay.step, replay.dropped
    actions, pointers, sizes = trace.actions, trace.pointers, trace.sizes
    lane_codes = replay.lane_codes if replay.lane_codes is not None else repeat(0, len(trace))
    last = len(actions) - 1
    stop = len(actions) if stop is None else stop
    events: Iterable[tuple[int, int, int, int]] = zip(actions, pointers, sizes, lane_codes)
    if first or stop < len(actions):
        events = islice(events, first, stop)
    skip = False
    transient = False
    index = first - 1
    for index, (action, pointer, size, lane) in enumerate(events, first):
        if skip:  # the free of a temporary handled with its allocation
            skip = False
            continue
        if action == 2:  # a recorded failure held nothing
            continue
        allocator = lanes[lane]
        if allocator is None:
            allocator = replay.start(lane)
        if action == 3:  # started before the trace, holding what is not the trace's
            try:
                started(allocator, size, index, pointer)
            except OutOfMemoryError as error:  # a buffer a shared fixture keeps: its setup fails there
                if replay.oom is None:
                    replay.fail(error, allocator, index)
                if stop_on_oom:
                    break
            if recorded is not None:  # a moment of the timeline as every event is
                recorded.devices.append(allocator.device.code)
                recorded.in_use.append(allocator.device.in_use)
                recorded.reserved.append(allocator.device.held)
                recorded.fragmentation.append(allocator.device.sampled)
            continue
        device = allocator.device
        pool = allocator.pool
        assert pool is not None
        rounded = (size + 255) & ~255
        if device.fragmented:  # the state after its last event is its most fragmented so far
            fragmented[device.name] = replay.promise(
                device, device.worst_event if device.worst_event is not None else index - 1, index
            )
            device.fragmented = False
        if action == 0:
            counts_ = allocator.counts
            counts_[0] += 1
            if counts_[1] + size > counts_[2]:
                counts_[2] = counts_[1] + size
            transient = (
                allocator.bfc
                and index < last
                and actions[index + 1] == 1
                and pointers[index + 1] == pointer
                and device.in_use + rounded <= device.peak_in_use
            )
            if transient and recorded is None:
                # a temporary freed by the very next event that sets no new peak: a BFC pool is left
                # exactly as it was (split, then merged back), so only its peaks are kept
                chunk = pool.best_fit(rounded)  # type: ignore[union-attr]
                if chunk:
                    taken = device.chunks + pool.handed_out(rounded, chunk)  # type: ignore[union-attr]
                    if taken > device.peak_chunks:
                        device.peak_chunks = taken
                    if allocator.in_use + rounded > allocator.peak_in_use:
                        allocator.peak_in_use = allocator.in_use + rounded
                    skip, transient = True, False
                    if (
                        replay.lane_codes is not None and replay.lane_codes[index + 1] != lane
                    ):  # the same pointer freed on another lane
                        replay.skipped.update((index, index + 1))
                    continue
            in_use, held = pool.bytes_in_use, pool.pool_bytes + pool.bytes_reserved
            try:
                handle = pool.alloc(size)
            except OutOfMemoryError as error:
                counts_[0] -= 1
                transient = False
                if replay.oom is None:
                    replay.fail(error, allocator, index)
                if stop_on_oom:
                    break
                dropped.add((lane, pointer))
                continue
            counts_[1] += size
            allocator.handles[pointer] = (handle, index)
            allocated(allocator, in_use, held, rounded, index)
        elif action == 1:
            if device.pending:  # its peak is the state right before this free
                snapshots[device.name] = replay.promise(device, device.peak_event, index)
                device.pending = False
            entry = allocator.handles.pop(pointer, None)
            if entry is None:
                if (lane, pointer) in dropped:
                    dropped.discard((lane, pointer))
                    continue
                raise InvalidFreeError(
                    f"trace event {index}: free of {pointer:#x}, which the trace never allocated on {device.name}"
                )
            in_use, held = pool.bytes_in_use, pool.pool_bytes + pool.bytes_reserved
            pool.free(entry[0])
            device.chunks += pool.bytes_in_use - in_use
            device.held += pool.pool_bytes + pool.bytes_reserved - held
            rounded = (sizes[entry[1]] + 255) & ~255
            allocator.in_use -= rounded
            device.in_use -= rounded
            allocator.counts[1] -= sizes[entry[1]]
        if transient:  # sampled after its free instead, as when it is handled with its allocation
            transient = False
            fragmentation = device.sampled
        elif device.in_use:
            fragmentation = 0.0
            solo = device.solo
            if solo is not None:  # XLA's GetFragmentation of its one pool, inline: this runs per event
                free = solo.pool_bytes - solo.bytes_in_use
                if free > 0:
                    fragmentation = (free - (solo.table.free[-1] >> SIZE_SHIFT)) / free
            else:
                fragmentation = device.fragmentation()
            sampled(device, fragmentation, index, step)
        else:
            fragmentation = device.sampled = 0.0
        if recorded is not None:
            recorded.devices.append(device.code)
            recorded.in_use.append(device.in_use)
            recorded.reserved.append(device.held)
            recorded.fragmentation.append(fragmentation)
    return index


def allocated(allocator: AllocatorState, in_use: int, held: int, rounded: int, index: int) -> None:
    """An allocation of `rounded` bytes that the allocator's pool served at event `index`, its bytes
    in use and held having been `in_use` and `held` before: the device's chunks, what the pool took
    from the device, and the allocator's and device's bytes in use, with their peaks."""
    device, pool = allocator.device, allocator.pool
    assert pool is not None
    device.chunks += pool.bytes_in_use - in_use
    if device.chunks > device.peak_chunks:
        device.peak_chunks = device.chunks
    grew = pool.pool_bytes + pool.bytes_reserved - held
    if grew:
        took_more(allocator, held, grew)
    allocator.in_use += rounded
    if allocator.in_use > allocator.peak_in_use:
        allocator.peak_in_use = allocator.in_use
    device.in_use += rounded
    if device.in_use > device.peak_in_use:
        device.peak_in_use = device.in_use
        device.peak_event = index
        device.pending = True
        device.fragmentation_at_peak = device.fragmentation()


def started(allocator: AllocatorState, size: int, index: int, pointer: int) -> None:
    """The allocator started before the trace (a `start` event at `index`), holding `size` bytes in
    use that are not the trace's (a buffer a shared fixture keeps, each its own event): its pool
    serves them as an allocation at `pointer` that the trace never frees, and holds what that took;
    they count for what fits, not in the trace's figures (in use, requested), which are its own.
    Where `size` is 0, its first allocation is the smallest (256 bytes), freed: the pool holds what
    starting took. OutOfMemoryError where the pool cannot serve it (the fixture's setup fails on the
    device)."""
    device, pool = allocator.device, allocator.pool
    assert pool is not None
    held = pool.pool_bytes + pool.bytes_reserved
    handle = pool.alloc(max(size, 1))
    if size > 0:
        allocator.handles[pointer] = (handle, index)  # no event of the trace frees it
        device.kept_before += (size + 255) & ~255
    else:
        pool.free(handle)
    grew = pool.pool_bytes + pool.bytes_reserved - held
    if grew:
        took_more(allocator, held, grew)


def took_more(allocator: AllocatorState, held: int, grew: int) -> None:
    """The allocator's pool, which held `held` bytes, took `grew` more from its device: what it took
    at its first allocation, and the allocator's and the device's peaks of what they held."""
    device = allocator.device
    device.held += grew
    now_held = held + grew
    if not allocator.took:
        allocator.took = now_held
    if now_held > allocator.peak_held:
        allocator.peak_held = now_held
    if device.held > device.peak_held:
        device.peak_held = device.held


def sampled(device: DeviceState, fragmentation: float, index: int, step: float) -> None:
    """The device's fragmentation after event `index`: its worst so far, and a map owed at each
    `step` up (at most 1/FRAGMENTATION_STEP maps a device)."""
    device.sampled = fragmentation
    if device.worst_fragmentation is None or fragmentation > device.worst_fragmentation:
        device.worst_fragmentation, device.worst_event = fragmentation, index
        if fragmentation >= device.mapped + step:
            device.fragmented, device.mapped = True, fragmentation
