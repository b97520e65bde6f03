"""The devices of a machine replay and their allocators, as the loops (`loops/`) read and write
them: each device (`DeviceState`) with its allocators (`AllocatorState`, one per process and
framework; which of those is a TPU chip's runtime allocator), and copies of a device taken for its
maps (`Checkpoint`, `Promise`). No pytest, no frameworks here."""

from __future__ import annotations

import math
from typing import Any

from ..device import SimulatedDevice
from ..frameworks import AllocatorSetup
from ..pool import BFCPool, OnDemandPool
from ..pool.chunk_table import SIZE_SHIFT, ChunkTable
from ..pool.compacting import CompactingPool
from ..tpu_devices import TPU_PLATFORM
from .maps import pool_maps
from .results import MapSnapshot, allocator_name


class AllocatorState:
    """One framework's allocator on one device, for one process: its pool, its buffers (trace
    pointer -> pool handle and the event that allocated it) and its figures so far."""

    __slots__ = (
        "source",
        "process",
        "setup",
        "pool",
        "bfc",
        "device",
        "handles",
        "limit",
        "asked",
        "took",
        "peak_held",
        "in_use",
        "peak_in_use",
        "counts",
        "runtime",
    )

    def __init__(
        self, source: str, process: int, setup: AllocatorSetup, device: DeviceState, counts: list[int]
    ) -> None:
        self.source = source
        self.runtime = False  # it allocates from its chip's TPU runtime allocator, which its process's sources share
        self.process = process
        self.setup = setup
        self.device = device
        self.pool: BFCPool | OnDemandPool | None = None
        self.bfc = False  # a BFC pool: a temporary freed at once leaves it as it was
        self.handles: dict[int, tuple[int, int]] = {}  # trace pointer -> (pool handle, event index)
        self.limit = self.asked = self.took = self.peak_held = 0
        self.in_use = self.peak_in_use = 0  # live data, each request rounded to 256 bytes
        self.counts = counts  # its source's [allocations, bytes asked and live, their peak], over all devices

    def held(self) -> int:
        pool = self.pool
        return 0 if pool is None else pool.pool_bytes + pool.bytes_reserved

    @property
    def name(self) -> str:
        return allocator_name(self.source, self.process)

    @property
    def owner(self) -> tuple[str, int]:
        """Whose pool this allocator draws on, as maps name it: its source's, or its chip's TPU runtime."""
        return (TPU_RUNTIME_NAME if self.runtime else self.source), self.process


TPU_RUNTIME_NAME = "TPU runtime"
"""The one allocator of a TPU chip, as records and maps name it."""


def _is_chip(name: str) -> bool:
    """Whether a device of the trace is a TPU chip (`tpu:N`, as JAX names one)."""
    return name.partition(":")[0] == TPU_PLATFORM


def is_runtime(setup: AllocatorSetup, name: str) -> bool:
    """Whether `setup`'s allocator on device `name` is the TPU runtime's: the defragmenting regime
    (`compact`, the TPU runtime's regime) on a TPU chip. A TPU chip has one HBM allocator, the
    runtime's, and every buffer of the process comes out of it: JAX's (JAX does not preallocate on
    a TPU and keeps no allocator of its own there, jax-ml/jax #9064) and those the devmem pool stands
    for. Its out-of-memory message names the chip's memory, not a framework's pool ("Could not
    allocate X bytes in memory ...HBM0; Y allocatable, Z available", jax-ml/jax #14304)."""
    return setup.mode == "compact" and _is_chip(name)


class DeviceState:
    """One device of the replay: its simulated memory, its allocators and CUDA contexts, and its
    figures so far (in use, held, peaks, fragmentation, the maps it owes)."""

    __slots__ = (
        "name",
        "code",
        "device",
        "allocators",
        "contexts",
        "in_use",
        "held",
        "chunks",
        "kept_before",
        "peak_in_use",
        "peak_held",
        "peak_chunks",
        "peak_event",
        "fragmentation_at_peak",
        "worst_fragmentation",
        "worst_event",
        "pending",
        "solo",
        "sampled",
        "fragmented",
        "mapped",
        "checkpoint",
        "stale",
        "runtime",
    )

    def __init__(self, name: str, code: int, capacity: int) -> None:
        self.name = name
        self.code = code
        self.device = SimulatedDevice(capacity, name=name)
        self.allocators: list[AllocatorState] = []
        self.contexts: set[int] = set()
        self.in_use = self.held = self.chunks = 0  # live data (rounded requests), held from the device, in chunks
        self.kept_before = 0  # live data from before the trace (a shared fixture's buffers): not the trace's
        self.peak_in_use = self.peak_held = self.peak_chunks = 0
        self.peak_event = -1
        self.fragmentation_at_peak: float | None = None
        self.worst_fragmentation: float | None = None
        self.worst_event: int | None = None
        self.pending = False  # its peak rose since the last snapshot
        self.solo: BFCPool | None = None  # its only pool, while it has one BFC pool: fragmentation computed inline
        self.sampled = 0.0  # its fragmentation after its last event (a temporary's allocation is no moment of its own)
        self.fragmented = False  # its worst fragmentation rose markedly at its last event: map it
        self.mapped = 0.0  # the fragmentation of its last map at its worst
        self.checkpoint: Checkpoint | None = None  # its allocators copied at a moment a map was asked for
        self.stale = True  # it gained an allocator since that copy
        self.runtime: dict[int, CompactingPool] = {}  # a TPU chip's runtime allocator, by process

    def fragmentation(self) -> float:
        """XLA's GetFragmentation over this device's pools: the free bytes outside each pool's largest
        free block, over all free bytes (for one pool, exactly XLA's (free - largest) / free; each
        allocator can only use its own pool, so two unfragmented pools give 0)."""
        free = stranded = 0
        for pool in {id(a.pool): a.pool for a in self.allocators}.values():  # a chip's runtime allocator once
            if isinstance(pool, BFCPool):
                pool_free = pool.pool_bytes - pool.bytes_in_use
                free += pool_free
                keys = pool.table.free  # its free chunks, the largest last (run per event: inline)
                stranded += pool_free - (keys[-1] >> SIZE_SHIFT if keys else 0)
        return stranded / free if free > 0 else 0.0


# -- maps of the pools, kept cheaply --------------------------------------------------------
#
# A device's map at its peak is due at the first free after each new peak, and a random walk of
# allocations sets thousands of peaks; building a map walks every chunk. So a map is only promised
# when it is due: the device's allocators are copied (dicts and lists, in C) at most every `spacing`
# events, and a map of a later moment is made at the end, for the last promise only, by replaying
# the device's events since the copy before it into a second copy. Copies then cost O(1) an event
# and the replays O(spacing) a device.

CHECKPOINT_SPACING_PER_ENTRY = 1 / 24
"""Copying an allocator entry (a chunk or a buffer) costs about 1/24 of replaying an event
through the pool's methods (measured): spacing = sqrt(events x entries / 24) balances the two."""


def copy_state(thing: Any) -> Any:
    """A copy of a pool or simulated device that shares nothing mutable with it: its dicts and lists
    copied (lists of lists a level down), and its chunk table. The policy and lock are shared."""
    twin = object.__new__(type(thing))
    state = dict(vars(thing))
    for name, value in state.items():
        if type(value) is dict:
            state[name] = value.copy()
        elif type(value) is ChunkTable:
            state[name] = value.copy()
        elif type(value) is list:
            state[name] = [list(item) for item in value] if value and type(value[0]) is list else value.copy()
    vars(twin).update(state)
    return twin


class Checkpoint:
    """A device's allocators as they were right before event `upto`: copies of its simulated device,
    of each allocator's pool (drawing on that copy) and of its buffers."""

    __slots__ = ("upto", "device", "pools", "handles")

    def __init__(self, upto: int, device: Any, pools: list[Any], handles: list[dict[int, tuple[int, int]]]) -> None:
        self.upto = upto
        self.device = device
        self.pools = pools
        self.handles = handles

    @classmethod
    def of(cls, device: DeviceState, upto: int) -> Checkpoint:
        return cls(
            upto, device.device, [a.pool for a in device.allocators], [a.handles for a in device.allocators]
        ).copy()

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


def snapshot_of(device: DeviceState, event: int) -> MapSnapshot:
    """The device's pools as they are now."""
    allocators = device.allocators
    return MapSnapshot(
        device.name,
        event,
        pool_maps([a.owner for a in allocators], [a.pool for a in allocators], [a.handles for a in allocators]),
    )


def device_order(name: str) -> tuple[str, int, str]:
    platform, _, ordinal = name.partition(":")
    return (platform, int(ordinal), name) if ordinal.isdigit() else (platform, math.inf, name)  # type: ignore[return-value]
