"""A slot for each (lane, pointer) pair of a trace, compiled by numba (imported only where numba
is): `compiled_kernel.run_lanes` keeps each buffer in its slot."""

from __future__ import annotations

import numba
import numpy as np

Array = np.ndarray


@numba.njit(cache=True, inline="always")
def _hash(pointer: np.uint64, lane: int, mask: int) -> int:
    h = ((pointer + np.uint64(lane) * np.uint64(0xBF58476D1CE4E5B9)) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return int(np.int64(h) & mask)


@numba.njit(cache=True)
def slots_of_pairs(pointers: Array, lanes: Array) -> tuple[Array, ...]:
    """A slot for each (lane, pointer) pair of the trace, numbered in order of first use, through an
    open-addressing table (a sort, as numpy's unique, costs several times more): (slot of each
    event, lane and pointer of each slot, and the table, for `slots_for_pairs`)."""
    size = 1
    while size < 2 * len(pointers) + 2:
        size *= 2
    mask = size - 1
    keys = np.zeros(size, dtype=np.uint64)
    key_lanes = np.zeros(size, dtype=np.int32)  # lanes and slots are fewer than 2**31: half the memory of int64
    values = np.full(size, -1, dtype=np.int32)
    slots = np.empty(len(pointers), dtype=np.int32)
    first_pointers = np.empty(len(pointers), dtype=np.uint64)
    first_lanes = np.empty(len(pointers), dtype=np.int32)
    count = 0
    for index in range(len(pointers)):
        pointer, lane = pointers[index], lanes[index]
        position = _hash(pointer, lane, mask)
        while values[position] >= 0 and (keys[position] != pointer or key_lanes[position] != lane):
            position = (position + 1) & mask
        if values[position] < 0:
            keys[position], key_lanes[position], values[position] = pointer, lane, count
            first_pointers[count], first_lanes[count] = pointer, lane
            count += 1
        slots[index] = values[position]
    first_lanes, first_pointers = first_lanes[:count].copy(), first_pointers[:count].copy()  # the rest freed
    return slots, first_lanes, first_pointers, keys, key_lanes, values


@numba.njit(cache=True)
def slots_for_pairs(pointers: Array, lanes: Array, keys: Array, key_lanes: Array, values: Array) -> Array:
    """The slots of (lane, pointer) pairs of the trace, looked up in the table `slots_of_pairs` made."""
    mask = len(keys) - 1
    slots = np.empty(len(pointers), dtype=np.int32)
    for index in range(len(pointers)):
        pointer, lane = pointers[index], lanes[index]
        position = _hash(pointer, lane, mask)
        while keys[position] != pointer or key_lanes[position] != lane:
            position = (position + 1) & mask
        slots[index] = values[position]
    return slots


__all__ = ["slots_for_pairs", "slots_of_pairs"]
