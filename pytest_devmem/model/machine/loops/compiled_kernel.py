"""The single-lane BFC loop's common events, compiled by numba (imported only where numba is).

`run_events` is `one_bfc_lane.run_events` for the events it can decide alone (an allocation that a
free chunk can serve, the free of a buffer it holds, a recorded failure) over arrays instead of the
pool's lists: the same best fit, split, merge, counters and fragmentation samples, in the same
order. It stops, its state whole, before any other event (the pool must grow, move buffers or fail;
an unknown pointer or action) and where a map is owed (`EXIT_PROMISE`); `compiled_bfc` then does
that event in Python and runs it on.

The free chunks are three sorted columns (size, address, id) ordered by (size, address), XLA's bins
in one list as in `ChunkTable.free`; each buffer has a slot (its pointer's rank among the trace's
pointers).
"""

from __future__ import annotations

import numba
import numpy as np

EXIT_DONE, EXIT_PROMISE, EXIT_PYTHON, EXIT_FULL = 0, 1, 2, 3
"""Why `run_events` stopped: the events ran out, a map is owed before this event, Python must run
it, or a bin of free chunks is nearly full (the event is done: its arrays are made wider)."""

# the integer state, by position
(
    CHUNK_BYTES,
    POOL_BYTES,
    IN_USE,
    PEAK_IN_USE,
    PEAK_CHUNKS,
    PEAK_EVENT,
    PENDING,
    WORST_EVENT,
    FRAGMENTED,
    LIVE,
    PEAK_LIVE,
    COMPARED,
    ALLOCATIONS,
    FREE_CHUNKS,
    SPARE_IDS,
    TABLE_IDS,
    MAY_SKIP,
    MAX_WASTE,
    INTS,
) = range(19)
# the float state, by position
FRAGMENTATION, AT_PEAK, WORST, MAPPED, STEP, FLOATS = range(6)
CHUNK_BATCH = 64  # as bfc.CHUNK_BATCH: the table grows by this many ids, the lowest taken first
NUM_BINS = 21  # as bfc.NUM_BINS: a chunk of s bytes is in bin min(floor(log2(s / 256)), 20)


@numba.njit(cache=True, inline="always")
def _first_at_least(sizes: np.ndarray, count: int, size: int) -> int:  # type: ignore[type-arg]
    low, high = 0, count
    while low < high:
        middle = (low + high) >> 1
        if sizes[middle] < size:
            low = middle + 1
        else:
            high = middle
    return low


@numba.njit(cache=True, inline="always")
def _bin(size: int) -> int:
    b = -1
    units = size >> 8
    while units:
        units >>= 1
        b += 1
    return b if b < NUM_BINS - 1 else NUM_BINS - 1


@numba.njit(cache=True, inline="always")
def _in_bin(sizes: np.ndarray, addresses: np.ndarray, count: int, size: int, address: int) -> int:  # type: ignore[type-arg]
    """The position of (size, address) in one bin's sorted columns."""
    low, high = 0, count
    while low < high:
        middle = (low + high) >> 1
        if sizes[middle] < size or (sizes[middle] == size and addresses[middle] < address):
            low = middle + 1
        else:
            high = middle
    return low


@numba.njit(cache=True, inline="always")
def _bin_insert(
    sizes: np.ndarray,
    addresses: np.ndarray,
    ids: np.ndarray,
    counts: np.ndarray,
    size: int,
    address: int,
    cid: int,  # type: ignore[type-arg]
) -> None:
    b = _bin(size)
    n = counts[b]
    row_sizes, row_addresses, row_ids = sizes[b], addresses[b], ids[b]
    p = _in_bin(row_sizes, row_addresses, n, size, address)
    for j in range(n, p, -1):
        row_sizes[j] = row_sizes[j - 1]
        row_addresses[j] = row_addresses[j - 1]
        row_ids[j] = row_ids[j - 1]
    row_sizes[p] = size
    row_addresses[p] = address
    row_ids[p] = cid
    counts[b] = n + 1


@numba.njit(cache=True, inline="always")
def _bin_remove_at(
    sizes: np.ndarray, addresses: np.ndarray, ids: np.ndarray, counts: np.ndarray, b: int, p: int
) -> None:  # type: ignore[type-arg]
    n = counts[b]
    row_sizes, row_addresses, row_ids = sizes[b], addresses[b], ids[b]
    for j in range(p, n - 1):
        row_sizes[j] = row_sizes[j + 1]
        row_addresses[j] = row_addresses[j + 1]
        row_ids[j] = row_ids[j + 1]
    counts[b] = n - 1


@numba.njit(cache=True, inline="always")
def _bin_remove(
    sizes: np.ndarray,
    addresses: np.ndarray,
    ids: np.ndarray,
    counts: np.ndarray,
    size: int,
    address: int,  # type: ignore[type-arg]
) -> None:
    b = _bin(size)
    _bin_remove_at(sizes, addresses, ids, counts, b, _in_bin(sizes[b], addresses[b], counts[b], size, address))


@numba.njit(cache=True, inline="always")
def _top_bin(counts: np.ndarray) -> int:  # type: ignore[type-arg]
    """The highest bin holding a free chunk (its last is the largest free chunk); -1 for none."""
    b = NUM_BINS - 1
    while b >= 0 and counts[b] == 0:
        b -= 1
    return b


@numba.njit(cache=True)
def run_events(  # noqa: PLR0912, PLR0913, PLR0915
    actions: np.ndarray,  # type: ignore[type-arg]
    slots: np.ndarray,  # type: ignore[type-arg]
    requested: np.ndarray,  # type: ignore[type-arg]
    begin: int,
    size_of: np.ndarray,  # type: ignore[type-arg]
    address_of: np.ndarray,  # type: ignore[type-arg]
    prev_of: np.ndarray,  # type: ignore[type-arg]
    next_of: np.ndarray,  # type: ignore[type-arg]
    asked: np.ndarray,  # type: ignore[type-arg]
    spare: np.ndarray,  # type: ignore[type-arg]
    free_sizes: np.ndarray,  # type: ignore[type-arg]
    free_addresses: np.ndarray,  # type: ignore[type-arg]
    free_ids: np.ndarray,  # type: ignore[type-arg]
    bin_counts: np.ndarray,  # type: ignore[type-arg]
    held: np.ndarray,  # type: ignore[type-arg]
    held_address: np.ndarray,  # type: ignore[type-arg]
    held_event: np.ndarray,  # type: ignore[type-arg]
    held_chunk: np.ndarray,  # type: ignore[type-arg]
    held_size: np.ndarray,  # type: ignore[type-arg]
    ints: np.ndarray,  # type: ignore[type-arg]
    floats: np.ndarray,  # type: ignore[type-arg]
) -> tuple[int, int]:
    """Run events from `begin`; (the event it stopped at, why)."""
    end = len(actions)
    chunk_bytes, pool_bytes, in_use, peak_in_use = ints[CHUNK_BYTES], ints[POOL_BYTES], ints[IN_USE], ints[PEAK_IN_USE]
    peak_chunks, peak_event, pending, worst_event = (
        ints[PEAK_CHUNKS],
        ints[PEAK_EVENT],
        ints[PENDING],
        ints[WORST_EVENT],
    )
    fragmented, live, peak_live, compared = ints[FRAGMENTED], ints[LIVE], ints[PEAK_LIVE], ints[COMPARED]
    allocations, nfree, nspare, table = ints[ALLOCATIONS], ints[FREE_CHUNKS], ints[SPARE_IDS], ints[TABLE_IDS]
    may_skip, max_waste = ints[MAY_SKIP], ints[MAX_WASTE]
    fragmentation, at_peak, worst, mapped, step = (
        floats[FRAGMENTATION],
        floats[AT_PEAK],
        floats[WORST],
        floats[MAPPED],
        floats[STEP],
    )
    capacity = len(size_of)
    width = free_sizes.shape[1]
    full = False
    index = begin
    why = EXIT_DONE
    while index < end:
        if full:
            why = EXIT_FULL
            break
        action = actions[index]
        if action == 0:  # an allocation
            if fragmented:
                why = EXIT_PROMISE
                break
            size = requested[index]
            rounded = (size + 255) & -256
            slot = slots[index]
            # best fit: the first chunk at least `rounded` in its bin, else the first of a bin above
            b = _bin(rounded)
            i = _first_at_least(free_sizes[b], bin_counts[b], rounded)
            while i == bin_counts[b]:
                b += 1
                if b == NUM_BINS:
                    break
                i = 0
            if b == NUM_BINS:  # the pool grows or fails
                why = EXIT_PYTHON
                break
            chunk = free_sizes[b, i]
            split = chunk >= 2 * rounded or chunk - rounded >= max_waste
            if (
                index + 1 < end
                and slots[index + 1] == slot
                and actions[index + 1] == 1
                and in_use + rounded <= peak_in_use
            ):  # a temporary freed by the next event that sets no new peak: the pool is left as it was
                taken = chunk_bytes + (rounded if split else chunk)
                if taken > peak_chunks:
                    peak_chunks = taken
                if live + size > peak_live:
                    peak_live = live + size
                allocations += 1
                index += 2
                continue
            if split and nspare == 0 and table + CHUNK_BATCH > capacity:
                why = EXIT_PYTHON  # Python grows the table
                break
            live += size
            if live > peak_live:
                peak_live = live
            allocations += 1
            took_largest = b == _top_bin(bin_counts) and i == bin_counts[b] - 1
            cid = free_ids[b, i]
            address = free_addresses[b, i]
            _bin_remove_at(free_sizes, free_addresses, free_ids, bin_counts, b, i)
            nfree -= 1
            if split:
                rest_size, rest_address, after = chunk - rounded, address + rounded, next_of[cid]
                if nspare == 0:
                    for j in range(CHUNK_BATCH):
                        spare[j] = table + CHUNK_BATCH - 1 - j
                        size_of[table + j] = 0
                        address_of[table + j] = 0
                        prev_of[table + j] = 0
                        next_of[table + j] = 0
                        asked[table + j] = -1
                    nspare = CHUNK_BATCH
                    table += CHUNK_BATCH
                nspare -= 1
                rest = spare[nspare]
                size_of[rest] = rest_size
                address_of[rest] = rest_address
                prev_of[rest] = cid
                next_of[rest] = after
                asked[rest] = 0
                size_of[cid] = rounded
                next_of[cid] = rest
                if after:
                    prev_of[after] = rest
                _bin_insert(free_sizes, free_addresses, free_ids, bin_counts, rest_size, rest_address, rest)
                nfree += 1
                if bin_counts[_bin(rest_size)] >= width - 1:
                    full = True
                chunk = rounded
            asked[cid] = size
            chunk_bytes += chunk
            held[slot] = 1
            held_address[slot] = address
            held_event[slot] = index
            held_chunk[slot] = cid
            held_size[slot] = size
            if chunk_bytes > peak_chunks:
                peak_chunks = chunk_bytes
            in_use += rounded
            if in_use > peak_in_use:
                peak_in_use, peak_event, pending = in_use, index, 1
                free = pool_bytes - chunk_bytes
                top = _top_bin(bin_counts)
                at_peak = (free - free_sizes[top, bin_counts[top] - 1]) / free if nfree else 0.0
            if took_largest or not compared:
                free = pool_bytes - chunk_bytes
                top = _top_bin(bin_counts)
                fragmentation = (free - free_sizes[top, bin_counts[top] - 1]) / free if nfree else 0.0
                if fragmentation > worst:
                    worst, worst_event = fragmentation, index
                    if fragmentation >= mapped + step:
                        fragmented, mapped = 1, fragmentation
                compared = may_skip
        elif action == 1:  # a free
            if fragmented or pending:
                why = EXIT_PROMISE
                break
            slot = slots[index]
            if not held[slot]:  # dropped after a failure, or never allocated
                why = EXIT_PYTHON
                break
            held[slot] = 0
            address, cid, size = held_address[slot], held_chunk[slot], held_size[slot]
            rounded = (size + 255) & -256
            chunk = size_of[cid]
            asked[cid] = 0
            chunk_bytes -= chunk
            following = next_of[cid]
            if asked[following] == 0:
                merged = size_of[following]
                _bin_remove(free_sizes, free_addresses, free_ids, bin_counts, merged, address_of[following])
                nfree -= 1
                chunk += merged
                size_of[cid] = chunk
                after = next_of[following]
                next_of[cid] = after
                if after:
                    prev_of[after] = cid
                asked[following] = -1
                spare[nspare] = following
                nspare += 1
            previous = prev_of[cid]
            if asked[previous] == 0:
                merged = size_of[previous]
                address = address_of[previous]
                _bin_remove(free_sizes, free_addresses, free_ids, bin_counts, merged, address)
                nfree -= 1
                chunk += merged
                size_of[previous] = chunk
                after = next_of[cid]
                next_of[previous] = after
                if after:
                    prev_of[after] = previous
                asked[cid] = -1
                spare[nspare] = cid
                nspare += 1
                cid = previous
            _bin_insert(free_sizes, free_addresses, free_ids, bin_counts, chunk, address, cid)
            nfree += 1
            if bin_counts[_bin(chunk)] >= width - 1:
                full = True
            in_use -= rounded
            live -= size
            if in_use:
                free = pool_bytes - chunk_bytes
                top = _top_bin(bin_counts)
                fragmentation = (free - free_sizes[top, bin_counts[top] - 1]) / free
                if fragmentation > worst:
                    worst, worst_event = fragmentation, index
                    if fragmentation >= mapped + step:
                        fragmented, mapped = 1, fragmentation
            else:
                fragmentation = 0.0
                compared = 0
        elif action != 2:  # an action of no known kind: Python
            why = EXIT_PYTHON
            break
        index += 1
    ints[CHUNK_BYTES], ints[IN_USE], ints[PEAK_IN_USE] = chunk_bytes, in_use, peak_in_use
    ints[PEAK_CHUNKS], ints[PEAK_EVENT], ints[PENDING], ints[WORST_EVENT] = (
        peak_chunks,
        peak_event,
        pending,
        worst_event,
    )
    ints[FRAGMENTED], ints[LIVE], ints[PEAK_LIVE], ints[COMPARED] = fragmented, live, peak_live, compared
    ints[ALLOCATIONS], ints[FREE_CHUNKS], ints[SPARE_IDS], ints[TABLE_IDS] = allocations, nfree, nspare, table
    floats[FRAGMENTATION], floats[AT_PEAK], floats[WORST], floats[MAPPED] = fragmentation, at_peak, worst, mapped
    return index, why


# -- several lanes ---------------------------------------------------------------------------
# each lane's pool, by position in a row of `pools`
(
    P_STARTED,
    P_BASE,
    P_CAPACITY,
    P_TABLE_IDS,
    P_SPARE_IDS,
    P_FREE_CHUNKS,
    P_IN_USE,
    P_BYTES,
    P_MAX_WASTE,
    P_DEVICE,
    P_ALLOCATOR_IN_USE,
    P_ALLOCATOR_PEAK,
    P_COUNTS,
    P_FIELDS,
) = range(14)
# each device's counters, by position in a row of `devices` (ints) and `device_floats`
(
    D_IN_USE,
    D_PEAK_IN_USE,
    D_CHUNKS,
    D_PEAK_CHUNKS,
    D_PEAK_EVENT,
    D_PENDING,
    D_WORST_EVENT,
    D_FRAGMENTED,
    D_COMPARED,
    D_SOLO,
    D_POOLS,
    D_FIELDS,
) = range(12)
DF_SAMPLED, DF_AT_PEAK, DF_WORST, DF_MAPPED, DF_FIELDS = range(5)


@numba.njit(cache=True)
def slots_of_pairs(pointers: np.ndarray, lanes: np.ndarray) -> tuple[np.ndarray, ...]:  # type: ignore[type-arg]
    """A slot for each (lane, pointer) pair of the trace, numbered in order of first use, through an
    open-addressing table (a sort, as numpy's unique, costs several times more): (slot of each
    event, lane and pointer of each slot, and the table, for `slots_for_pairs`)."""
    size = 1
    while size < 2 * len(pointers) + 2:
        size *= 2
    mask = size - 1
    keys = np.zeros(size, dtype=np.uint64)
    key_lanes = np.zeros(size, dtype=np.int64)
    values = np.full(size, -1, dtype=np.int64)
    slots = np.empty(len(pointers), dtype=np.int64)
    first_pointers = np.empty(len(pointers), dtype=np.uint64)
    first_lanes = np.empty(len(pointers), dtype=np.int64)
    count = 0
    for index in range(len(pointers)):
        pointer, lane = pointers[index], lanes[index]
        h = ((pointer + np.uint64(lane) * np.uint64(0xBF58476D1CE4E5B9)) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(
            40
        )
        position = np.int64(h) & mask
        while values[position] >= 0 and (keys[position] != pointer or key_lanes[position] != lane):
            position = (position + 1) & mask
        if values[position] < 0:
            keys[position] = pointer
            key_lanes[position] = lane
            values[position] = count
            first_pointers[count] = pointer
            first_lanes[count] = lane
            count += 1
        slots[index] = values[position]
    return slots, first_lanes[:count], first_pointers[:count], keys, key_lanes, values


@numba.njit(cache=True)
def slots_for_pairs(
    pointers: np.ndarray,  # type: ignore[type-arg]
    lanes: np.ndarray,  # type: ignore[type-arg]
    keys: np.ndarray,  # type: ignore[type-arg]
    key_lanes: np.ndarray,  # type: ignore[type-arg]
    values: np.ndarray,  # type: ignore[type-arg]
) -> np.ndarray:  # type: ignore[type-arg]
    """The slots of (lane, pointer) pairs of the trace, looked up in the table `slots_of_pairs` made."""
    mask = len(keys) - 1
    slots = np.empty(len(pointers), dtype=np.int64)
    for index in range(len(pointers)):
        pointer, lane = pointers[index], lanes[index]
        h = ((pointer + np.uint64(lane) * np.uint64(0xBF58476D1CE4E5B9)) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(
            40
        )
        position = np.int64(h) & mask
        while keys[position] != pointer or key_lanes[position] != lane:
            position = (position + 1) & mask
        slots[index] = values[position]
    return slots


@numba.njit(cache=True)
def _pool_fragmentation(pools: np.ndarray, free_sizes: np.ndarray, p: int, guarded: bool) -> float:  # type: ignore[type-arg]
    """(free - largest free chunk) / free of one pool (0.0 where nothing is free and `guarded`)."""
    free = pools[p, P_BYTES] - pools[p, P_IN_USE]
    if guarded and free <= 0:
        return 0.0
    n = pools[p, P_FREE_CHUNKS]
    largest = free_sizes[pools[p, P_BASE] + n - 1] if n else 0
    return (free - largest) / free


@numba.njit(cache=True)
def _device_fragmentation(
    devices: np.ndarray,  # type: ignore[type-arg]
    device_pools: np.ndarray,  # type: ignore[type-arg]
    pools: np.ndarray,  # type: ignore[type-arg]
    free_sizes: np.ndarray,  # type: ignore[type-arg]
    d: int,
) -> float:
    """The device's fragmentation over its pools (`DeviceState.fragmentation`)."""
    free = stranded = 0
    for k in range(devices[d, D_POOLS]):
        p = device_pools[d, k]
        pool_free = pools[p, P_BYTES] - pools[p, P_IN_USE]
        n = pools[p, P_FREE_CHUNKS]
        free += pool_free
        stranded += pool_free - (free_sizes[pools[p, P_BASE] + n - 1] if n else 0)
    return stranded / free if free > 0 else 0.0


@numba.njit(cache=True)
def run_lanes(  # noqa: PLR0912, PLR0913, PLR0915
    actions: np.ndarray,  # type: ignore[type-arg]
    lanes: np.ndarray,  # type: ignore[type-arg]
    pointers: np.ndarray,  # type: ignore[type-arg]
    slots: np.ndarray,  # type: ignore[type-arg]
    requested: np.ndarray,  # type: ignore[type-arg]
    begin: int,
    size_of: np.ndarray,  # type: ignore[type-arg]
    address_of: np.ndarray,  # type: ignore[type-arg]
    prev_of: np.ndarray,  # type: ignore[type-arg]
    next_of: np.ndarray,  # type: ignore[type-arg]
    asked: np.ndarray,  # type: ignore[type-arg]
    spare: np.ndarray,  # type: ignore[type-arg]
    free_sizes: np.ndarray,  # type: ignore[type-arg]
    free_addresses: np.ndarray,  # type: ignore[type-arg]
    free_ids: np.ndarray,  # type: ignore[type-arg]
    held: np.ndarray,  # type: ignore[type-arg]
    held_address: np.ndarray,  # type: ignore[type-arg]
    held_event: np.ndarray,  # type: ignore[type-arg]
    held_chunk: np.ndarray,  # type: ignore[type-arg]
    held_size: np.ndarray,  # type: ignore[type-arg]
    pools: np.ndarray,  # type: ignore[type-arg]
    devices: np.ndarray,  # type: ignore[type-arg]
    device_floats: np.ndarray,  # type: ignore[type-arg]
    device_pools: np.ndarray,  # type: ignore[type-arg]
    counts: np.ndarray,  # type: ignore[type-arg]
    step: float,
) -> tuple[int, int]:
    """`bfc_lanes.run_events` for the events it can decide alone, as `run_events` for one lane: each
    lane's pool its own slice of the chunk and free columns (from its base); (event stopped at, why)."""
    end = len(actions)
    index = begin
    why = EXIT_DONE
    while index < end:
        action = actions[index]
        if action == 2:
            index += 1
            continue
        p = lanes[index]
        if not pools[p, P_STARTED] or (action != 0 and action != 1):
            why = EXIT_PYTHON
            break
        d = pools[p, P_DEVICE]
        if devices[d, D_FRAGMENTED]:
            why = EXIT_PROMISE
            break
        base = pools[p, P_BASE]
        nfree = pools[p, P_FREE_CHUNKS]
        solo = devices[d, D_SOLO]
        if action == 0:
            size = requested[index]
            rounded = (size + 255) & -256
            low, high = 0, nfree
            while low < high:
                middle = (low + high) >> 1
                if free_sizes[base + middle] < rounded:
                    low = middle + 1
                else:
                    high = middle
            i = low
            if i == nfree:
                why = EXIT_PYTHON
                break
            chunk = free_sizes[base + i]
            split = chunk >= 2 * rounded or chunk - rounded >= pools[p, P_MAX_WASTE]
            c = pools[p, P_COUNTS]
            if (
                index + 1 < end
                and pointers[index + 1] == pointers[index]
                and actions[index + 1] == 1
                and devices[d, D_IN_USE] + rounded <= devices[d, D_PEAK_IN_USE]
            ):
                if lanes[index + 1] != p:  # freed on another lane: Python notes the skipped free
                    why = EXIT_PYTHON
                    break
                counts[c, 0] += 1
                if counts[c, 1] + size > counts[c, 2]:
                    counts[c, 2] = counts[c, 1] + size
                taken = devices[d, D_CHUNKS] + (rounded if split else chunk)
                if taken > devices[d, D_PEAK_CHUNKS]:
                    devices[d, D_PEAK_CHUNKS] = taken
                if pools[p, P_ALLOCATOR_IN_USE] + rounded > pools[p, P_ALLOCATOR_PEAK]:
                    pools[p, P_ALLOCATOR_PEAK] = pools[p, P_ALLOCATOR_IN_USE] + rounded
                index += 2
                continue
            nspare, table = pools[p, P_SPARE_IDS], pools[p, P_TABLE_IDS]
            if split and nspare == 0 and table + CHUNK_BATCH > pools[p, P_CAPACITY]:
                why = EXIT_PYTHON
                break
            counts[c, 0] += 1
            live = counts[c, 1] + size
            if live > counts[c, 2]:
                counts[c, 2] = live
            counts[c, 1] = live
            n = nfree
            cid = free_ids[base + i]
            address = free_addresses[base + i]
            for j in range(base + i, base + nfree - 1):
                free_sizes[j] = free_sizes[j + 1]
                free_addresses[j] = free_addresses[j + 1]
                free_ids[j] = free_ids[j + 1]
            nfree -= 1
            if split:
                rest_size, rest_address, after = chunk - rounded, address + rounded, next_of[base + cid]
                if nspare == 0:
                    for j in range(CHUNK_BATCH):
                        spare[base + j] = table + CHUNK_BATCH - 1 - j
                        size_of[base + table + j] = 0
                        address_of[base + table + j] = 0
                        prev_of[base + table + j] = 0
                        next_of[base + table + j] = 0
                        asked[base + table + j] = -1
                    nspare = CHUNK_BATCH
                    table += CHUNK_BATCH
                    pools[p, P_TABLE_IDS] = table
                nspare -= 1
                pools[p, P_SPARE_IDS] = nspare
                rest = spare[base + nspare]
                size_of[base + rest] = rest_size
                address_of[base + rest] = rest_address
                prev_of[base + rest] = cid
                next_of[base + rest] = after
                asked[base + rest] = 0
                size_of[base + cid] = rounded
                next_of[base + cid] = rest
                if after:
                    prev_of[base + after] = rest
                low, high = 0, nfree
                while low < high:
                    middle = (low + high) >> 1
                    if free_sizes[base + middle] < rest_size or (
                        free_sizes[base + middle] == rest_size and free_addresses[base + middle] < rest_address
                    ):
                        low = middle + 1
                    else:
                        high = middle
                for j in range(base + nfree, base + low, -1):
                    free_sizes[j] = free_sizes[j - 1]
                    free_addresses[j] = free_addresses[j - 1]
                    free_ids[j] = free_ids[j - 1]
                free_sizes[base + low] = rest_size
                free_addresses[base + low] = rest_address
                free_ids[base + low] = rest
                nfree += 1
                chunk = rounded
            pools[p, P_FREE_CHUNKS] = nfree
            asked[base + cid] = size
            pools[p, P_IN_USE] += chunk
            slot = slots[index]
            held[slot] = 1
            held_address[slot] = address
            held_event[slot] = index
            held_chunk[slot] = cid
            held_size[slot] = size
            chunks = devices[d, D_CHUNKS] + chunk
            devices[d, D_CHUNKS] = chunks
            if chunks > devices[d, D_PEAK_CHUNKS]:
                devices[d, D_PEAK_CHUNKS] = chunks
            in_use = pools[p, P_ALLOCATOR_IN_USE] + rounded
            pools[p, P_ALLOCATOR_IN_USE] = in_use
            if in_use > pools[p, P_ALLOCATOR_PEAK]:
                pools[p, P_ALLOCATOR_PEAK] = in_use
            in_use = devices[d, D_IN_USE] + rounded
            devices[d, D_IN_USE] = in_use
            if in_use > devices[d, D_PEAK_IN_USE]:
                devices[d, D_PEAK_IN_USE], devices[d, D_PEAK_EVENT], devices[d, D_PENDING] = in_use, index, 1
                if solo >= 0:
                    device_floats[d, DF_AT_PEAK] = _pool_fragmentation(pools, free_sizes, solo, True)
                else:
                    device_floats[d, DF_AT_PEAK] = _device_fragmentation(devices, device_pools, pools, free_sizes, d)
            if i == n - 1 or not devices[d, D_COMPARED]:
                if solo >= 0:
                    fragmentation = _pool_fragmentation(pools, free_sizes, solo, True)
                else:
                    fragmentation = _device_fragmentation(devices, device_pools, pools, free_sizes, d)
                device_floats[d, DF_SAMPLED] = fragmentation
                if fragmentation > device_floats[d, DF_WORST]:
                    device_floats[d, DF_WORST], devices[d, D_WORST_EVENT] = fragmentation, index
                    if fragmentation >= device_floats[d, DF_MAPPED] + step:
                        devices[d, D_FRAGMENTED], device_floats[d, DF_MAPPED] = 1, fragmentation
                devices[d, D_COMPARED] = 1
        else:  # a free
            if devices[d, D_PENDING]:
                why = EXIT_PROMISE
                break
            slot = slots[index]
            if not held[slot]:
                why = EXIT_PYTHON
                break
            held[slot] = 0
            address, cid, size = held_address[slot], held_chunk[slot], held_size[slot]
            rounded = (size + 255) & -256
            nspare = pools[p, P_SPARE_IDS]
            chunk = size_of[base + cid]
            asked[base + cid] = 0
            pools[p, P_IN_USE] -= chunk
            devices[d, D_CHUNKS] -= chunk
            following = next_of[base + cid]
            if asked[base + following] == 0:
                merged = size_of[base + following]
                merged_address = address_of[base + following]
                low, high = 0, nfree
                while low < high:
                    middle = (low + high) >> 1
                    if free_sizes[base + middle] < merged or (
                        free_sizes[base + middle] == merged and free_addresses[base + middle] < merged_address
                    ):
                        low = middle + 1
                    else:
                        high = middle
                for j in range(base + low, base + nfree - 1):
                    free_sizes[j] = free_sizes[j + 1]
                    free_addresses[j] = free_addresses[j + 1]
                    free_ids[j] = free_ids[j + 1]
                nfree -= 1
                chunk += merged
                size_of[base + cid] = chunk
                after = next_of[base + following]
                next_of[base + cid] = after
                if after:
                    prev_of[base + after] = cid
                asked[base + following] = -1
                spare[base + nspare] = following
                nspare += 1
            previous = prev_of[base + cid]
            if asked[base + previous] == 0:
                merged = size_of[base + previous]
                address = address_of[base + previous]
                low, high = 0, nfree
                while low < high:
                    middle = (low + high) >> 1
                    if free_sizes[base + middle] < merged or (
                        free_sizes[base + middle] == merged and free_addresses[base + middle] < address
                    ):
                        low = middle + 1
                    else:
                        high = middle
                for j in range(base + low, base + nfree - 1):
                    free_sizes[j] = free_sizes[j + 1]
                    free_addresses[j] = free_addresses[j + 1]
                    free_ids[j] = free_ids[j + 1]
                nfree -= 1
                chunk += merged
                size_of[base + previous] = chunk
                after = next_of[base + cid]
                next_of[base + previous] = after
                if after:
                    prev_of[base + after] = previous
                asked[base + cid] = -1
                spare[base + nspare] = cid
                nspare += 1
                cid = previous
            low, high = 0, nfree
            while low < high:
                middle = (low + high) >> 1
                if free_sizes[base + middle] < chunk or (
                    free_sizes[base + middle] == chunk and free_addresses[base + middle] < address
                ):
                    low = middle + 1
                else:
                    high = middle
            for j in range(base + nfree, base + low, -1):
                free_sizes[j] = free_sizes[j - 1]
                free_addresses[j] = free_addresses[j - 1]
                free_ids[j] = free_ids[j - 1]
            free_sizes[base + low] = chunk
            free_addresses[base + low] = address
            free_ids[base + low] = cid
            nfree += 1
            pools[p, P_FREE_CHUNKS] = nfree
            pools[p, P_SPARE_IDS] = nspare
            pools[p, P_ALLOCATOR_IN_USE] -= rounded
            in_use = devices[d, D_IN_USE] - rounded
            devices[d, D_IN_USE] = in_use
            counts[pools[p, P_COUNTS], 1] -= size
            if in_use:
                if solo >= 0:
                    fragmentation = _pool_fragmentation(pools, free_sizes, solo, False)
                else:
                    fragmentation = _device_fragmentation(devices, device_pools, pools, free_sizes, d)
                device_floats[d, DF_SAMPLED] = fragmentation
                if fragmentation > device_floats[d, DF_WORST]:
                    device_floats[d, DF_WORST], devices[d, D_WORST_EVENT] = fragmentation, index
                    if fragmentation >= device_floats[d, DF_MAPPED] + step:
                        devices[d, D_FRAGMENTED], device_floats[d, DF_MAPPED] = 1, fragmentation
            else:
                device_floats[d, DF_SAMPLED] = 0.0
                devices[d, D_COMPARED] = 0
        index += 1
    return index, why
