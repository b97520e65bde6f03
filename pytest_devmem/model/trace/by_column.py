"""A trace's figures computed by column with numpy, for traces of millions of events (imported only
where a long trace needs it: numpy costs the start-up of `devmem` some 0.1 s)."""

from __future__ import annotations

from array import array

import numpy as np

from .format import ALLOCATE_CODE, FREE_CODE


def pairs_by_column(
    allocation: np.ndarray, pointers: np.ndarray, lanes: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each free matched to its allocation, by column: the events' order by lane and pointer, each
    (lane, pointer)'s events in trace order (a stable sort; by pointer alone where `lanes` is None),
    and in that order whether each event follows an allocation of its own lane and pointer (a free
    then frees that allocation; an allocation then takes a pointer still live)."""
    order = np.argsort(pointers, kind="stable") if lanes is None else np.lexsort((pointers, lanes))
    sorted_pointers = pointers[order]
    follows = np.zeros(len(order), dtype=bool)
    follows[1:] = (sorted_pointers[1:] == sorted_pointers[:-1]) & allocation[order][:-1]
    if lanes is not None:
        sorted_lanes = lanes[order]
        follows[1:] &= sorted_lanes[1:] == sorted_lanes[:-1]
    return order, follows


def peak_live_bytes(actions: bytearray, pointers: array[int], sizes: array[int]) -> int | None:
    """The highest sum of requested bytes live at once, exactly as `Trace.peak_live_bytes` counts
    it event by event: an allocation adds its size (and its pointer now names it); a free takes
    away the size of its pointer's allocation when that is the pointer's last event before it
    (a free of a pointer not live takes nothing); other events do nothing. None where the sums
    might not fit 64 bits (the caller counts event by event then)."""
    codes = np.frombuffer(actions, dtype=np.uint8)
    kept = np.flatnonzero(codes <= FREE_CODE)
    count = len(kept)
    if not count:
        return 0
    size_values = np.frombuffer(sizes, dtype=np.int64)[kept]
    if int(size_values.max()) >= 2**63 // count or int(size_values.min()) < 0:
        return None
    kinds = codes[kept]
    order, after_own_allocation = pairs_by_column(
        kinds == ALLOCATE_CODE, np.frombuffer(pointers, dtype=np.uint64)[kept]
    )
    kind_sorted, size_sorted = kinds[order], size_values[order]
    taken = np.zeros(count, dtype=np.int64)
    taken[1:] = size_sorted[:-1]
    change_sorted = np.where(kind_sorted == ALLOCATE_CODE, size_sorted, np.where(after_own_allocation, -taken, 0))
    change = np.empty(count, dtype=np.int64)
    change[order] = change_sorted
    return max(0, int(np.cumsum(change).max()))


def first_appearances(codes: array[int], most: int = 64) -> list[int] | None:
    """The distinct values of a column of name codes in the order they first appear (a million
    events in a millisecond or two, where a dict of them takes some 40 ms); None where there are
    more than `most` (the caller finds them event by event then)."""
    values = np.frombuffer(codes, dtype=np.uint32)
    if not len(values):
        return []
    if (values == values[0]).all():  # one device, the common case
        return [int(values[0])]
    used = np.flatnonzero(np.bincount(values))
    if len(used) > most:
        return None
    firsts = sorted((int(np.argmax(values == code)), int(code)) for code in used)
    return [code for _, code in firsts]


def lanes_by_column(
    devices: array[int], processes: array[int], sources: array[int]
) -> tuple[list[tuple[int, int, int]], np.ndarray] | None:
    """The distinct (device, process, source) name codes of the events, sorted, and for each event
    the index of its own among them; None for no events, or codes too large to combine in 64 bits."""
    if not len(devices):
        return None
    columns = [np.frombuffer(column, dtype=np.uint32) for column in (devices, processes, sources)]
    if all((column == column[0]).all() for column in columns):  # one lane, the common case: no sort
        return [(int(devices[0]), int(processes[0]), int(sources[0]))], np.zeros(len(devices), dtype=np.int64)
    columns = [column.astype(np.uint64) for column in columns]
    spans = [int(column.max()) + 1 for column in columns]
    if spans[0] * spans[1] * spans[2] >= 2**63:
        return None
    key = (columns[0] * np.uint64(spans[1]) + columns[1]) * np.uint64(spans[2]) + columns[2]
    unique, inverse = np.unique(key, return_inverse=True)
    combinations = [(k // (spans[1] * spans[2]), k // spans[2] % spans[1], k % spans[2]) for k in unique.tolist()]
    return combinations, inverse


def first_unpaired(
    actions: bytearray,
    pointers: array[int],
    sizes: array[int],
    devices: array[int],
    processes: array[int],
    sources: array[int],
) -> int | None:
    """The index of the first event that breaks the pairing of allocations and frees, as
    `Trace.pairing_problem` finds it event by event (an allocation of a pointer its allocator holds
    live, a free of one it does not, a free whose size is not its allocation's); None where every
    event pairs, or where the lanes cannot be combined (the caller looks event by event then)."""
    codes = np.frombuffer(actions, dtype=np.uint8)
    kept = np.flatnonzero(codes <= FREE_CODE)
    if not len(kept):
        return None
    lanes = lanes_by_column(devices, processes, sources)
    if lanes is None:
        return None
    kind = codes[kept]
    order, after_allocation = pairs_by_column(
        kind == ALLOCATE_CODE, np.frombuffer(pointers, dtype=np.uint64)[kept], lanes[1][kept]
    )
    kind, size = kind[order], np.frombuffer(sizes, dtype=np.int64)[kept][order]
    held = np.zeros(len(order), dtype=np.int64)
    held[1:] = size[:-1]
    bad = np.where(
        kind == ALLOCATE_CODE, after_allocation, ~after_allocation | (size != held)
    )  # allocated again while live; freed while not live, or with another size
    found = np.flatnonzero(bad)
    return int(kept[order][found].min()) if len(found) else None
