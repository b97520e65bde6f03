"""The loop for several lanes, all on BFC pools: counters on the device and allocator objects, XLA's
BFC rules inline."""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import chain, count, islice
from typing import Any

from ....errors import InvalidFreeError, OutOfMemoryError
from ...pool.chunk_table import CHUNK_BITS, CHUNK_MASK, SIZE_SHIFT
from ..state import Replay, sync
from .compiled_bfc import replay_compiled, suits
from .inline_pools import INLINE_POOLS, allocate, compactions
from .served import allocated, sampled


def replay_bfc_lanes(replay: Replay) -> int | None:
    """A trace of several lanes whose allocators are all BFC pools (or compacting ones, no other
    subclass) and whose sizes are all positive; the index of the last event run, or None where some allocator would be
    another kind. Each lane's pool runs inline; counters live on the device and allocator objects."""
    trace = replay.trace
    machine, names = replay.machine, trace.names
    lane_codes = replay.lane_codes
    if lane_codes is None or not all(machine.is_bfc(names[source]) for _, _, source in replay.lane_keys):
        return None
    if suits(replay):
        return replay_compiled(replay, run_events)
    return run_events(replay, 0, len(trace.actions))


def run_events(replay: Replay, first: int, stop: int) -> int:
    """Events `first` to `stop` (not included); the index of the last event run. Counters live on
    the device and allocator objects, so runs of consecutive ranges give what one run gives."""
    trace = replay.trace
    lane_codes = replay.lane_codes
    assert lane_codes is not None
    actions, pointers, sizes = trace.actions, trace.pointers, trace.sizes
    lanes = replay.lanes
    refs: list[Any] = [None] * len(lanes)
    recorded, stop_on_oom, step = replay.recorded, replay.stop_on_oom, replay.step
    record = recorded is not None
    if recorded is not None:
        timeline_in_use, timeline_reserved, timeline_fragmentation = (
            recorded.in_use.append,
            recorded.reserved.append,
            recorded.fragmentation.append,
        )
        timeline_devices = recorded.devices.append
    shift, id_shift, id_mask, may_skip = SIZE_SHIFT, CHUNK_BITS, CHUNK_MASK, not record
    snapshots, fragmented_maps, skipped = replay.snapshots, replay.fragmented, replay.skipped
    dropped = replay.dropped
    skip = False
    index = first - 1
    upcoming = chain(islice(pointers, first + 1, None), (-1,))
    for index, action, pointer, size, next_pointer, lane in zip(
        count(first),
        islice(actions, first, stop),
        islice(pointers, first, stop),
        islice(sizes, first, stop),
        upcoming,
        islice(lane_codes, first, stop),
    ):
        if skip:  # the free of a temporary handled with its allocation
            skip = False
            continue
        if action == 2:  # a recorded failure held nothing
            continue
        lane_refs = refs[lane]
        if lane_refs is None:
            if lanes[lane] is None:
                replay.start(lane)
            for code, started in enumerate(lanes):
                if started is not None and refs[code] is None:
                    assert type(started.pool) in INLINE_POOLS
                    started.inline = True  # its buffers are (address, event, chunk id, size, rounded); the pool's maps are left stale until the end (inline_pools.py)
                    refs[code] = _refs(started)
            lane_refs = refs[lane]
            assert lane_refs is not None
        (
            allocator,
            device,
            pool,
            handles,
            counts,
            size_of,
            address_of,
            prev_of,
            next_of,
            asked,
            spare,
            free_list,
            max_waste,
        ) = lane_refs
        if device.fragmented:  # the state after its last event is its most fragmented so far
            fragmented_maps[device.name] = replay.promise(
                device, device.worst_event if device.worst_event is not None else index - 1, index
            )
            device.fragmented = False
        if not action:  # an allocation
            rounded = (size + 255) & -256
            counts[0] += 1
            live = counts[1] + size
            if live > counts[2]:
                counts[2] = live
            if next_pointer == pointer and actions[index + 1] == 1 and device.in_use + rounded <= device.peak_in_use:
                # a temporary freed by the very next event that sets no new peak: a BFC pool is left
                # exactly as it was (split, then merged back), so only its peaks are kept
                if not record:
                    i = bisect_left(free_list, rounded << shift)
                    if i < len(free_list):
                        chunk = free_list[i] >> shift
                        taken = device.chunks + (
                            rounded if chunk >= 2 * rounded or chunk - rounded >= max_waste else chunk
                        )
                        if taken > device.peak_chunks:
                            device.peak_chunks = taken
                        if allocator.in_use + rounded > allocator.peak_in_use:
                            allocator.peak_in_use = allocator.in_use + rounded
                        skip = True
                        if (
                            lane_codes[index + 1] != lane
                        ):  # the same pointer freed on another lane: that free is skipped too
                            skipped.update((index, index + 1))
                        continue
                transient, i = True, -1
            else:
                # BFCPool.alloc, inline: the best fit is the first free chunk at or after (rounded, 0)
                i = bisect_left(free_list, rounded << shift)
                n = len(free_list)
                if i == n:
                    transient, i = False, -1
            if i >= 0:
                key = free_list.pop(i)
                cid, chunk = key & id_mask, key >> shift
                address = address_of[cid]
                if chunk >= 2 * rounded or chunk - rounded >= max_waste:  # split off the rest
                    rest_size, rest_address, after = chunk - rounded, address + rounded, next_of[cid]
                    if spare:
                        rest = spare.pop()
                        size_of[rest], address_of[rest], prev_of[rest], next_of[rest], asked[rest] = (
                            rest_size,
                            rest_address,
                            cid,
                            after,
                            0,
                        )
                    else:
                        rest = pool.table.new_chunk(rest_size, rest_address, cid, after, 0)
                    size_of[cid] = rounded
                    next_of[cid] = rest
                    if after:
                        prev_of[after] = rest
                    insort(free_list, rest_size << shift | rest_address << id_shift | rest)
                    chunk = rounded
                asked[cid] = size
                pool.bytes_in_use += chunk
                counts[1] = live
                handles[pointer] = (address, index, cid, size, rounded)
                chunks = device.chunks + chunk
                device.chunks = chunks
                if chunks > device.peak_chunks:
                    device.peak_chunks = chunks
                in_use = allocator.in_use + rounded
                allocator.in_use = in_use
                if in_use > allocator.peak_in_use:
                    allocator.peak_in_use = in_use
                in_use = device.in_use + rounded
                device.in_use = in_use
                solo = device.solo
                if in_use > device.peak_in_use:
                    device.peak_in_use, device.peak_event, device.pending = in_use, index, True
                    if solo is not None:
                        free = solo.pool_bytes - solo.bytes_in_use
                        device.fragmentation_at_peak = (
                            (free - (solo.table.free[-1] >> shift)) / free if free > 0 else 0.0
                        )
                    else:
                        device.fragmentation_at_peak = device.fragmentation()
                if (
                    i == n - 1 or not device.compared
                ):  # it took its pool's largest free chunk, or the state before was not sampled
                    if solo is not None:
                        free = solo.pool_bytes - solo.bytes_in_use
                        fragmentation = (free - (solo.table.free[-1] >> shift)) / free if free > 0 else 0.0
                    else:
                        fragmentation = device.fragmentation()
                    device.sampled = fragmentation
                    if device.worst_fragmentation is None or fragmentation > device.worst_fragmentation:
                        device.worst_fragmentation, device.worst_event = fragmentation, index
                        if fragmentation >= device.mapped + step:
                            device.fragmented, device.mapped = True, fragmentation
                    device.compared = may_skip
            else:  # the pool grows or fails; or a temporary in a timeline, or one that needs the pool to grow
                in_use, held = pool.bytes_in_use, pool.pool_bytes
                moves = compactions(pool)
                try:
                    address, cid, moved = allocate(pool, size, handles)
                except OutOfMemoryError as error:
                    if compactions(pool) != moves:  # a compacting pool moved its buffers: its chunk table is new
                        refs[lane] = _refs(allocator)
                    counts[0] -= 1
                    device.compared = False
                    if replay.oom is None:
                        replay.fail(error, allocator, index)
                    if stop_on_oom:
                        break
                    dropped.add((lane, pointer))
                    continue
                counts[1] = live
                handles[pointer] = (address, index, cid, size, rounded)
                if moved:
                    refs[lane] = _refs(allocator)
                allocated(allocator, in_use, held, rounded, index)
                if transient:  # sampled after its free instead, as when it is handled with its allocation
                    device.compared = False
                else:
                    sampled(device, device.fragmentation(), index, step)
                    device.compared = may_skip
        elif action == 1:  # a free
            if device.pending:  # its peak is the state right before this free
                snapshots[device.name] = replay.promise(device, device.peak_event, index)
                device.pending = False
            entry = handles.pop(pointer, None)
            if entry is None:
                if (lane, pointer) in dropped:
                    dropped.discard((lane, pointer))
                    continue
                raise InvalidFreeError(
                    f"trace event {index}: free of {pointer:#x}, which the trace never allocated on {device.name}"
                )
            # BFCPool.free, inline: merge with the next chunk, then the previous one, if free
            address, _, cid, size, rounded = entry
            chunk = size_of[cid]
            asked[cid] = 0
            pool.bytes_in_use -= chunk
            device.chunks -= chunk
            following = next_of[cid]
            if not asked[following]:  # free (id 0, no chunk, is never free)
                merged = size_of[following]
                del free_list[bisect_left(free_list, merged << shift | address_of[following] << id_shift | following)]
                chunk += merged
                size_of[cid] = chunk
                after = next_of[cid] = next_of[following]
                if after:
                    prev_of[after] = cid
                asked[following] = -1
                spare.append(following)
            previous = prev_of[cid]
            if not asked[previous]:
                merged = size_of[previous]
                address = address_of[previous]
                del free_list[bisect_left(free_list, merged << shift | address << id_shift | previous)]
                chunk += merged
                size_of[previous] = chunk
                after = next_of[previous] = next_of[cid]
                if after:
                    prev_of[after] = previous
                asked[cid] = -1
                spare.append(cid)
                cid = previous
            insort(free_list, chunk << shift | address << id_shift | cid)
            allocator.in_use -= rounded
            in_use = device.in_use - rounded
            device.in_use = in_use
            counts[1] -= size
            if in_use:
                solo = device.solo
                if solo is not None:
                    free = solo.pool_bytes - solo.bytes_in_use
                    fragmentation = (free - (solo.table.free[-1] >> shift)) / free
                else:
                    fragmentation = device.fragmentation()
                device.sampled = fragmentation
                if device.worst_fragmentation is None or fragmentation > device.worst_fragmentation:
                    device.worst_fragmentation, device.worst_event = fragmentation, index
                    if fragmentation >= device.mapped + step:
                        device.fragmented, device.mapped = True, fragmentation
            else:
                fragmentation = device.sampled = 0.0
                device.compared = False
        else:  # an action of no known kind changes nothing, but is a moment of its own
            if device.in_use:
                sampled(device, device.fragmentation(), index, step)
            else:
                fragmentation = device.sampled = 0.0
        if record:
            timeline_devices(device.code)
            timeline_in_use(device.in_use)
            timeline_reserved(device.held)
            timeline_fragmentation(device.sampled)
    for allocator in lanes:
        if allocator is not None and allocator.inline:
            sync(allocator.pool, allocator.handles)
            allocator.inline = False
    return index


def _refs(allocator: Any) -> tuple[Any, ...]:
    """What the loop reads of a lane at each of its events: its allocator, device, pool, buffers,
    counts, and the pool's chunk table (taken again after a compacting pool moved its buffers)."""
    pool = allocator.pool
    return (
        allocator,
        allocator.device,
        pool,
        allocator.handles,
        allocator.counts,
        *pool.table.columns(),
        pool.table.spare,
        pool.table.free,
        pool.max_internal_fragmentation,
    )
