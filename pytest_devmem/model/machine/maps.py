"""The pools' maps of a machine replay: each pool's regions and chunks as plain data, and who held the
memory in a map. The copies the maps are made from (`Checkpoint`, `Promise`) are the replay's state
(`state.py`). No pytest, no frameworks here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..buffers import TOP_LINES
from ..pool import BFCPool, OnDemandPool
from ..trace import START_CODE, Trace
from .results import MapSnapshot, PoolMap


def pool_maps(
    owners: list[tuple[str, int]], pools: list[Any], buffers: list[dict[int, tuple[int, int]]]
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
            maps.append(PoolMap.on_demand(source, process, [(pool.allocated_size(h), i) for h, i in born.items()]))
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
    for name, index in _held(snapshot, trace):
        held[name] = held.get(name, 0) + trace.sizes[index]
    ranked = sorted(held.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked if top is None else ranked[:top])


def lines_at_peak(
    snapshot: MapSnapshot | None, trace: Trace, names: Iterable[str], top: int = TOP_LINES
) -> dict[str, dict[str, int]]:
    """For each contributor of `names` (the peak's holders): the bytes (as asked) held in a snapshot
    by the buffers each user's line made (the trace's sites; "" where the line is not known),
    largest first. Empty where no event of the trace names a line."""
    if snapshot is None or not trace.has_sites():
        return {}
    wanted = set(names)
    held: dict[str, dict[str, int]] = {}
    for name, index in _held(snapshot, trace):
        if name in wanted:
            lines = held.setdefault(name, {})
            site = trace.names[trace.sites[index]]
            lines[site] = lines.get(site, 0) + trace.sizes[index]
    return {
        name: dict(sorted(lines.items(), key=lambda item: (-item[1], item[0]))[:top])
        for name, lines in sorted(held.items())
    }


def _held(snapshot: MapSnapshot, trace: Trace) -> Iterator[tuple[str, int]]:
    """Each buffer of the trace's live in `snapshot`: its contributor and the event that allocated
    it (what a `start` holds, a shared fixture's, is no contributor of the trace's)."""
    names, actions = trace.names, trace.actions
    for pool in snapshot.pools:
        for _, _, _, index in pool.chunks:
            if index >= 0 and actions[index] != START_CODE:
                yield contributor(names[trace.sources[index]], names[trace.labels[index]]), index
