"""The machine's BFC rules compiled by numba: where every lane is a BFC pool (plain or compacting).

`compiled_kernel.run_lanes` runs the common events of one lane or several over arrays (a copy of
each pool's chunk table, its free chunks, each buffer by slot); before any other event it stops,
this module writes its state back into the pools, devices and allocators, and the event loop
(`any_lanes.replay_lanes`, each pool through its own methods) runs that event, after which the
arrays are read again from the pools. A map owed costs no such round trip unless the device is
copied for it (`Replay.promise`). The decisions are the event loop's, event for event: the property
tests replay random traces through both.

With `DEVMEM_COMPILED=0` (or where numba cannot be imported), for a short trace in a process that
has not loaded the compiled loop (loading it would cost more than it saves), or with a timeline,
the event loop runs alone.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...pool import BFCPool
from ...pool.chunk_table import ADDRESS_MASK, CHUNK_BITS, CHUNK_MASK, MIN_ALLOCATION_SIZE, SIZE_SHIFT
from ...pool.compacting import CompactingPool
from ..state import AllocatorState, Replay
from .any_lanes import replay_lanes

COMPILED_FROM_EVENTS = 1_000
"""Traces of this many events or more run compiled once the compiled loop is loaded in the process:
moving the pools into its arrays and back costs about a millisecond a trace, which the event loop
spends on some 300 events (2.5 to 4 microseconds each; the compiled loop 0.2 to 0.7)."""

LOADED_FROM_EVENTS = 400_000
"""The compiled loop loads once traces it suits of this many events in all (one trace or several,
each of COMPILED_FROM_EVENTS or more) ran in the process: importing numba and loading the loop from
its cache costs about a CPU second and 127 MiB once a process (compiling it the first time on a
machine, some 10 CPU seconds), which the compiled loop saves back over some 350,000 events (2.5 to
3.5 microseconds an event)."""

LARGEST_VALUE = 2**62
"""Sizes and addresses at or above this do not fit the compiled loop's 64-bit integers: Python runs them."""

PYTHON_RUNS_BEFORE_GIVING_UP = 256
"""After this many events handed back to Python (a trace of many failed allocations, say), the rest
of the trace runs in Python: each costs a copy of the chunk table both ways."""

MIN_BIN_WIDTH = 64
"""Room for free chunks in each bin when the arrays are made; a bin nearly full makes them wider."""

NO_EVENT = -(2**62)
"""The compiled loop's `None` for an event index."""

_kernel: Any = None
_slots: Any = None
_available: bool | None = None
_events_before_loading = 0  # of the traces the compiled loop suited before it was loaded


def _bfc_pool(allocator: AllocatorState) -> BFCPool:
    """The BFC pool of an allocator the compiled loop runs (`suits` chose only those)."""
    pool = allocator.pool
    assert isinstance(pool, BFCPool)
    return pool


def available() -> bool:
    """Whether numba (and numpy) can be imported; `DEVMEM_COMPILED=0` turns the compiled loop off."""
    global _available, _kernel, _slots
    if _available is None:
        if os.environ.get("DEVMEM_COMPILED", "1") == "0":
            _available = False
        else:
            try:  # numba compiles it, or loads it from its cache, on import
                _kernel = importlib.import_module(".compiled_kernel", __package__)
                _slots, _available = importlib.import_module(".compiled_slots", __package__), True
            except ImportError:
                _available = False
    return _available


def suits(replay: Replay) -> bool:
    """Whether the compiled loop runs this replay: no timeline, every lane a BFC pool of its own (no
    chip's runtime shared by sources), every size positive, the trace long enough; and numba there,
    the compiled loop loaded (`LOADED_FROM_EVENTS`)."""
    global _events_before_loading
    trace, machine = replay.trace, replay.machine
    if replay.recorded is not None or _python_only or not len(trace) or len(trace) < COMPILED_FROM_EVENTS:
        return False
    names = trace.names
    if (
        replay.shares_runtime
        or min(trace.sizes) <= 0
        or not all(machine.is_bfc(names[source]) for _, _, source in replay.lane_keys)
    ):
        return False
    if _available is None:
        _events_before_loading += len(trace)
        if _events_before_loading < LOADED_FROM_EVENTS:
            return False
    return available()


_python_only = False


@contextmanager
def python_only() -> Iterator[None]:
    """Within it, the Python loop runs every replay (what a machine without numba runs): the
    benchmarks' reference."""
    global _python_only
    before, _python_only = _python_only, True
    try:
        yield
    finally:
        _python_only = before


def replay_compiled(replay: Replay) -> int:
    """Run the trace's events compiled (`suits` chose the replay), handing each event the compiled
    loop cannot decide to the event loop; the index of the last event run."""
    import numpy as np

    kernel, trace = _kernel, replay.trace
    actions = np.frombuffer(trace.actions, dtype=np.uint8)
    pointers = np.frombuffer(trace.pointers, dtype=np.uint64)
    requested = np.frombuffer(trace.sizes, dtype=np.uint64)
    end = len(actions)
    if int(requested.max()) >= LARGEST_VALUE:
        return replay_lanes(replay)
    requested = requested.view(np.int64)  # the same values (all under LARGEST_VALUE), no copy
    codes = replay.lane_codes
    lanes = np.zeros(end, dtype=np.int64) if codes is None else np.asarray(codes, dtype=np.int64)
    slots, slot_lanes, slot_pointers, *table = _slots.slots_of_pairs(pointers, lanes)
    state = _State(replay, requested, slot_lanes, slot_pointers, table)
    index, python_runs = 0, 0
    while True:
        if not state.load():
            return replay_lanes(replay, index)
        stopped, why = state.run(actions, lanes, pointers, slots, requested, index)
        while why in (kernel.EXIT_PROMISE, kernel.EXIT_FULL):
            if why == kernel.EXIT_PROMISE:
                state.promise(stopped, int(lanes[stopped]), actions[stopped] == 1)
            else:  # a bin nearly full: wider arrays
                state.store()
                state.load()
            stopped, why = state.run(actions, lanes, pointers, slots, requested, stopped)
        state.store()
        if why == kernel.EXIT_DONE:
            return end - 1
        python_runs += 1
        if python_runs > PYTHON_RUNS_BEFORE_GIVING_UP:
            return replay_lanes(replay, stopped)
        temporary = stopped + 1 < end and pointers[stopped + 1] == pointers[stopped] and actions[stopped + 1] == 1
        last = replay_lanes(replay, stopped, min(end, stopped + (2 if temporary else 1)))
        if replay.oom is not None and replay.stop_on_oom:
            return last
        index = last + 1
        if index >= end:
            return last


class _State:
    """The compiled loop's arrays, read from and written back to the pools, devices and allocators
    (whose counters the Python loop reads and writes the same way): each started lane's pool a
    slice of the chunk columns and NUM_BINS rows of the free columns, its device's and its source's
    counters in rows."""

    def __init__(self, replay: Replay, requested: Any, slot_lanes: Any, slot_pointers: Any, table: list[Any]) -> None:
        import numpy as np

        self.np, self.kernel, self.replay, self.requested = np, _kernel, replay, requested
        self.slot_lanes, self.slot_pointers = slot_lanes, slot_pointers
        self.table = table  # the hash table of the trace's (lane, pointer) pairs (`slots_of_pairs`)
        slots = len(slot_pointers)
        self.held = np.zeros(slots, dtype=np.uint8)
        self.held_columns = [np.zeros(slots, dtype=np.int64) for _ in range(4)]  # address, event, chunk id, size
        self.arrays: tuple[Any, ...] = ()

    def load(self) -> bool:
        """Read every started lane's pool, device and counts into arrays; False where a value is too large."""
        np, k, replay = self.np, self.kernel, self.replay
        lanes, bins = replay.lanes, k.NUM_BINS
        self.started = started = [(lane, allocator) for lane, allocator in enumerate(lanes) if allocator is not None]
        # the started lanes' devices and sources' counts, each once, in the order their lanes come
        devices = list({id(allocator.device): allocator.device for _, allocator in started}.values())
        counts = list({id(allocator.counts): allocator.counts for _, allocator in started}.values())
        device_index = {id(device): d for d, device in enumerate(devices)}
        counts_index = {id(source): c for c, source in enumerate(counts)}
        pool_lane = {id(allocator.pool): lane for lane, allocator in started}
        self.devices, self.counts = devices, counts
        pools = np.zeros((len(lanes), k.P_FIELDS), dtype=np.int64)
        tables = []
        base, width = 0, MIN_BIN_WIDTH
        for lane, allocator in started:
            pool = _bfc_pool(allocator)
            table = pool.table.columns()
            length = len(table[0])
            if length and (max(table[1]) >= LARGEST_VALUE or max(table[0]) >= LARGEST_VALUE):
                return False
            capacity = length + 64 * k.CHUNK_BATCH
            row = pools[lane]
            row[k.P_STARTED], row[k.P_BASE], row[k.P_CAPACITY], row[k.P_TABLE_IDS] = 1, base, capacity, length
            row[k.P_SPARE_IDS], row[k.P_IN_USE], row[k.P_BYTES] = (
                len(pool.table.spare),
                pool.bytes_in_use,
                pool.pool_bytes,
            )
            row[k.P_MAX_WASTE], row[k.P_DEVICE] = pool.max_internal_fragmentation, device_index[id(allocator.device)]
            row[k.P_ALLOCATOR_IN_USE], row[k.P_ALLOCATOR_PEAK] = allocator.in_use, allocator.peak_in_use
            row[k.P_COUNTS] = counts_index[id(allocator.counts)]
            # the free chunks by XLA's bins, each bin in (size, address) order: their concatenation is
            # the pool's list, sorted by size, so each bin is one run of it
            keys = pool.table.free
            sizes = np.array([key >> SIZE_SHIFT for key in keys], dtype=np.int64)
            bounds = np.concatenate(
                ([0], np.searchsorted(sizes, MIN_ALLOCATION_SIZE << np.arange(1, bins)), [len(keys)])
            )
            width = max(width, 2 * int(np.diff(bounds).max()), len(keys) // 4)
            tables.append((lane, base, length, table, pool.table.spare, keys, sizes, bounds))
            base += capacity
        columns = [np.zeros(max(base, 1), dtype=np.int64) for _ in range(6)]
        free = [np.zeros((len(lanes) * bins, width), dtype=np.int64) for _ in range(3)]
        bin_counts = np.zeros(len(lanes) * bins, dtype=np.int64)
        for lane, start, length, table, spare_ids, keys, sizes, bounds in tables:
            for column, values in zip(columns, table):
                column[start : start + length] = values
            columns[5][start : start + len(spare_ids)] = spare_ids
            addresses = np.array([key >> CHUNK_BITS & ADDRESS_MASK for key in keys], dtype=np.int64)
            ids = np.array([key & CHUNK_MASK for key in keys], dtype=np.int64)
            for b in range(bins):
                low, high, r = bounds[b], bounds[b + 1], lane * bins + b
                free[0][r, : high - low], free[1][r, : high - low], free[2][r, : high - low] = (
                    sizes[low:high],
                    addresses[low:high],
                    ids[low:high],
                )
                bin_counts[r] = high - low
        held = self.held
        held[:] = 0
        address, event, chunk, size = self.held_columns
        for lane, allocator in started:
            handles = allocator.handles
            if handles:
                pointers = np.fromiter(handles, dtype=np.uint64, count=len(handles))
                slots = _slots.slots_for_pairs(pointers, np.full(len(handles), lane, dtype=np.int64), *self.table)
                pool = _bfc_pool(allocator)
                pool_handles, events = zip(*handles.values())
                addresses = (  # a compacting pool's handles are its own (a plain pool's are addresses)
                    [pool.address_of(h) for h in pool_handles] if isinstance(pool, CompactingPool) else pool_handles
                )
                chunk_of = pool.table.in_use
                held[slots] = 1
                address[slots], event[slots] = addresses, events
                chunk[slots] = [chunk_of[a] for a in addresses]
                size[slots] = self.requested[np.array(events, dtype=np.int64)]
        most = max((len(device.allocators) for device in devices), default=1)
        device_rows = np.zeros((len(devices), k.D_FIELDS), dtype=np.int64)
        device_floats = np.zeros((len(devices), k.DF_FIELDS), dtype=np.float64)
        device_pools = np.zeros((len(devices), max(most, 1)), dtype=np.int64)
        for d, device in enumerate(devices):
            row = device_rows[d]
            row[k.D_IN_USE], row[k.D_PEAK_IN_USE] = device.in_use, device.peak_in_use
            row[k.D_CHUNKS], row[k.D_PEAK_CHUNKS] = device.chunks, device.peak_chunks
            row[k.D_PEAK_EVENT], row[k.D_PENDING] = device.peak_event, device.pending
            row[k.D_WORST_EVENT] = NO_EVENT if device.worst_event is None else device.worst_event
            row[k.D_FRAGMENTED] = device.fragmented  # D_COMPARED 0: the first allocation is sampled
            row[k.D_SOLO] = -1 if device.solo is None else pool_lane[id(device.solo)]
            members = [pool_lane[id(a.pool)] for a in device.allocators if id(a.pool) in pool_lane]
            if len(members) != len(device.allocators):
                return False  # an allocator of no lane: Python runs it
            row[k.D_POOLS] = len(members)
            device_pools[d, : len(members)] = members
            floats = device_floats[d]
            floats[k.DF_SAMPLED], floats[k.DF_MAPPED] = device.sampled, device.mapped
            at_peak, worst = device.fragmentation_at_peak, device.worst_fragmentation
            floats[k.DF_AT_PEAK] = math.nan if at_peak is None else at_peak
            floats[k.DF_WORST] = -1.0 if worst is None else worst
        self.pools, self.device_rows, self.device_floats, self.device_pools = (
            pools,
            device_rows,
            device_floats,
            device_pools,
        )
        self.count_rows = np.array(counts, dtype=np.int64).reshape(len(counts), 3)
        self.arrays = (*columns, *free, bin_counts, held, address, event, chunk, size)
        return True

    def run(self, actions: Any, lanes: Any, pointers: Any, slots: Any, requested: Any, begin: int) -> tuple[int, int]:
        return self.kernel.run_lanes(
            actions,
            lanes,
            pointers,
            slots,
            requested,
            begin,
            *self.arrays,
            self.pools,
            self.device_rows,
            self.device_floats,
            self.device_pools,
            self.count_rows,
            self.replay.step,
        )

    def store(self) -> None:
        """Write the arrays back into every started lane's pool, buffers, allocator, device and counts."""
        np, k = self.np, self.kernel
        size_of, address_of, prev_of, next_of, asked, spare, free_sizes, free_addresses, free_ids, bin_counts = (
            self.arrays[:10]
        )
        (held,) = np.nonzero(self.held)
        held_lanes = self.slot_lanes[held]
        for lane, allocator in self.started:
            row = self.pools[lane]
            pool = _bfc_pool(allocator)
            start, length, nspare = int(row[k.P_BASE]), int(row[k.P_TABLE_IDS]), int(row[k.P_SPARE_IDS])
            keys = []
            for r in range(lane * k.NUM_BINS, (lane + 1) * k.NUM_BINS):
                n = int(bin_counts[r])
                keys += [
                    size << SIZE_SHIFT | address << CHUNK_BITS | chunk
                    for size, address, chunk in zip(
                        free_sizes[r, :n].tolist(), free_addresses[r, :n].tolist(), free_ids[r, :n].tolist()
                    )
                ]
            pool.table.set_columns(
                [column[start : start + length].tolist() for column in (size_of, address_of, prev_of, next_of, asked)],
                spare[start : start + nspare].tolist(),
                keys,
            )
            pool.bytes_in_use = int(row[k.P_IN_USE])
            slots = held if len(self.started) == 1 else held[held_lanes == lane]
            address, event, chunk = (column[slots].tolist() for column in self.held_columns[:3])
            handles = allocator.handles
            handles.clear()
            handles.update(zip(self.slot_pointers[slots].tolist(), zip(address, event)))
            pool.set_buffers(dict(zip(address, chunk)))  # each buffer's handle its address
            allocator.in_use, allocator.peak_in_use = int(row[k.P_ALLOCATOR_IN_USE]), int(row[k.P_ALLOCATOR_PEAK])
        for d, device in enumerate(self.devices):
            row, floats = self.device_rows[d], self.device_floats[d]
            device.in_use, device.peak_in_use = int(row[k.D_IN_USE]), int(row[k.D_PEAK_IN_USE])
            device.chunks, device.peak_chunks = int(row[k.D_CHUNKS]), int(row[k.D_PEAK_CHUNKS])
            device.peak_event, device.pending = int(row[k.D_PEAK_EVENT]), bool(row[k.D_PENDING])
            worst_event = int(row[k.D_WORST_EVENT])
            device.worst_event = None if worst_event == NO_EVENT else worst_event
            device.fragmented = bool(row[k.D_FRAGMENTED])
            device.sampled, device.mapped = float(floats[k.DF_SAMPLED]), float(floats[k.DF_MAPPED])
            at_peak, worst = float(floats[k.DF_AT_PEAK]), float(floats[k.DF_WORST])
            device.fragmentation_at_peak = None if math.isnan(at_peak) else at_peak
            device.worst_fragmentation = None if worst < 0 else worst
        for counts, row in zip(self.counts, self.count_rows.tolist()):
            counts[:] = row

    def promise(self, index: int, lane: int, at_free: bool) -> None:
        """The maps owed before event `index` on the device of `lane` (as the Python loops make them)."""
        k, replay = self.kernel, self.replay
        d = int(self.pools[lane, k.P_DEVICE])
        device, row = self.devices[d], self.device_rows[d]
        on_device = self.started if len(self.started) == 1 else [(n, a) for n, a in self.started if a.device is device]
        entries = sum(len(a.handles) + int(self.pools[lane_of, k.P_TABLE_IDS]) for lane_of, a in on_device)
        copy = replay.copy_due(device, index, entries)
        if copy:  # the device is copied: its pools as they are now (the arrays stay as they are)
            self.store()
        else:  # the counters a map reads (the chunks are copied only with the device)
            for lane_of, allocator in on_device:
                _bfc_pool(allocator).bytes_in_use = int(self.pools[lane_of, k.P_IN_USE])
        if row[k.D_FRAGMENTED]:
            worst_event = int(row[k.D_WORST_EVENT])
            replay.fragmented[device.name] = replay.promise(
                device, worst_event if worst_event != NO_EVENT else index - 1, index, copy
            )
            row[k.D_FRAGMENTED] = 0
            copy = False
        if at_free and row[k.D_PENDING]:
            replay.snapshots[device.name] = replay.promise(device, int(row[k.D_PEAK_EVENT]), index, copy)
            row[k.D_PENDING] = 0
