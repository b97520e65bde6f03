"""Traces whose allocators are all on-demand (JAX's `platform` allocator, TensorFlow's `ondemand`),
replayed by column with numpy rather than event by event.

An on-demand allocator holds exactly its live buffers, each rounded to 256 bytes, and has no
fragmentation: a device's bytes in use after each event are a running sum, its peak that sum's
maximum, and its map at the peak the buffers live then. So the whole replay is a few passes over
the trace's columns: frees matched to their allocations (a stable sort by lane and pointer), then
running sums per device, per allocator and per framework. The allocators are still started one
by one at their first event (each takes its CUDA context, and TensorFlow sizes its limit from
what the device has free then), with the device holding what it would hold at that moment.

Anything this does not reproduce exactly goes back to the event loop (`replay_lanes`): a
timeline, an allocation that fails or might fail (a limit, the device full), a free of a buffer
not live on its lane, a pointer allocated twice while live, sizes that are not positive, an
action of no known kind. Then this answers None, and the machine replays afresh.
"""

from __future__ import annotations

from typing import Any

from ...pool import OnDemandPool
from ..results import MapSnapshot, PoolMap
from ..state import Replay


def replay_ondemand_columns(replay: Replay) -> int | None:
    """The index of the last event, with every figure of the replay set as the event loop would
    set it; None (the replay to be made afresh: allocators may have started) where this does not
    apply."""
    trace, machine = replay.trace, replay.machine
    names, count = trace.names, len(trace)
    if replay.recorded is not None or not count:
        return None
    if not all(not machine.is_bfc(names[source]) for _, _, source in replay.lane_keys):
        return None
    import numpy as np

    from ...trace.by_column import pairs_by_column  # numpy, as above

    actions = np.frombuffer(trace.actions, dtype=np.uint8)
    if (actions > 2).any():
        return None
    kept = np.flatnonzero(actions != 2)  # recorded failures hold nothing and start nothing
    events = len(kept)
    if not events:
        return None
    sizes = np.frombuffer(trace.sizes, dtype=np.int64)[kept]
    if int(sizes.min()) <= 0:
        return None
    allocation = actions[kept] == 0
    pointers = np.frombuffer(trace.pointers, dtype=np.uint64)[kept]
    lanes = (
        np.zeros(events, dtype=np.int64)
        if replay.lane_codes is None
        else np.asarray(replay.lane_codes, dtype=np.int64)[kept]
    )

    order, follows_own = pairs_by_column(allocation, pointers, lanes)  # each free matched to its allocation
    sorted_allocation = allocation[order]
    if (~sorted_allocation & ~follows_own).any() or (sorted_allocation & follows_own).any():
        return None  # a free of a buffer not live on its lane, or a pointer allocated twice while live
    allocated_at = np.zeros(events, dtype=np.int64)  # for a free: the position of its allocation
    allocated_at[order[1:]] = order[:-1]
    freed_at = np.full(events, events, dtype=np.int64)  # for an allocation: the position of its free (events: never)
    frees = np.flatnonzero(~allocation)
    freed_at[allocated_at[frees]] = frees
    rounded = (sizes + 255) & ~255
    change = np.where(allocation, rounded, -rounded[allocated_at])
    asked_change = np.where(allocation, sizes, -sizes[allocated_at])

    # the allocators, started at their lane's first event, the device holding what it holds then
    lane_keys = replay.lane_keys
    lane_device = np.array([device for device, _, _ in lane_keys], dtype=np.int64)
    devices = lane_device[lanes]
    by_device = {code: np.cumsum(np.where(devices == code, change, 0)) for code in np.unique(devices).tolist()}
    first_lanes, first_positions = np.unique(lanes, return_index=True)
    started_at: dict[int, int] = {}  # id(allocator) -> the event it started at
    base = {device.code: device.device.used for device in replay.by_code}  # what each device holds besides the buffers
    for position, lane in sorted(zip(first_positions.tolist(), first_lanes.tolist())):
        if replay.lanes[lane] is not None:
            continue
        for code, device in enumerate(replay.by_code):
            live = int(by_device[code][position - 1]) if position and code in by_device else 0
            device.device.used = base[code] + live
        replay.start(lane)
        for code, device in enumerate(replay.by_code):
            live = int(by_device[code][position - 1]) if position and code in by_device else 0
            base[code] = device.device.used - live
            for allocator in device.allocators:
                started_at.setdefault(id(allocator), int(kept[position]))
    lanes_of = {id(allocator): lane for lane, allocator in enumerate(replay.lanes) if allocator is not None}
    for code, device in enumerate(replay.by_code):
        device.device.used = base[code]
        if any(type(allocator.pool) is not OnDemandPool for allocator in device.allocators):
            return None  # no room even for a CUDA context: the event loop knows that allocator
        if code in by_device and base[code] + int(by_device[code].max()) > device.device.capacity:
            return None  # the device may have run out: the event loop finds where
    positions_of = {lane: np.flatnonzero(lanes == lane) for lane in first_lanes.tolist()}
    for lane, positions in positions_of.items():
        allocator = replay.lanes[lane]
        assert allocator is not None and isinstance(allocator.pool, OnDemandPool)
        if int(np.cumsum(change[positions]).max()) > allocator.pool.bytes_limit:
            return None  # an allocation over the limit fails: the event loop finds which

    # every allocation fits: the figures
    for lane, positions in positions_of.items():
        allocator = replay.lanes[lane]
        assert allocator is not None
        pool = allocator.pool
        assert isinstance(pool, OnDemandPool)
        held = np.cumsum(change[positions])
        allocator.in_use = int(held[-1])
        allocator.peak_in_use = allocator.peak_held = max(allocator.peak_held, int(held.max()))
        allocator.took = allocator.took or int(rounded[positions[0]])
        _keep_live_buffers(
            allocator,
            pool,
            positions[(freed_at[positions] == events) & allocation[positions]],
            kept,
            pointers,
            sizes,
            rounded,
        )
    for source in {names[source] for _, _, source in (lane_keys[lane] for lane in positions_of)}:
        counts = replay.counts[source or "unknown"]
        mask = np.isin(lanes, [lane for lane in positions_of if names[lane_keys[lane][2]] == source])
        asked_live = np.cumsum(asked_change[mask])
        counts[:] = (
            counts[0] + int(np.count_nonzero(allocation & mask)),
            counts[1] + int(asked_live[-1]),
            max(counts[2], counts[1] + int(asked_live.max())),
        )
    for code, in_use in by_device.items():
        device = replay.by_code[code]
        on_device = devices == code
        peak_position = int(in_use.argmax())
        device.in_use = device.held = device.chunks = int(in_use[-1])
        device.device.used += int(in_use[-1])
        device.peak_in_use = device.peak_held = device.peak_chunks = int(in_use[peak_position])
        device.peak_event = int(kept[peak_position])
        device.fragmentation_at_peak = device.worst_fragmentation = device.sampled = 0.0
        device.worst_event = int(
            kept[int(on_device.argmax())]
        )  # its first allocation: the first moment it holds anything
        device.pending = False
        later_frees = np.flatnonzero(on_device[peak_position + 1 :] & ~allocation[peak_position + 1 :])
        upto = int(kept[peak_position + 1 + int(later_frees[0])]) if len(later_frees) else count
        pools = []
        for allocator in device.allocators:
            if started_at.get(id(allocator), count) > upto:
                continue  # started after the map was taken
            lane = lanes_of[id(allocator)]
            positions = positions_of.get(lane, np.zeros(0, dtype=np.int64))
            at_peak = positions[
                (positions <= peak_position) & (freed_at[positions] > peak_position) & allocation[positions]
            ]
            buffers = list(zip(rounded[at_peak].tolist(), kept[at_peak].tolist()))
            pools.append(PoolMap.on_demand(allocator.source, allocator.process, buffers))
        replay.snapshots[device.name] = MapSnapshot(device.name, device.peak_event, tuple(pools))
    return count - 1


def _keep_live_buffers(
    allocator: Any, pool: OnDemandPool, live: Any, kept: Any, pointers: Any, sizes: Any, rounded: Any
) -> None:
    """The buffers still live at the end, held by the pool and its device as the event loop leaves
    them (addresses from the device's bump pointer)."""
    device = pool.device
    lengths = rounded[live].tolist()
    start = device._next_address  # type: ignore[attr-defined]
    addresses = []
    for length in lengths:
        addresses.append(start)
        start += length
    device._next_address = start  # type: ignore[attr-defined]
    device._ranges.update(zip(addresses, lengths))  # type: ignore[attr-defined]
    asked = sizes[live].tolist()
    pool._held.update(zip(addresses, zip(lengths, asked)))
    allocator.handles.update(zip(pointers[live].tolist(), zip(addresses, kept[live].tolist())))
    pool.bytes_in_use = pool.bytes_reserved = sum(lengths)
    pool.requested_bytes_in_use = sum(asked)
