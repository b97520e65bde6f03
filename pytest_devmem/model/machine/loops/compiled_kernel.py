"""XLA's BFC rules compiled by numba: the machine's common events over arrays.

`run_lanes` is `any_lanes.replay_lanes` for the events it can decide alone (an allocation that a
free chunk of a BFC pool can serve, the free of a buffer it holds, a recorded failure): the pool's
best fit, split and merge (`BFCPool.alloc` and `free`, model/pool/bfc.py) over arrays instead of the
pool's chunk table, and the same counters and fragmentation samples, in the same order. It stops,
its state whole, before any other event (a pool must start, grow, move buffers or fail; an unknown
pointer or action; a temporary freed on another lane) and where a map is owed (`EXIT_PROMISE`);
`compiled_bfc` then hands that event to the event loop and runs it on.

Each lane's pool is a slice of the chunk table's columns (from its base). Its free chunks are XLA's
bins, each a row of three columns (size, address, id) in (size, address) order, as in
`ChunkTable.free`: row `lane * NUM_BINS + bin`. Each buffer has a slot (its (lane, pointer) pair's
rank among the trace's pairs, `compiled_slots`).
"""

from __future__ import annotations

import numba
import numpy as np

EXIT_DONE, EXIT_PROMISE, EXIT_PYTHON, EXIT_FULL = 0, 1, 2, 3
"""Why `run_lanes` stopped: the events ran out, a map is owed before this event, Python must run
it, or a bin of free chunks is nearly full (the event is done: its arrays are made wider)."""

CHUNK_BATCH = 64  # as chunk_table.CHUNK_BATCH: the table grows by this many ids, the lowest taken first
NUM_BINS = 21  # as chunk_table.NUM_BINS: a chunk of s bytes is in bin min(floor(log2(s / 256)), 20)

# each lane's pool, by position in a row of `pools`
(
    P_STARTED,
    P_BASE,
    P_CAPACITY,
    P_TABLE_IDS,
    P_SPARE_IDS,
    P_IN_USE,
    P_BYTES,
    P_MAX_WASTE,
    P_DEVICE,
    P_ALLOCATOR_IN_USE,
    P_ALLOCATOR_PEAK,
    P_COUNTS,
    P_FIELDS,
) = range(13)
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

LARGEST_ADDRESS = 2**62
Array = np.ndarray


@numba.njit(cache=True, inline="always")
def _bin(size: int) -> int:
    """min(floor(log2(size / 256)), 20), by halving the bits searched (a chunk of a large region
    would take some 30 steps one bit at a time)."""
    units, b = size >> 8, 0
    for shift in (32, 16, 8, 4, 2, 1):
        if units >> shift:
            units >>= shift
            b += shift
    return b if b < NUM_BINS - 1 else NUM_BINS - 1


@numba.njit(cache=True, inline="always")
def _position(sizes: Array, addresses: Array, count: int, size: int, address: int) -> int:
    """Where (size, address) stands in one bin's sorted columns: the first at or after it."""
    low, high = 0, count
    while low < high:
        middle = (low + high) >> 1
        if sizes[middle] < size or (sizes[middle] == size and addresses[middle] < address):
            low = middle + 1
        else:
            high = middle
    return low


@numba.njit(cache=True, inline="always")
def _insert(free: tuple[Array, Array, Array], counts: Array, row0: int, size: int, address: int, cid: int) -> int:
    """Put a free chunk in its bin of the pool whose bins start at row `row0`; how many its bin holds now."""
    r = row0 + _bin(size)
    n = counts[r]
    sizes, addresses, ids = free[0][r], free[1][r], free[2][r]
    p = _position(sizes, addresses, n, size, address)
    for j in range(n, p, -1):
        sizes[j], addresses[j], ids[j] = sizes[j - 1], addresses[j - 1], ids[j - 1]
    sizes[p], addresses[p], ids[p] = size, address, cid
    counts[r] = n + 1
    return n + 1


@numba.njit(cache=True, inline="always")
def _remove_at(free: tuple[Array, Array, Array], counts: Array, r: int, p: int) -> None:
    n = counts[r]
    sizes, addresses, ids = free[0][r], free[1][r], free[2][r]
    for j in range(p, n - 1):
        sizes[j], addresses[j], ids[j] = sizes[j + 1], addresses[j + 1], ids[j + 1]
    counts[r] = n - 1


@numba.njit(cache=True, inline="always")
def _remove(free: tuple[Array, Array, Array], counts: Array, row0: int, size: int, address: int) -> None:
    r = row0 + _bin(size)
    _remove_at(free, counts, r, _position(free[0][r], free[1][r], counts[r], size, address))


@numba.njit(cache=True, inline="always")
def _merge(table: tuple[Array, ...], spare: Array, base: int, nspare: int, keep: int, gone: int) -> int:
    """Chunk `gone` merged into `keep`, the one before it (`ChunkTable.merge`); its id spare. The
    spare ids' count now."""
    size_of, _, prev_of, next_of, asked = table
    size_of[base + keep] += size_of[base + gone]
    after = next_of[base + gone]
    next_of[base + keep] = after
    if after:
        prev_of[base + after] = keep
    asked[base + gone] = -1
    spare[base + nspare] = gone
    return nspare + 1


@numba.njit(cache=True, inline="always")
def _top(counts: Array, row0: int) -> int:
    """The row of the pool's highest bin holding a free chunk (its last is the largest); row0 - 1 for none."""
    r = row0 + NUM_BINS - 1
    while r >= row0 and counts[r] == 0:
        r -= 1
    return r


@numba.njit(cache=True, inline="always")
def _largest(free_sizes: Array, counts: Array, row0: int) -> int:
    r = _top(counts, row0)
    return free_sizes[r, counts[r] - 1] if r >= row0 else 0


@numba.njit(cache=True, inline="always")
def _fragmentation(
    pools: Array, devices: Array, device_pools: Array, free_sizes: Array, counts: Array, d: int
) -> float:
    """The fragmentation of a device of several pools (`DeviceState.fragmentation`): the free bytes
    outside each pool's largest free chunk over all free bytes; 0.0 where nothing is free."""
    free = stranded = 0
    for k in range(devices[d, D_POOLS]):
        p = device_pools[d, k]
        pool_free = pools[p, P_BYTES] - pools[p, P_IN_USE]
        free += pool_free
        stranded += pool_free - _largest(free_sizes, counts, p * NUM_BINS)
    return stranded / free if free > 0 else 0.0


@numba.njit(cache=True, inline="always")
def _worst(
    fragmentation: float, index: int, worst: float, worst_event: int, fragmented: int, mapped: float, step: float
) -> tuple[float, int, int, float]:
    """The device's worst fragmentation after a sample at event `index`, and a map owed at each step up."""
    if fragmentation > worst:
        worst, worst_event = fragmentation, index
        if fragmentation >= mapped + step:
            fragmented, mapped = 1, fragmentation
    return worst, worst_event, fragmented, mapped


@numba.njit(cache=True, inline="always")
def _write_back(
    rows: tuple[Array, Array, Array, Array],
    at: tuple[int, int, int],
    lane: tuple[int, ...],
    device: tuple[int, ...],
    device_floats: tuple[float, ...],
    source: tuple[int, int, int],
) -> None:
    """The counters `run_lanes` keeps in locals written back to the rows of their pool, device and source."""
    pools, devices, floats, counts = rows
    p, d, c = at
    pools[p, P_IN_USE], pools[p, P_SPARE_IDS], pools[p, P_TABLE_IDS] = lane[0], lane[1], lane[2]
    pools[p, P_ALLOCATOR_IN_USE], pools[p, P_ALLOCATOR_PEAK] = lane[3], lane[4]
    devices[d, D_IN_USE], devices[d, D_PEAK_IN_USE], devices[d, D_CHUNKS] = device[0], device[1], device[2]
    devices[d, D_PEAK_CHUNKS], devices[d, D_PEAK_EVENT], devices[d, D_PENDING] = device[3], device[4], device[5]
    devices[d, D_WORST_EVENT], devices[d, D_FRAGMENTED], devices[d, D_COMPARED] = device[6], device[7], device[8]
    floats[d, DF_SAMPLED], floats[d, DF_AT_PEAK] = device_floats[0], device_floats[1]
    floats[d, DF_WORST], floats[d, DF_MAPPED] = device_floats[2], device_floats[3]
    counts[c, 0], counts[c, 1], counts[c, 2] = source[0], source[1], source[2]


@numba.njit(cache=True)
def run_lanes(  # noqa: PLR0912, PLR0913, PLR0915
    actions: Array,
    lanes: Array,
    pointers: Array,
    slots: Array,
    requested: Array,
    begin: int,
    size_of: Array,
    address_of: Array,
    prev_of: Array,
    next_of: Array,
    asked: Array,
    spare: Array,
    free_sizes: Array,
    free_addresses: Array,
    free_ids: Array,
    bin_counts: Array,
    held: Array,
    held_address: Array,
    held_event: Array,
    held_chunk: Array,
    held_size: Array,
    pools: Array,
    devices: Array,
    device_floats: Array,
    device_pools: Array,
    counts: Array,
    step: float,
) -> tuple[int, int]:
    """Run events from `begin`; (the event it stopped at, why). The counters of the lane whose
    event runs (its pool's, device's and source's) are in locals, written back to their rows when
    another lane's event comes and at the end."""
    free, table = (free_sizes, free_addresses, free_ids), (size_of, address_of, prev_of, next_of, asked)
    rows = (pools, devices, device_floats, counts)
    end = stop = len(actions)
    width = free_sizes.shape[1]
    full = False
    index = begin
    why = EXIT_DONE
    lane = -2  # the lane whose counters are in locals (-2: none; -1 stands for the end)
    d = c = base = row0 = max_waste = capacity = pool_bytes = 0
    solo = False
    pool_in_use = nspare = ids = allocator_in_use = allocator_peak = allocations = live = peak_live = 0
    in_use = peak_in_use = chunks = peak_chunks = peak_event = pending = worst_event = fragmented = compared = 0
    sampled = at_peak = worst = mapped = 0.0
    while True:  # each exit sets `why` and `stop` to its event: the next turn writes the counters back
        if full and index < stop:
            why, stop = EXIT_FULL, index
        if index < stop and actions[index] == 2:  # a recorded failure held nothing
            index += 1
            continue
        p = lanes[index] if index < stop else -1
        if p != lane:
            if lane >= 0:
                _write_back(
                    rows,
                    (lane, d, c),
                    (pool_in_use, nspare, ids, allocator_in_use, allocator_peak),
                    (in_use, peak_in_use, chunks, peak_chunks, peak_event, pending, worst_event, fragmented, compared),
                    (sampled, at_peak, worst, mapped),
                    (allocations, live, peak_live),
                )
                lane = -2
            if p < 0 or not pools[p, P_STARTED]:  # the end, or a lane Python starts
                if p >= 0:
                    why = EXIT_PYTHON
                break
            lane, d, c = p, pools[p, P_DEVICE], pools[p, P_COUNTS]
            base, row0, max_waste, capacity = (
                pools[p, P_BASE],
                p * NUM_BINS,
                pools[p, P_MAX_WASTE],
                pools[p, P_CAPACITY],
            )
            pool_bytes, solo = pools[p, P_BYTES], devices[d, D_SOLO] >= 0  # then this lane's pool is its only one
            pool_in_use, nspare, ids = pools[p, P_IN_USE], pools[p, P_SPARE_IDS], pools[p, P_TABLE_IDS]
            allocator_in_use, allocator_peak = pools[p, P_ALLOCATOR_IN_USE], pools[p, P_ALLOCATOR_PEAK]
            in_use, peak_in_use, chunks, peak_chunks = (
                devices[d, D_IN_USE],
                devices[d, D_PEAK_IN_USE],
                devices[d, D_CHUNKS],
                devices[d, D_PEAK_CHUNKS],
            )
            peak_event, pending, worst_event = (
                devices[d, D_PEAK_EVENT],
                devices[d, D_PENDING],
                devices[d, D_WORST_EVENT],
            )
            fragmented, compared = devices[d, D_FRAGMENTED], devices[d, D_COMPARED]
            sampled, at_peak = device_floats[d, DF_SAMPLED], device_floats[d, DF_AT_PEAK]
            worst, mapped = device_floats[d, DF_WORST], device_floats[d, DF_MAPPED]
            allocations, live, peak_live = counts[c, 0], counts[c, 1], counts[c, 2]
        action = actions[index]
        if action != 0 and action != 1:
            why, stop = EXIT_PYTHON, index
            continue
        if fragmented:
            why, stop = EXIT_PROMISE, index
            continue
        if action == 0:  # an allocation
            size = requested[index]
            rounded = (size + 255) & -256
            # best fit: the first chunk at least `rounded` in its bin, else the first of a bin above
            r = row0 + _bin(rounded)  # (rounded - 1, any address): sizes are multiples of 256, so no address is read
            i = _position(free_sizes[r], free_addresses[r], bin_counts[r], rounded - 1, LARGEST_ADDRESS)
            while i == bin_counts[r]:
                r += 1
                if r == row0 + NUM_BINS:
                    break
                i = 0
            if r == row0 + NUM_BINS:  # the pool grows or fails
                why, stop = EXIT_PYTHON, index
                continue
            chunk = free_sizes[r, i]
            split = chunk >= 2 * rounded or chunk - rounded >= max_waste
            if (
                index + 1 < end
                and pointers[index + 1] == pointers[index]
                and actions[index + 1] == 1
                and in_use + rounded <= peak_in_use
            ):  # a temporary freed by the next event that sets no new peak: the pool is left as it was
                if lanes[index + 1] != p:  # freed on another lane: Python notes the skipped free
                    why, stop = EXIT_PYTHON, index
                    continue
                allocations += 1
                if live + size > peak_live:
                    peak_live = live + size
                taken = chunks + (rounded if split else chunk)
                if taken > peak_chunks:
                    peak_chunks = taken
                if allocator_in_use + rounded > allocator_peak:
                    allocator_peak = allocator_in_use + rounded
                index += 2
                continue
            if split and nspare == 0 and ids + CHUNK_BATCH > capacity:
                why, stop = EXIT_PYTHON, index  # Python grows the table
                continue
            allocations += 1
            live += size
            if live > peak_live:
                peak_live = live
            took_largest = i == bin_counts[r] - 1 and r == _top(bin_counts, row0)
            cid, address = free_ids[r, i], free_addresses[r, i]
            _remove_at(free, bin_counts, r, i)
            if split:
                rest_size, rest_address, after = chunk - rounded, address + rounded, next_of[base + cid]
                if nspare == 0:
                    for j in range(CHUNK_BATCH):
                        spare[base + j] = ids + CHUNK_BATCH - 1 - j
                        k = base + ids + j
                        size_of[k], address_of[k], prev_of[k], next_of[k], asked[k] = 0, 0, 0, 0, -1
                    nspare = CHUNK_BATCH
                    ids += CHUNK_BATCH
                nspare -= 1
                rest = spare[base + nspare]
                k = base + rest
                size_of[k], address_of[k], prev_of[k], next_of[k], asked[k] = rest_size, rest_address, cid, after, 0
                size_of[base + cid] = rounded
                next_of[base + cid] = rest
                if after:
                    prev_of[base + after] = rest
                full = _insert(free, bin_counts, row0, rest_size, rest_address, rest) >= width - 1
                chunk = rounded
            asked[base + cid] = size
            pool_in_use += chunk
            slot = slots[index]
            held[slot] = 1
            held_address[slot], held_event[slot], held_chunk[slot], held_size[slot] = address, index, cid, size
            chunks += chunk
            if chunks > peak_chunks:
                peak_chunks = chunks
            allocator_in_use += rounded
            if allocator_in_use > allocator_peak:
                allocator_peak = allocator_in_use
            in_use += rounded
            sample = took_largest or not compared  # else the state before was sampled and this is lower
            if in_use > peak_in_use or sample:
                if solo:
                    free_bytes = pool_bytes - pool_in_use
                    fragmentation = (
                        (free_bytes - _largest(free_sizes, bin_counts, row0)) / free_bytes if free_bytes > 0 else 0.0
                    )
                else:
                    pools[p, P_IN_USE] = pool_in_use
                    fragmentation = _fragmentation(pools, devices, device_pools, free_sizes, bin_counts, d)
                if in_use > peak_in_use:
                    peak_in_use, peak_event, pending, at_peak = in_use, index, 1, fragmentation
                if sample:
                    sampled, compared = fragmentation, 1
                    worst, worst_event, fragmented, mapped = _worst(
                        fragmentation, index, worst, worst_event, fragmented, mapped, step
                    )
        else:  # a free
            if pending:
                why, stop = EXIT_PROMISE, index
                continue
            slot = slots[index]
            if not held[slot]:  # dropped after a failure, or never allocated
                why, stop = EXIT_PYTHON, index
                continue
            held[slot] = 0
            cid, size = held_chunk[slot], held_size[slot]
            rounded = (size + 255) & -256
            chunk = size_of[base + cid]
            asked[base + cid] = 0
            pool_in_use -= chunk
            chunks -= chunk
            following = next_of[base + cid]
            if asked[base + following] == 0:  # merge with the next chunk (id 0, no chunk, is never free)
                _remove(free, bin_counts, row0, size_of[base + following], address_of[base + following])
                nspare = _merge(table, spare, base, nspare, cid, following)
            previous = prev_of[base + cid]
            if asked[base + previous] == 0:  # then into the previous one
                _remove(free, bin_counts, row0, size_of[base + previous], address_of[base + previous])
                nspare = _merge(table, spare, base, nspare, previous, cid)
                cid = previous
            full = _insert(free, bin_counts, row0, size_of[base + cid], address_of[base + cid], cid) >= width - 1
            allocator_in_use -= rounded
            in_use -= rounded
            live -= size
            if in_use:
                if solo:
                    free_bytes = pool_bytes - pool_in_use
                    fragmentation = (free_bytes - _largest(free_sizes, bin_counts, row0)) / free_bytes
                else:
                    pools[p, P_IN_USE] = pool_in_use
                    fragmentation = _fragmentation(pools, devices, device_pools, free_sizes, bin_counts, d)
                sampled = fragmentation
                worst, worst_event, fragmented, mapped = _worst(
                    fragmentation, index, worst, worst_event, fragmented, mapped, step
                )
            else:
                sampled, compared = 0.0, 0
        index += 1
    return index, why
