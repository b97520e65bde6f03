"""The state of one machine replay, read and written by the loops (`loops/`), the maps and the
result: each device (`DeviceState`) with its allocators (`AllocatorState`, one per process and
framework), copies of a device taken for its maps (`Checkpoint`, `Promise`), and the replay itself
(`Replay`): its devices, its lanes (one allocator each: device, process, source) and what it found
so far. Also how the allocators start, by their frameworks' rules (`AllocatorRules`,
which `replay.py`'s `Machine` extends with the choice of loop). No pytest, no frameworks here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...errors import OutOfMemoryError
from ..device import SimulatedDevice
from ..frameworks import AllocatorSetup, tensorflow_growth_pool, tensorflow_memory_limit
from ..pool import BFCPool, OnDemandPool, Policy
from ..pool.chunk_table import SIZE_SHIFT, ChunkTable
from ..pool.compacting import CompactingPool
from ..tpu_devices import TPU_PLATFORM
from ..trace import Trace
from .maps import pool_maps
from .results import DEFAULT_SOURCE, FRAGMENTATION_STEP, MachineSpec, MapSnapshot, OutOfMemory, Timeline

# -- the devices and their allocators ---------------------------------------------------------


class AllocatorState:
    """One framework's allocator on one device, for one process: its pool, its buffers (trace
    pointer -> pool handle and the event that allocated it) and its figures so far."""

    __slots__ = (
        "source",
        "process",
        "setup",
        "pool",
        "bfc",
        "inline",
        "device",
        "handles",
        "limit",
        "asked",
        "took",
        "peak_held",
        "in_use",
        "peak_in_use",
        "counts",
        "dropped",
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
        self.inline = False  # an inline loop runs its BFC pool: handles also hold chunk id, size, rounded size; the pool's own are stale
        self.handles: dict[
            int, tuple[int, ...]
        ] = {}  # trace pointer -> (pool handle, event index[, chunk id, size, rounded])
        self.limit = self.asked = self.took = self.peak_held = 0
        self.in_use = self.peak_in_use = 0  # live data, each request rounded to 256 bytes
        self.counts = counts  # its source's [allocations, bytes asked and live, their peak], over all devices
        self.dropped: set[int] = (
            set()
        )  # pointers whose allocation failed and the replay went on: their frees are no error

    def held(self) -> int:
        pool = self.pool
        return 0 if pool is None else pool.pool_bytes + pool.bytes_reserved

    @property
    def name(self) -> str:
        return self.source if not self.process else f"{self.source} (process {self.process})"

    @property
    def owner(self) -> tuple[str, int]:
        """Whose pool this allocator draws on, as maps name it: its source's, or its chip's TPU runtime."""
        return (TPU_RUNTIME_NAME if self.runtime else self.source), self.process


TPU_RUNTIME_NAME = "TPU runtime"
"""The one allocator of a TPU chip, as records and maps name it."""


def _is_chip(name: str) -> bool:
    """Whether a device of the trace is a TPU chip (`tpu:N`, as JAX names one)."""
    return name.partition(":")[0] == TPU_PLATFORM


def _is_runtime(setup: AllocatorSetup, name: str) -> bool:
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
        "compared",
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
        self.compared = (
            False  # its fragmentation now is known not to exceed its worst (the loops may skip a sample then)
        )
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


def sync(pool: Any, handles: dict[int, tuple[int, ...]]) -> None:
    """The pool's own map of its buffers made from an inline loop's `handles` (each buffer as
    (address, event, chunk id, ...)), which the loop kept instead while it ran the pool's chunk table."""
    pool.set_buffers({entry[0]: entry[2] for entry in handles.values()})


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
    def of(cls, device: DeviceState, upto: int) -> Checkpoint:
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


def snapshot_of(device: DeviceState, event: int) -> MapSnapshot:
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


# -- the lanes ----------------------------------------------------------------------------------

LANES_BY_COLUMN_FROM = 20_000
"""Traces of this many events or more find their lanes by column (numpy), where numpy is installed."""


def _lanes_by_column(trace: Trace) -> tuple[list[tuple[int, int, int]], object] | None:
    try:
        from ..trace.by_column import lanes_by_column  # numpy: optional (the fast-traces and fast-model extras)
    except ImportError:
        return None
    return lanes_by_column(trace.devices, trace.processes, trace.sources)


def _take(codes: list[int], indices: Any) -> list[int]:
    """codes[i] for each i of `indices` (a numpy array), as a list."""
    import numpy as np  # numpy: optional (the fast-traces and fast-model extras)

    return np.asarray(codes, dtype=np.int64)[indices].tolist()  # type: ignore[no-any-return]


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
        runtime_lanes = [(d, p) for d, p, s in lane_keys if _is_runtime(machine._setup(names[s]), self.by_code[d].name)]
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
            started.device.compared = False
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


class AllocatorRules:
    """The machine `spec` describes, with `setups` by trace source: how a replay's allocators start
    (`replay.Machine` runs the replay over them)."""

    def __init__(self, spec: MachineSpec, setups: Mapping[str, AllocatorSetup]) -> None:
        self.spec = spec
        self.setups = dict(setups)

    def _setup(self, source: str) -> AllocatorSetup:
        return self.setups.get(source) or self.setups.get(DEFAULT_SOURCE) or AllocatorSetup(source, "prealloc")

    def is_bfc(self, source: str) -> bool:
        """Whether `source`'s allocators are BFC pools, plain or compacting (as `_pool` makes them)."""
        return self._setup(source).mode != "ondemand"

    def _start(
        self, source: str, process: int, used: list[DeviceState], counts: dict[str, list[int]], order: list[str]
    ) -> list[tuple[int, AllocatorState]]:
        """A framework's allocators on every device it uses, created at its first event: the
        process's context on each (once), then each allocator sized by its framework's rules."""
        setup = self._setup(source)
        shared = counts.setdefault(source or "unknown", [0, 0, 0])
        started = []
        for device in used:
            allocator = AllocatorState(source, process, setup, device, shared)
            device.allocators.append(allocator)
            context = True
            if _is_runtime(setup, device.name):  # no CUDA context on a TPU; one allocator per chip and process
                allocator.runtime = True
                runtime = device.runtime.get(process)
                if runtime is not None:  # another source of the process started it: this one draws on it too
                    allocator.pool, allocator.bfc, allocator.limit = runtime, True, runtime.bytes_limit
                    device.solo = runtime if all(a.pool is runtime for a in device.allocators[:-1]) else None
                    started.append((device.code, allocator))
                    continue
                context = False
            if process not in device.contexts and context:
                context = not self.spec.context or device.device.try_allocate(self.spec.context) is not None
                if context:
                    device.contexts.add(process)
            if context or allocator.runtime:
                pool = allocator.pool = self._pool(setup, device, allocator)
                if allocator.runtime:
                    device.runtime[process] = pool  # type: ignore[assignment]
            else:  # no room even for its CUDA context: the process cannot use the device at all
                pool = allocator.pool = BFCPool(device.device, Policy.of("growth", 1.0), bytes_limit=0)
            allocator.bfc = isinstance(pool, BFCPool)
            device.solo = pool if len(device.allocators) == 1 and isinstance(pool, BFCPool) else None
            held = allocator.held()
            allocator.took = held  # JAX's preallocation; the others take theirs with their first allocation
            allocator.peak_held = held
            device.held += held
            if device.held > device.peak_held:
                device.peak_held = device.held
            started.append((device.code, allocator))
        order.append(source if not process else f"{source} (process {process})")
        return started

    def _pool(self, setup: AllocatorSetup, device: DeviceState, allocator: AllocatorState) -> BFCPool | OnDemandPool:
        sim, capacity = device.device, self.spec.capacity
        if setup.kind == "tensorflow":
            if setup.mode == "limit" or (setup.mode == "growth" and setup.limit is not None):
                limit = setup.limit or 0  # a set limit (TensorFlow's CPU allocator states its own)
            else:
                limit = tensorflow_memory_limit(sim.free_bytes(), self.spec.compute_capability, self.spec.environ)
            allocator.limit = limit
            if setup.mode == "ondemand":
                on_demand = OnDemandPool(sim, Policy.of("ondemand"))
                on_demand.bytes_limit = limit
                return on_demand
            if setup.mode == "growth":
                return tensorflow_growth_pool(setup, sim, limit)
            allocator.asked = limit & ~255  # the whole limit, taken by its first allocation
            return BFCPool(sim, Policy.of("fraction", 1.0), bytes_limit=limit, release_free_regions=setup.collect)
        policy = setup.policy
        if setup.mode == "ondemand":
            allocator.limit = int(capacity * policy.fraction)
            return OnDemandPool(sim, policy)
        pool = CompactingPool(sim, policy) if setup.mode == "compact" else BFCPool(sim, policy)
        allocator.limit = pool.bytes_limit
        if policy.preallocates:
            allocator.asked = pool.bytes_limit
            pool.preallocate()  # at client creation; backs off when the device has less
        return pool

    def _out_of_memory(self, error: OutOfMemoryError, allocator: AllocatorState, index: int, label: str) -> OutOfMemory:
        figures, device = error.figures, allocator.device
        others = {
            other.name: other.held()
            for other in device.allocators
            if other.pool is not allocator.pool
            and other.held()  # the sources of a chip's runtime allocator are no tenants
        }
        contexts = len(device.contexts) * self.spec.context
        if contexts:
            others["CUDA context" + ("s" if len(device.contexts) > 1 else "")] = contexts
        pool = allocator.pool
        fragmentation = pool._fragmentation() if isinstance(pool, BFCPool) else 0.0
        needed = device.in_use + figures.rounded + contexts  # live data, rounded as the pools round it
        if needed > self.spec.capacity:
            kind = "capacity"
        elif figures.pool_bytes - figures.bytes_in_use >= figures.rounded:
            kind = "fragmentation"
        elif figures.bytes_in_use + figures.rounded > allocator.limit:
            kind = "limit"
        else:
            kind = "tenant"
        return OutOfMemory(
            event=index,
            device=device.name,
            source=allocator.source,
            process=allocator.process,
            label=label,
            requested=figures.requested,
            rounded=figures.rounded,
            in_use=figures.bytes_in_use,
            pool_bytes=figures.pool_bytes,
            largest_free_block=figures.largest_free_block,
            limit=allocator.limit,
            device_free=device.device.free_bytes(),
            capacity=self.spec.capacity,
            device_in_use=device.in_use,
            held_by_others=others,
            kind=kind,
            fragmentation=fragmentation,
        )


def device_order(name: str) -> tuple[str, int, str]:
    platform, _, ordinal = name.partition(":")
    return (platform, int(ordinal), name) if ordinal.isdigit() else (platform, math.inf, name)  # type: ignore[return-value]
