"""The replay of a test's trace on the machine (the package's docstring says what the machine is).

Per device (each device the trace names gets the spec's capacity; JAX's device k and TensorFlow's
device k are one device, as GPU k is for both), in time order:

* a process's first allocator on a device creates its CUDA context there, which holds memory of its
  own (`frameworks.context_bytes_for`);
* a framework's first event creates its allocators on every device it uses in the trace, as JAX's
  client and TensorFlow's devices are created for all GPUs at once, each sized by that framework's
  rules (`frameworks.py`); JAX preallocates then; TensorFlow's limit is what is free then less its
  reserve, and its default allocator takes that limit with its first allocation;
* a region the device cannot give backs off by x0.9 (bfc_allocator.cc Extend) and the framework runs
  on with less: no failure yet;
* then every allocation and free, in order. A framework fails only when one of its allocations
  cannot be served; the replay stops there, as the process would (`stop_on_oom`).

A device's `peak_bytes_in_use` is the most its allocators counted in use at once, as XLA's and
TensorFlow's BFC allocators count it (`bytes_in_use += chunk->size` in bfc_allocator.cc, what
`memory_stats()["peak_bytes_in_use"]` and TensorFlow's `get_memory_info` report): a chunk's whole
size, with the remainder too small to split off (a chunk is handed out whole where the rest is under
the request and under 128 MiB). `peak_bytes_requested` is the most live data at once, each request
rounded up to 256 bytes as XLA rounds it (what the tensors need); the two differ by the unsplit
remainders. `peak_bytes_reserved` is the most its allocators held from the device (contexts apart,
counted in `context_bytes`); the contributors at the peak and `fragmentation` are taken at the
moment its live data peaked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from ...errors import OutOfMemoryError
from ..frameworks import AllocatorSetup, tpu_runtime_description
from ..trace import ALLOCATE_CODE, FAILURE_CODE, START_CODE, Trace
from .allocator_rules import AllocatorRules
from .device_state import TPU_RUNTIME_NAME, AllocatorState, Checkpoint, DeviceState, Promise, snapshot_of
from .loops import replay_compiled, replay_lanes, replay_ondemand_columns, suits
from .maps import holders, lines_at_peak, pool_maps
from .results import (
    AllocatorFigures,
    DeviceFigures,
    MachineRun,
    MachineSpec,
    MapSnapshot,
    SourceFigures,
)
from .state import Replay


class Machine(AllocatorRules):
    """One replay of a trace on the machine `spec` describes, with `setups` by trace source: its
    allocators started by their frameworks' rules (`AllocatorRules`), its events run by the fastest
    loop that applies."""

    def run(self, trace: Trace, *, timeline: bool = False, stop_on_oom: bool = True) -> MachineRun:
        """Replay `trace`. With `timeline`, the figures after every event are kept for pictures;
        the figures themselves are the same either way."""
        replay = Replay(self, trace, timeline, stop_on_oom)
        index = replay_ondemand_columns(replay)
        if index is not None:
            return finish(replay, index)
        if replay.order:  # it started allocators before it found it does not apply: start afresh
            replay = Replay(self, trace, timeline, stop_on_oom)
        return finish(replay, replay_compiled(replay) if suits(replay) else replay_lanes(replay))


# -- the result ------------------------------------------------------------------------------


def finish(replay: Replay, index: int) -> MachineRun:
    """The run's result once the loop ended after event `index`: every map owed made."""
    trace, spec, oom = replay.trace, replay.machine.spec, replay.oom
    for device in replay.devices.values():
        if device.pending:
            replay.snapshots[device.name] = snapshot_of(device, device.peak_event)
        if device.fragmented and oom is None:
            replay.fragmented[device.name] = snapshot_of(
                device, device.worst_event if device.worst_event is not None else -1
            )
    snapshots = {name: _keep(replay, name, map_) for name, map_ in replay.snapshots.items()}
    fragmented = {name: _keep(replay, name, map_) for name, map_ in replay.fragmented.items()}
    figures = [_device_figures(device, snapshots.get(device.name), trace, spec) for device in replay.devices.values()]
    by_source = {source: SourceFigures(c[0], c[2]) for source, c in sorted(replay.counts.items()) if c[0]}
    replayed = index + 1 if oom is None or not replay.stop_on_oom else oom.event
    return MachineRun(
        spec,
        len(trace),
        figures,
        replay.order,
        oom,
        by_source,
        replay.recorded,
        snapshots,
        replay.failure,
        replayed,
        fragmented,
    )


def _keep(replay: Replay, name: str, map_: MapSnapshot | Promise) -> MapSnapshot:
    """A promised map made: from its checkpoint, after replaying the device's events since."""
    if isinstance(map_, MapSnapshot):
        return map_
    device = replay.devices[name]
    checkpoint = map_.checkpoint
    if checkpoint.upto != map_.upto:
        checkpoint = checkpoint.copy()
        advance(replay, device, checkpoint, map_.upto)
    allocators = [a.owner for a in device.allocators[: len(checkpoint.pools)]]
    return MapSnapshot(name, map_.event, pool_maps(allocators, checkpoint.pools, checkpoint.handles))


def advance(replay: Replay, device: DeviceState, checkpoint: Checkpoint, upto: int) -> None:
    """Replay `device`'s events from `checkpoint.upto` to `upto` into `checkpoint` (a copy): the
    pools are deterministic, so they reach the state the replay had then. A temporary the loop
    skipped is allocated and freed, which leaves a BFC pool as it was; an allocation that failed
    fails again and its free is ignored, as in the loop."""
    trace = replay.trace
    actions, pointers, sizes, codes = trace.actions, trace.pointers, trace.sizes, replay.lane_codes
    position = {
        lane: device.allocators.index(a) for lane, a in enumerate(replay.lanes) if a is not None and a.device is device
    }
    dropped: set[tuple[int, int]] = set()
    skipped = replay.skipped
    for index in range(checkpoint.upto, upto):
        action = actions[index]
        if action == FAILURE_CODE or index in skipped:
            continue
        lane = 0 if codes is None else codes[index]
        slot = position.get(lane)
        if slot is None:
            continue
        pool, handles, pointer = checkpoint.pools[slot], checkpoint.handles[slot], pointers[index]
        if action == START_CODE:  # what it held before the trace, as loops/any_lanes.py `started` has it
            with contextlib.suppress(OutOfMemoryError):
                handle = pool.alloc(max(sizes[index], 1))
                if sizes[index] > 0:
                    handles[pointer] = (handle, index)
                else:
                    pool.free(handle)
            continue
        if action == ALLOCATE_CODE:
            size = sizes[index]
            if size <= 0:  # only ever a temporary the loop skipped (it fails otherwise)
                dropped.add((lane, pointer))
                continue
            try:
                handles[pointer] = (pool.alloc(size), index)
            except OutOfMemoryError:
                dropped.add((lane, pointer))
        else:
            entry = handles.pop(pointer, None)
            if entry is None:
                dropped.discard((lane, pointer))
            else:
                pool.free(entry[0])
    checkpoint.upto = upto


def maps_after(
    trace: Trace, setups: Mapping[str, AllocatorSetup], spec: MachineSpec, event: int
) -> dict[str, MapSnapshot]:
    """Each device's pools as they are right after `event`: the trace up to it replayed (through the
    pools' own methods: one map, made when a picture asks for a moment the replay did not map)."""
    columns = trace.to_columns()
    count = max(0, min(event + 1, len(trace)))
    prefix = Trace.from_columns(
        {name: values if name == "names" else values[:count] for name, values in columns.items()}
    )
    replay = Replay(Machine(spec, setups), prefix, False, True)
    replay_lanes(replay)
    return {name: snapshot_of(device, event) for name, device in replay.devices.items()}


def run_machine(
    trace: Trace,
    setups: Mapping[str, AllocatorSetup],
    spec: MachineSpec,
    *,
    timeline: bool = False,
    stop_on_oom: bool = True,
) -> MachineRun:
    """Replay `trace` on the machine `spec` describes, each source's allocator set up by `setups`."""
    return Machine(spec, setups).run(trace, timeline=timeline, stop_on_oom=stop_on_oom)


def _allocator_figures(device: DeviceState, members: list[AllocatorState]) -> AllocatorFigures:
    """One allocator's figures. A chip's TPU runtime allocator comes once for all the sources of its
    process (each source's own peak is the record's by_source): what its first source's start took,
    its moves of every source's buffers. Its peak in use is the chip's where it is the chip's only
    allocator (always, but for several processes on one chip, which a TPU's runtime refuses; then
    the sum of its sources' peaks)."""
    first, pool = members[0], members[0].pool
    if first.runtime:
        alone = len(members) == len(device.allocators)
        name, setup = TPU_RUNTIME_NAME, tpu_runtime_description(dict.fromkeys(a.source for a in members))
        peak = device.peak_in_use if alone else sum(a.peak_in_use for a in members)
    else:
        name, setup, peak = first.source, first.setup.describe(), first.peak_in_use
    return AllocatorFigures(
        name,
        first.process,
        setup,
        first.limit,
        first.asked,
        first.took,
        peak,
        first.peak_held,
        getattr(pool, "moved_bytes", 0),
        getattr(pool, "compactions", 0),
    )


def _device_figures(
    device: DeviceState, snapshot: MapSnapshot | None, trace: Trace, spec: MachineSpec
) -> DeviceFigures:
    members: dict[int, list[AllocatorState]] = {}  # a TPU runtime's sources share its pool: one allocator
    for a in device.allocators:
        members.setdefault(id(a.pool) if a.runtime else id(a), []).append(a)
    allocators = tuple(_allocator_figures(device, found) for found in members.values())
    at_peak = holders(snapshot, trace) if snapshot is not None and snapshot.event == device.peak_event else {}
    lines = lines_at_peak(snapshot, trace, at_peak) if at_peak else {}
    return DeviceFigures(
        device=device.name,
        capacity=spec.capacity,
        context_bytes=len(device.contexts) * spec.context,
        peak_bytes_in_use=device.peak_chunks,
        peak_bytes_reserved=device.peak_held,
        peak_bytes_requested=device.peak_in_use,
        fragmentation=device.fragmentation_at_peak,
        worst_fragmentation=device.worst_fragmentation,
        worst_fragmentation_event=device.worst_event,
        allocators=allocators,
        at_peak=at_peak,
        peak_event=device.peak_event,
        lines_at_peak=lines,
    )
