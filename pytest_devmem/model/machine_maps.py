"""The pools' maps of a machine replay: a map of a device's pools as they are now, copies of them
taken every so many events (`Checkpoint`), maps owed at a moment and made at the end from the nearest
copy (`Promise`), and who held the memory in a map. No pytest, no frameworks here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .loops.inline_pools import sync
from .machine_results import MapSnapshot, PoolMap
from .pool import BFCPool, OnDemandPool
from .trace import Trace

if TYPE_CHECKING:
    from .machine import _Device


CHECKPOINT_SPACING_PER_ENTRY = 1 / 24
"""Copying an allocator entry (a chunk or a buffer) costs about 1/24 of replaying an event
through the pool's methods (measured): spacing = sqrt(events x entries / 24) balances the two."""


def copy_state(thing: Any) -> Any:
    """A copy of a pool or simulated device that shares nothing mutable with it: its dicts and lists
    copied (lists of lists a level down). The policy and lock are shared."""
    twin = object.__new__(type(thing))
    state = dict(vars(thing))
    for name, value in state.items():
        if type(value) is dict:
            state[name] = value.copy()
        elif type(value) is list:
            state[name] = [list(item) for item in value] if value and type(value[0]) is list else value.copy()
    vars(twin).update(state)
    return twin


class Checkpoint:
    """A device's allocators as they were right before event `upto`: copies of its simulated device,
    of each allocator's pool (drawing on that copy) and of its buffers."""

    __slots__ = ("upto", "device", "pools", "handles")

    def __init__(self, upto: int, device: Any, pools: list[Any], handles: list[dict[int, tuple[int, ...]]]) -> None:
        self.upto = upto
        self.device = device
        self.pools = pools
        self.handles = handles

    @classmethod
    def of(cls, device: _Device, upto: int) -> Checkpoint:
        checkpoint = cls(
            upto, device.device, [a.pool for a in device.allocators], [a.handles for a in device.allocators]
        ).copy()
        for allocator, pool, handles in zip(device.allocators, checkpoint.pools, checkpoint.handles):
            if allocator.inline:  # the copy's own maps of its buffers, for the replay since
                sync(pool, handles)
        return checkpoint

    def copy(self) -> Checkpoint:
        device = copy_state(self.device)
        copies: dict[int, Any] = {}  # a pool several allocators share (a TPU chip's runtime) is copied once
        for pool in self.pools:
            if id(pool) not in copies:
                copies[id(pool)] = copy_state(pool)
                copies[id(pool)].device = device
        pools = [copies[id(pool)] for pool in self.pools]
        return Checkpoint(self.upto, device, pools, [handles.copy() for handles in self.handles])


class Promise:
    """A map owed: the device's pools as they were right before event `upto`, named after `event`."""

    __slots__ = ("event", "upto", "checkpoint")

    def __init__(self, event: int, upto: int, checkpoint: Checkpoint) -> None:
        self.event = event
        self.upto = upto
        self.checkpoint = checkpoint


def snapshot_of(device: _Device, event: int) -> MapSnapshot:
    """The device's pools as they are now."""
    allocators = device.allocators
    for allocator in allocators:
        if allocator.inline:  # an inline loop is running it: its pool's maps are made afresh
            sync(allocator.pool, allocator.handles)
    return MapSnapshot(
        device.name,
        event,
        pool_maps([a.owner for a in allocators], [a.pool for a in allocators], [a.handles for a in allocators]),
    )


def pool_maps(
    owners: list[tuple[str, int]], pools: list[Any], buffers: list[dict[int, tuple[int, ...]]]
) -> tuple[PoolMap, ...]:
    """Each pool's regions and chunks, each chunk in use naming the event that allocated it; a pool
    several allocators share (a TPU chip's runtime: handles are its own, so none collide) once."""
    maps = []
    shared: dict[int, dict[int, int]] = {}
    for handles, pool in zip(buffers, pools):
        shared.setdefault(id(pool), {}).update((entry[0], entry[1]) for entry in handles.values())
    for (source, process), pool in zip(owners, pools):
        born = shared.pop(id(pool), None)
        if born is None:  # mapped with its first allocator
            continue
        if isinstance(pool, BFCPool):
            starts: dict[int, int] = {}
            chunks = []
            for region_start, address, size, in_use, _ in pool.chunks():
                region = starts.setdefault(region_start, len(starts))
                chunks.append(
                    (region, address - region_start, size, born.get(pool.handle_at(address), -1) if in_use else -1)
                )
            maps.append(PoolMap(source, process, tuple(size for _, size in pool.regions()), tuple(chunks)))
        elif isinstance(pool, OnDemandPool):  # each buffer its own allocation from the device
            ordered = sorted((pool.allocated_size(handle), index) for handle, index in born.items())
            maps.append(
                PoolMap(
                    source,
                    process,
                    tuple(size for size, _ in ordered),
                    tuple((i, 0, size, index) for i, (size, index) in enumerate(ordered)),
                )
            )
    return tuple(maps)


def contributor(source: str, label: str) -> str:
    """Who an allocation belongs to, for people: the executable or op and what for (`jit(layer)
    temp`), or the source where nothing more is known (`pool`, `tensorflow`)."""
    if label and source in ("jax", "tensorflow"):
        return label
    return source or "unknown"


TOP_CONTRIBUTORS = 5


def holders(snapshot: MapSnapshot | None, trace: Trace, top: int | None = TOP_CONTRIBUTORS) -> dict[str, int]:
    """The bytes (as asked) each contributor held in a snapshot, largest first."""
    if snapshot is None:
        return {}
    held: dict[str, int] = {}
    names = trace.names
    for pool in snapshot.pools:
        for _, _, _, index in pool.chunks:
            if index >= 0:
                name = contributor(names[trace.sources[index]], names[trace.labels[index]])
                held[name] = held.get(name, 0) + trace.sizes[index]
    ranked = sorted(held.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked if top is None else ranked[:top])
