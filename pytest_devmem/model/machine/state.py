"""The state of one machine replay, read and written by the loops (`loops/`), the maps and the
result: the replay itself (`Replay`): its devices (device_state.py), its lanes (one allocator each:
device, process, source), the maps it promised and what it found so far. The loops
import the replay's parts from here. No pytest, no frameworks here."""

from __future__ import annotations

import math
from typing import Any

from ...errors import OutOfMemoryError
from ..pool import BFCPool
from ..trace import Trace
from .allocator_rules import AllocatorRules
from .device_state import (
    CHECKPOINT_SPACING_PER_ENTRY,
    AllocatorState,
    Checkpoint,
    DeviceState,
    Promise,
    device_order,
    is_runtime,
    snapshot_of,
)
from .results import FRAGMENTATION_STEP, MapSnapshot, OutOfMemory, Timeline

__all__ = ["AllocatorState", "DeviceState", "Replay"]


# -- the lanes ----------------------------------------------------------------------------------

LANES_BY_COLUMN_FROM = 20_000
"""Traces of this many events or more find their lanes by column (numpy)."""


def _lanes_by_column(trace: Trace) -> tuple[list[tuple[int, int, int]], object] | None:
    from ..trace.by_column import lanes_by_column  # numpy: imported only where a long trace needs it

    return lanes_by_column(trace.devices, trace.processes, trace.sources)


def _take(codes: list[int], indices: Any) -> list[int]:
    """codes[i] for each i of `indices` (a numpy array), as a list."""
    import numpy as np  # numpy: imported only where a long trace needs it

    return np.asarray(codes, dtype=np.int64)[indices].tolist()


class Replay:
    """One replay's state: the devices, the lanes (one allocator each: device, process, source)
    and what the replay found so far. The loops (`loops/`) run the events."""

    def __init__(self, machine: AllocatorRules, trace: Trace, timeline: bool, stop_on_oom: bool) -> None:
        self.machine = machine
        self.trace = trace
        self.stop_on_oom = stop_on_oom
        self.step = FRAGMENTATION_STEP
        spec, names = machine.spec, trace.names
        by_column = _lanes_by_column(trace) if len(trace) >= LANES_BY_COLUMN_FROM else None
        if by_column is not None:
            combinations, lane_of_event = set(by_column[0]), by_column[1]
            device_codes = {d for d, _, _ in combinations}
            self.one_device = one_device = len(device_codes) <= 1
        else:
            self.one_device = one_device = len(set(trace.devices)) <= 1  # sets of arrays: fast
            device_codes = {trace.devices[0]} if one_device and len(trace) else set(trace.devices)
        device_name = {code: names[code] or spec.default_device for code in device_codes}
        self.devices: dict[str, DeviceState] = {}
        devices = self.devices
        for name in sorted(set(device_name.values()), key=device_order):
            devices[name] = DeviceState(name, len(devices), spec.capacity)
        # a lane is one allocator: (device, process, source); each event names its lane
        if by_column is None:
            one_lane = one_device and len(set(trace.processes)) <= 1 and len(set(trace.sources)) <= 1
            combinations = (
                {(trace.devices[0], trace.processes[0], trace.sources[0])}
                if one_lane and len(trace)
                else set(zip(trace.devices, trace.processes, trace.sources))
            )
        self.lane_keys = lane_keys = sorted({(devices[device_name[d]].code, p, s) for d, p, s in combinations})
        self.lane_index = lane_index = {key: i for i, key in enumerate(lane_keys)}
        self.lane_codes: list[int] | None = None  # None: every event is on lane 0
        if len(lane_keys) > 1 and by_column is not None:
            codes = [lane_index[(devices[device_name[d]].code, p, s)] for d, p, s in by_column[0]]
            self.lane_codes = _take(codes, lane_of_event)
        elif len(lane_keys) > 1:
            code_of = {(d, p, s): lane_index[(devices[device_name[d]].code, p, s)] for d, p, s in combinations}
            self.lane_codes = [code_of[key] for key in zip(trace.devices, trace.processes, trace.sources)]
        self.by_code = list(devices.values())
        runtime_lanes = [(d, p) for d, p, s in lane_keys if is_runtime(machine._setup(names[s]), self.by_code[d].name)]
        self.shares_runtime = len(set(runtime_lanes)) < len(runtime_lanes)  # sources sharing a chip's runtime allocator
        self.lanes: list[AllocatorState | None] = [None] * len(lane_keys)
        self.counts: dict[str, list[int]] = {}
        self.order: list[str] = []
        self.recorded = Timeline(list(devices)) if timeline else None
        self.snapshots: dict[str, MapSnapshot | Promise] = {}
        self.fragmented: dict[str, MapSnapshot | Promise] = {}
        self.failure: MapSnapshot | None = None
        self.oom: OutOfMemory | None = None
        self.skipped: set[int] = set()  # events the loop skipped that were not a temporary's pair on one lane
        self.dropped: set[tuple[int, int]] = set()  # (lane, pointer) of allocations that failed, the replay going on

    def start(self, lane: int) -> AllocatorState:
        """The allocator of `lane`, created with its framework's allocators on every device it uses."""
        _, process, source = self.lane_keys[lane]
        used = [self.by_code[d] for d, p, s in self.lane_keys if p == process and s == source]
        for code, started in self.machine._start(self.trace.names[source], process, used, self.counts, self.order):
            self.lanes[self.lane_index[(code, process, source)]] = started
            started.device.stale = True
        allocator = self.lanes[lane]
        assert allocator is not None
        return allocator

    def promise(self, device: DeviceState, event: int, upto: int, copy: bool | None = None) -> Promise:
        """The map of `device` as it is now (right before event `upto`), named after `event`; made at
        the end. Pools must hold their current counters (the loops keep some in locals). `copy`:
        whether to copy the device now, where the caller decided (`copy_due`); where the copy is
        not due, the pools need not hold their current chunks."""
        checkpoint = device.checkpoint
        if copy if copy is not None else self.copy_due(device, upto):
            checkpoint = device.checkpoint = Checkpoint.of(device, upto)
            device.stale = False
        assert checkpoint is not None
        return Promise(event, upto, checkpoint)

    def copy_due(self, device: DeviceState, upto: int, entries: int | None = None) -> bool:
        """Whether a map promised right before event `upto` copies the device (a copy is made at
        most every `_spacing` events); `entries`: its buffers and chunks, where its pools' own maps are stale."""
        checkpoint = device.checkpoint
        return checkpoint is None or device.stale or upto - checkpoint.upto >= self._spacing(device, entries)

    def _spacing(self, device: DeviceState, entries: int | None = None) -> int:
        if entries is None:
            entries = sum(
                len(a.handles) + (len(a.pool.table.size) if isinstance(a.pool, BFCPool) else 0)
                for a in device.allocators
            )
        return max(64, math.isqrt(int(len(self.trace) * entries * CHECKPOINT_SPACING_PER_ENTRY)))

    def fail(self, error: OutOfMemoryError, allocator: AllocatorState, index: int) -> None:
        """The first allocation the machine could not serve: the result, and the maps of its device
        now. Device and pool counters must be current."""
        device = allocator.device
        self.oom = self.machine._out_of_memory(error, allocator, index, self.trace.names[self.trace.labels[index]])
        self.failure = snapshot_of(device, index - 1)
        if device.pending:  # nothing was freed there since its peak: the same state
            self.snapshots[device.name] = MapSnapshot(device.name, device.peak_event, self.failure.pools)
            device.pending = False
