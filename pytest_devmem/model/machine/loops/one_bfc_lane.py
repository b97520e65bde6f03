"""The loop for a single lane (one allocator on one device, the common case) on a BFC pool: its
counters live in local variables, XLA's BFC rules run inline."""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import chain, count, islice

from ....errors import InvalidFreeError, OutOfMemoryError
from ...pool import BFCPool
from ...pool.chunk_table import CHUNK_BITS, CHUNK_MASK, SIZE_SHIFT
from ..state import AllocatorState, Replay, sync
from .compiled_bfc import replay_compiled, suits
from .inline_pools import INLINE_POOLS, MovedThenFailed, allocate, compactions


def replay_one_bfc_lane(replay: Replay) -> int | None:
    """A trace of one lane whose allocator is a BFC pool (or a compacting one) and whose sizes are
    all positive; the index of the last event run, or None when the allocator is another kind (the
    general loop runs). MovedThenFailed where a compacting pool moved its buffers and still failed."""
    trace = replay.trace
    actions = trace.actions
    first = len(actions) - len(actions.lstrip(b"\x02"))  # recorded failures first: nothing started yet
    if first == len(actions):
        return len(actions) - 1
    allocator = replay.start(0)
    pool = allocator.pool
    if not isinstance(pool, BFCPool) or type(pool) not in INLINE_POOLS:
        return None
    if suits(replay):
        return replay_compiled(replay, lambda replay, first, stop: run_events(replay, allocator, first, stop), first)
    return run_events(replay, allocator, first, len(actions))


def run_events(replay: Replay, allocator: AllocatorState, first: int, stop: int) -> int:
    """Events `first` to `stop` (not included) of the lane of `allocator`, which its BFC pool has
    started; the index of the last event run. Counters are read from the device and allocator and
    written back at the end, so runs of consecutive ranges give the same result as one run."""
    trace = replay.trace
    actions, pointers, sizes = trace.actions, trace.pointers, trace.sizes
    device, pool = allocator.device, allocator.pool
    assert isinstance(pool, BFCPool)
    recorded, stop_on_oom, step = replay.recorded, replay.stop_on_oom, replay.step
    record = recorded is not None
    if recorded is not None:
        timeline_in_use, timeline_reserved, timeline_fragmentation = (
            recorded.in_use.append,
            recorded.reserved.append,
            recorded.fragmentation.append,
        )
        timeline_devices, code = recorded.devices.append, device.code
    handles = allocator.handles
    # the pool's chunk table (see chunk_table.py): sizes, addresses, neighbours, bytes asked (0 free, -1 no chunk) by chunk id
    size_of, address_of, prev_of, next_of, asked, spare, free_list = (
        *pool.table.columns(),
        pool.table.spare,
        pool.table.free,
    )
    max_waste, shift, id_shift, id_mask = pool.max_internal_fragmentation, SIZE_SHIFT, CHUNK_BITS, CHUNK_MASK
    allocator.inline = True  # its buffers are (address, event, chunk id, size, rounded); the pool's maps are left stale until the end (inline_pools.py)
    # counters, in locals while the loop runs: the pool's, the device's (which here are also its
    # allocator's: in use, peaks, held) and the source's
    chunk_bytes, pool_bytes = pool.bytes_in_use, pool.pool_bytes
    in_use, peak_in_use, peak_chunks, held, peak_held = (
        device.in_use,
        device.peak_in_use,
        device.peak_chunks,
        device.held,
        device.peak_held,
    )
    peak_event, pending, fragmentation, fragmentation_at_peak = (
        device.peak_event,
        device.pending,
        device.sampled,
        device.fragmentation_at_peak,
    )
    worst = -1.0 if device.worst_fragmentation is None else device.worst_fragmentation
    worst_event, fragmented, mapped = device.worst_event, device.fragmented, device.mapped
    counts = allocator.counts
    allocations, live, peak_live = counts
    failed = 0  # allocations that failed (the others are counted at the end)
    # An allocation that leaves the largest free chunk as it was lowers the fragmentation (the
    # bytes it takes were free outside that chunk): it can set no new worst, and its sample is
    # skipped, where the state before it was sampled. Never with a timeline, which shows every one.
    compared, may_skip = device.compared, not record
    dropped = allocator.dropped
    skip = False
    index = first - 1
    # each event with the pointer of the next one (-1, never a pointer, after the last)
    upcoming = chain(islice(pointers, first + 1, None), (-1,))
    events = (
        zip(
            count(first),
            islice(actions, first, stop),
            islice(pointers, first, stop),
            islice(sizes, first, stop),
            upcoming,
        )
        if first or stop < len(actions)
        else zip(count(), actions, pointers, sizes, upcoming)
    )
    for index, action, pointer, size, next_pointer in events:
        if not action:  # an allocation
            if fragmented:  # the state after its last event is its most fragmented so far
                pool.bytes_in_use = chunk_bytes
                replay.fragmented[device.name] = replay.promise(
                    device, worst_event if worst_event is not None else index - 1, index
                )
                fragmented = False
            rounded = (size + 255) & -256
            live += size
            if live > peak_live:
                peak_live = live
            if next_pointer == pointer and actions[index + 1] == 1 and in_use + rounded <= peak_in_use:
                # a temporary freed by the very next event that sets no new peak: a BFC pool is left
                # exactly as it was (split, then merged back), so only its peaks are kept
                if not record:
                    i = bisect_left(free_list, rounded << shift)
                    if i < len(free_list):
                        chunk = free_list[i] >> shift
                        taken = chunk_bytes + (
                            rounded if chunk >= 2 * rounded or chunk - rounded >= max_waste else chunk
                        )
                        if taken > peak_chunks:
                            peak_chunks = taken
                        live -= size
                        skip = True
                        continue
                transient, i = True, -1  # through the pool's methods (below); its sample is taken after its free
            else:
                # BFCPool.alloc, inline: the best fit is the first free chunk at or after (rounded, 0)
                i = bisect_left(free_list, rounded << shift)
                n = len(free_list)
                if i == n:
                    transient, i = False, -1  # no chunk is large enough
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
                chunk_bytes += chunk
                handles[pointer] = (address, index, cid, size, rounded)
                if chunk_bytes > peak_chunks:
                    peak_chunks = chunk_bytes
                in_use += rounded
                if in_use > peak_in_use:
                    peak_in_use, peak_event, pending = in_use, index, True
                    free = pool_bytes - chunk_bytes
                    fragmentation_at_peak = (free - (free_list[-1] >> shift)) / free if free_list else 0.0
                if i == n - 1 or not compared:  # it took the largest free chunk, or the state before was not sampled
                    free = pool_bytes - chunk_bytes
                    fragmentation = (free - (free_list[-1] >> shift)) / free if free_list else 0.0
                    if fragmentation > worst:
                        worst, worst_event = fragmentation, index
                        if fragmentation >= mapped + step:
                            fragmented, mapped = True, fragmentation
                    compared = may_skip
            else:  # the pool grows or fails; or a temporary in a timeline, or one that needs the pool to grow
                pool.bytes_in_use = chunk_bytes
                moves = compactions(pool)
                try:
                    address, cid, moved = allocate(pool, size, handles)
                except OutOfMemoryError as error:
                    if compactions(pool) != moves:  # its bytes in use are no longer the device's chunks
                        raise MovedThenFailed from None
                    pool_bytes = pool.pool_bytes  # it may have given regions back
                    live -= size
                    failed += 1
                    compared = False
                    if replay.oom is None:
                        device.in_use, device.peak_event, device.pending = in_use, peak_event, pending
                        replay.fail(error, allocator, index)
                        pending = device.pending
                    if stop_on_oom:
                        break
                    dropped.add(pointer)
                    continue
                chunk_bytes = pool.bytes_in_use
                if moved:  # a compacting pool moved its buffers: its chunk table is new
                    size_of, address_of, prev_of, next_of, asked, spare, free_list = (
                        *pool.table.columns(),
                        pool.table.spare,
                        pool.table.free,
                    )
                grew = pool.pool_bytes - pool_bytes
                if grew:  # what the device holds for it (not lowered where a failed allocation gave regions back)
                    pool_bytes += grew
                    held += grew
                    if not allocator.took:
                        allocator.took = pool_bytes
                    if pool_bytes > allocator.peak_held:
                        allocator.peak_held = pool_bytes
                    if held > peak_held:
                        peak_held = held
                handles[pointer] = (address, index, cid, size, rounded)
                if chunk_bytes > peak_chunks:
                    peak_chunks = chunk_bytes
                in_use += rounded
                if in_use > peak_in_use:
                    peak_in_use, peak_event, pending = in_use, index, True
                    free = pool_bytes - chunk_bytes
                    fragmentation_at_peak = (free - (free_list[-1] >> shift)) / free if free_list else 0.0
                if transient:  # sampled after its free instead, as when it is handled with its allocation
                    compared = False
                else:
                    free = pool_bytes - chunk_bytes
                    fragmentation = (free - (free_list[-1] >> shift)) / free if free_list else 0.0
                    if fragmentation > worst:
                        worst, worst_event = fragmentation, index
                        if fragmentation >= mapped + step:
                            fragmented, mapped = True, fragmentation
                    compared = may_skip
        elif action == 1:  # a free
            if skip:  # the free of a temporary handled with its allocation
                skip = False
                continue
            if fragmented or pending:
                pool.bytes_in_use = chunk_bytes
                if fragmented:
                    replay.fragmented[device.name] = replay.promise(
                        device, worst_event if worst_event is not None else index - 1, index
                    )
                    fragmented = False
                if pending:  # its peak is the state right before this free
                    replay.snapshots[device.name] = replay.promise(device, peak_event, index)
                    pending = False
            entry = handles.pop(pointer, None)
            if entry is None:
                if pointer in dropped:
                    dropped.discard(pointer)
                    continue
                raise InvalidFreeError(
                    f"trace event {index}: free of {pointer:#x}, which the trace never allocated on {device.name}"
                )
            # BFCPool.free, inline: merge with the next chunk, then the previous one, if free
            address, _, cid, size, rounded = entry
            chunk = size_of[cid]
            asked[cid] = 0
            chunk_bytes -= chunk
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
            in_use -= rounded
            live -= size
            if in_use:
                free = pool_bytes - chunk_bytes
                fragmentation = (free - (free_list[-1] >> shift)) / free
                if fragmentation > worst:
                    worst, worst_event = fragmentation, index
                    if fragmentation >= mapped + step:
                        fragmented, mapped = True, fragmentation
            else:
                fragmentation = 0.0
                compared = False
        elif action == 2:  # a recorded failure held nothing
            continue
        else:  # an action of no known kind changes nothing, but is a moment of its own
            if fragmented:
                pool.bytes_in_use = chunk_bytes
                replay.fragmented[device.name] = replay.promise(
                    device, worst_event if worst_event is not None else index - 1, index
                )
                fragmented = False
            if in_use:
                free = pool_bytes - chunk_bytes
                fragmentation = (free - (free_list[-1] >> shift)) / free if free_list else 0.0
                if fragmentation > worst:
                    worst, worst_event = fragmentation, index
                    if fragmentation >= mapped + step:
                        fragmented, mapped = True, fragmentation
            else:
                fragmentation = 0.0
        if record:
            timeline_devices(code)
            timeline_in_use(in_use)
            timeline_reserved(held)
            timeline_fragmentation(fragmentation)
    pool.bytes_in_use = chunk_bytes
    sync(pool, handles)
    allocator.inline = False
    device.in_use = allocator.in_use = in_use
    device.peak_in_use = allocator.peak_in_use = peak_in_use
    device.chunks, device.peak_chunks, device.held, device.peak_held = chunk_bytes, peak_chunks, held, peak_held
    device.peak_event, device.pending, device.sampled, device.fragmentation_at_peak = (
        peak_event,
        pending,
        fragmentation,
        fragmentation_at_peak,
    )
    device.worst_fragmentation = None if worst < 0 else worst
    device.worst_event, device.fragmented, device.mapped, device.compared = worst_event, fragmented, mapped, compared
    counts[:] = allocations + actions.count(0, first, index + 1) - failed, live, peak_live
    return index
