"""Looking inside a BFC pool: its memory map as text (XLA's DumpMemoryLog) and a check of its
invariants, which the tests run after every step of a random trace. Kept apart from the pool's own
allocation path: it reads the pool's chunk table (`ChunkTable`) and its counters, never the pool."""

from __future__ import annotations

from ...units import format_size
from .base import PoolCounters
from .chunk_table import (
    CHUNK_BITS,
    MIN_ALLOCATION_SIZE,
    NO_CHUNK,
    SIZE_SHIFT,
    ChunkTable,
    bin_for_size,
    bin_lower_bound,
)


def memory_map(table: ChunkTable, pool: PoolCounters, max_chunks_per_region: int = 200) -> str:
    """Bins with their free chunks, then each region's chunks in address order (XLA's DumpMemoryLog);
    the heading states `pool`'s counters."""
    s = pool.stats()
    lines = [
        f"memory map of {pool.policy.label} pool on {pool.device.name}: in use {format_size(s['bytes_in_use'])}, "
        f"pool {format_size(s['pool_bytes'])}, limit {format_size(s['bytes_limit'])}, "
        f"fragmentation {s['fragmentation']:.3f}",
        "bins (free chunks):",
    ]
    bins: dict[int, list[int]] = {}
    for size, _ in table.free_chunks():
        bins.setdefault(bin_for_size(size), []).append(size)
    for b, sizes in sorted(bins.items()):
        lines.append(
            f"  bin {b:2d} (>= {format_size(bin_lower_bound(b))}): {len(sizes)} chunk(s), {format_size(sum(sizes))}"
        )
    by_region: dict[int, list[tuple[int, int, int, bool, int]]] = {}
    for chunk in table.chunks():
        by_region.setdefault(chunk[0], []).append(chunk)
    for index, (start, region_chunks) in enumerate(by_region.items()):
        lines.append(
            f"region {index} at {start:#x}, {format_size(table.regions[start])}, {len(region_chunks)} chunk(s):"
        )
        for _, address, size, in_use, requested in region_chunks[:max_chunks_per_region]:
            state = f"in use (asked {requested} B)" if in_use else "free"
            lines.append(f"  {address:#x} +{address - start:#x} {size:>12d} B  {state}")
        if len(region_chunks) > max_chunks_per_region:
            lines.append(f"  ... {len(region_chunks) - max_chunks_per_region} more chunk(s)")
    return "\n".join(lines)


def check_invariants(table: ChunkTable, pool: PoolCounters) -> list[str]:
    """Every broken invariant of a BFC pool's `table` and counters, described; an empty list for a
    healthy pool.

    Chunks tile each region exactly, neighbours agree, no two free chunks touch, the free list
    holds exactly the free chunks in order, the handles name exactly the chunks in use, and the
    counters equal a recount.
    """
    problems: list[str] = []
    in_use = requested = 0
    seen: set[int] = set()
    free_keys: list[int] = []
    handles: dict[int, int] = {}
    size_of, address_of, prev_of, next_of, asked = table.columns()
    regions, first, spare, free = table.regions, table.first, table.spare, table.free
    if set(first) != set(regions):
        problems.append("regions and their first chunks disagree")
    for start, region_size in regions.items():
        chunk, previous, address, end = first.get(start, 0), 0, start, start + region_size
        while chunk:
            if chunk in seen:
                problems.append(f"chunk {chunk} appears twice")
                break
            seen.add(chunk)
            size = size_of[chunk]
            if size <= 0 or size % MIN_ALLOCATION_SIZE or address_of[chunk] != address:
                problems.append(
                    f"chunk {chunk} at {address_of[chunk]:#x} has bad size {size} or is not at {address:#x}"
                )
                break
            if prev_of[chunk] != previous:
                problems.append(f"chunk {address:#x} prev is {prev_of[chunk]}, expected {previous}")
            if asked[chunk] == 0:
                free_keys.append(size << SIZE_SHIFT | address << CHUNK_BITS | chunk)
                if previous and asked[previous] == 0:
                    problems.append(f"free chunks {address_of[previous]:#x} and {address:#x} touch but were not merged")
            elif asked[chunk] > 0:
                in_use += size
                requested += asked[chunk]
                handles[address] = chunk
            else:
                problems.append(f"chunk {address:#x} is in a region but marked as no chunk")
            previous, address, chunk = chunk, address + size, next_of[chunk]
        if address != end:
            problems.append(f"region {start:#x} ends at {end:#x} but its last chunk ends at {address:#x}")
    if sorted(seen | set(spare) | {0}) != list(range(len(size_of))) or any(asked[chunk] != NO_CHUNK for chunk in spare):
        problems.append("chunk ids are neither in a region nor spare, or spare ids are marked in use")
    if sorted(free_keys) != free:
        problems.append(f"the free list holds {len(free)} chunks, {len(free_keys)} chunks are free")
    if free != sorted(free):
        problems.append("the free list is out of (size, address) order")
    if handles != table.in_use:
        problems.append(f"{len(table.in_use)} handles for {len(handles)} chunks in use")
    if in_use != pool.bytes_in_use or requested != pool.requested_bytes_in_use:
        problems.append(
            f"bytes_in_use {pool.bytes_in_use} / requested {pool.requested_bytes_in_use}, recount {in_use} / {requested}"
        )
    if sum(regions.values()) != pool.pool_bytes:
        problems.append(f"pool_bytes {pool.pool_bytes} but regions sum to {sum(regions.values())}")
    if pool.pool_bytes > pool.bytes_limit:
        problems.append(f"pool_bytes {pool.pool_bytes} exceeds the limit {pool.bytes_limit}")
    return problems
