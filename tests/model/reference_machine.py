"""The model of the machine's replay as first written, kept as the yardstick of the fast replay:
a straightforward loop over the events, each pool call through the pool's methods, every map of the
pools built at the moment it is taken. The tests replay random traces through both and require
identical results."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import repeat

from pytest_devmem.errors import InvalidFreeError, OutOfMemoryError
from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.frameworks import AllocatorSetup, tensorflow_memory_limit
from pytest_devmem.model.machine import (
    DEFAULT_SOURCE,
    FRAGMENTATION_STEP,
    AllocatorFigures,
    DeviceFigures,
    MachineRun,
    MachineSpec,
    MapSnapshot,
    OutOfMemory,
    PoolMap,
    SourceFigures,
    Timeline,
    device_order,
    holders,
    lines_at_peak,
)
from pytest_devmem.model.pool import BFCPool, OnDemandPool, Policy
from pytest_devmem.model.pool.compacting import CompactingPool
from pytest_devmem.model.trace import ALLOCATE_CODE, FREE_CODE, Trace


class _Allocator:
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
    )

    def __init__(self, source: str, process: int, setup: AllocatorSetup, device: _Device, counts: list[int]) -> None:
        self.source = source
        self.process = process
        self.setup = setup
        self.device = device
        self.pool: BFCPool | OnDemandPool | None = None
        self.bfc = False
        self.handles: dict[int, tuple[int, int]] = {}  # trace pointer -> (pool handle, event index)
        self.limit = self.asked = self.took = self.peak_held = 0
        self.in_use = self.peak_in_use = 0  # live data, each request rounded to 256 bytes
        self.counts = counts  # its source's [allocations, bytes asked and live, their peak], over all devices

    def held(self) -> int:
        pool = self.pool
        return 0 if pool is None else pool.pool_bytes + pool.bytes_reserved

    @property
    def name(self) -> str:
        return self.source if not self.process else f"{self.source} (process {self.process})"


class _Device:
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
    )

    def __init__(self, name: str, code: int, capacity: int) -> None:
        self.name = name
        self.code = code
        self.device = SimulatedDevice(capacity, name=name)
        self.allocators: list[_Allocator] = []
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

    def fragmentation(self) -> float:
        """XLA's GetFragmentation over this device's pools: the free bytes outside each pool's largest
        free block, over all free bytes (for one pool, exactly XLA's (free - largest) / free; each
        allocator can only use its own pool, so two unfragmented pools give 0)."""
        free = stranded = 0
        for allocator in self.allocators:
            pool = allocator.pool
            if isinstance(pool, BFCPool):
                pool_free = pool.pool_bytes - pool.bytes_in_use
                free += pool_free
                stranded += pool_free - pool._largest_free_block()
        return stranded / free if free > 0 else 0.0


class ReferenceMachine:
    """The machine's replay loop as first written: every pool call through the pool's methods,
    every map built when it is taken."""

    def __init__(self, spec: MachineSpec, setups: Mapping[str, AllocatorSetup]) -> None:
        self.spec = spec
        self.setups = dict(setups)

    def run(self, trace: Trace, *, timeline: bool = False, stop_on_oom: bool = True) -> MachineRun:
        """Replay `trace`. With `timeline`, the figures after every event are kept for pictures;
        the figures themselves are the same either way."""
        spec, names = self.spec, trace.names
        device_name = {code: names[code] or spec.default_device for code in set(trace.devices)}
        devices: dict[str, _Device] = {}
        for name in sorted(set(device_name.values()), key=device_order):
            devices[name] = _Device(name, len(devices), spec.capacity)
        # a lane is one allocator: (device, process, source); each event names its lane
        one_lane = (
            len(set(trace.devices)) <= 1 and len(set(trace.processes)) <= 1 and len(set(trace.sources)) <= 1
        )  # sets of arrays: fast
        combinations = (
            {(trace.devices[0], trace.processes[0], trace.sources[0])}
            if one_lane and len(trace)
            else set(zip(trace.devices, trace.processes, trace.sources))
        )
        lane_keys = sorted({(devices[device_name[d]].code, p, s) for d, p, s in combinations})
        lane_index = {key: i for i, key in enumerate(lane_keys)}
        if len(lane_keys) <= 1:
            lane_codes: Iterable[int] = repeat(0, len(trace))
        else:
            code_of = {(d, p, s): lane_index[(devices[device_name[d]].code, p, s)] for d, p, s in combinations}
            lane_codes = [code_of[key] for key in zip(trace.devices, trace.processes, trace.sources)]
        by_code = list(devices.values())
        lanes: list[_Allocator | None] = [None] * len(lane_keys)
        counts: dict[str, list[int]] = {}
        order: list[str] = []
        recorded = Timeline(list(devices)) if timeline else None
        snapshots: dict[str, MapSnapshot] = {}
        fragmented: dict[str, MapSnapshot] = {}
        failure: MapSnapshot | None = None
        oom: OutOfMemory | None = None
        dropped: set[tuple[int, int]] = set()
        actions, pointers, sizes = trace.actions, trace.pointers, trace.sizes
        last = len(actions) - 1
        skip = False
        transient = False
        index = -1
        for index, (action, pointer, size, lane) in enumerate(zip(actions, pointers, sizes, lane_codes)):
            if skip:  # the free of a temporary handled with its allocation
                skip = False
                continue
            if action == 2:  # a recorded failure held nothing
                continue
            allocator = lanes[lane]
            if allocator is None:
                _, process, source = lane_keys[lane]
                for code, allocator in self._start(
                    names[source],
                    process,
                    [by_code[d] for d, p, s in lane_keys if p == process and s == source],
                    counts,
                    order,
                ):
                    lanes[lane_index[(code, process, source)]] = allocator
                allocator = lanes[lane]
                assert allocator is not None
            device = allocator.device
            pool = allocator.pool
            assert pool is not None
            rounded = (size + 255) & ~255
            if device.fragmented:  # the state after its last event is its most fragmented so far
                fragmented[device.name] = _snapshot(
                    device, device.worst_event if device.worst_event is not None else index - 1
                )
                device.fragmented = False
            if action == ALLOCATE_CODE:
                counts_ = allocator.counts
                counts_[0] += 1
                if counts_[1] + size > counts_[2]:
                    counts_[2] = counts_[1] + size
                transient = (
                    allocator.bfc
                    and index < last
                    and actions[index + 1] == FREE_CODE
                    and pointers[index + 1] == pointer
                    and device.in_use + rounded <= device.peak_in_use
                )
                if transient and recorded is None:
                    # a temporary freed by the very next event that sets no new peak: a BFC pool is left
                    # exactly as it was (split, then merged back), so only its peaks are kept
                    chunk = pool.best_fit(rounded)  # type: ignore[union-attr]
                    if chunk:
                        taken = device.chunks + pool.handed_out(rounded, chunk)  # type: ignore[union-attr]
                        if taken > device.peak_chunks:
                            device.peak_chunks = taken
                        if allocator.in_use + rounded > allocator.peak_in_use:
                            allocator.peak_in_use = allocator.in_use + rounded
                        skip, transient = True, False
                        continue
                in_use, held = pool.bytes_in_use, pool.pool_bytes + pool.bytes_reserved
                try:
                    handle = pool.alloc(size)
                except OutOfMemoryError as error:
                    counts_[0] -= 1
                    transient = False
                    if oom is None:
                        oom = self._out_of_memory(error, allocator, index, names[trace.labels[index]])
                        failure = _snapshot(device, index - 1)
                        if device.pending:  # nothing was freed there since its peak: the same state
                            snapshots[device.name] = MapSnapshot(device.name, device.peak_event, failure.pools)
                            device.pending = False
                    if stop_on_oom:
                        break
                    dropped.add((lane, pointer))
                    continue
                counts_[1] += size
                allocator.handles[pointer] = (handle, index)
                device.chunks += pool.bytes_in_use - in_use
                if device.chunks > device.peak_chunks:
                    device.peak_chunks = device.chunks
                grew = pool.pool_bytes + pool.bytes_reserved - held
                if grew:
                    device.held += grew
                    now_held = held + grew
                    if not allocator.took:
                        allocator.took = now_held
                    if now_held > allocator.peak_held:
                        allocator.peak_held = now_held
                    if device.held > device.peak_held:
                        device.peak_held = device.held
                allocator.in_use += rounded
                if allocator.in_use > allocator.peak_in_use:
                    allocator.peak_in_use = allocator.in_use
                device.in_use += rounded
                if device.in_use > device.peak_in_use:
                    device.peak_in_use = device.in_use
                    device.peak_event = index
                    device.pending = True
                    device.fragmentation_at_peak = device.fragmentation()
            elif action == FREE_CODE:
                if device.pending:  # its peak is the state right before this free
                    snapshots[device.name] = _snapshot(device, device.peak_event)
                    device.pending = False
                entry = allocator.handles.pop(pointer, None)
                if entry is None:
                    if (lane, pointer) in dropped:
                        dropped.discard((lane, pointer))
                        continue
                    raise InvalidFreeError(
                        f"trace event {index}: free of {pointer:#x}, which the trace never allocated on {device.name}"
                    )
                in_use, held = pool.bytes_in_use, pool.pool_bytes + pool.bytes_reserved
                pool.free(entry[0])
                device.chunks += pool.bytes_in_use - in_use
                device.held += pool.pool_bytes + pool.bytes_reserved - held
                rounded = (sizes[entry[1]] + 255) & ~255
                allocator.in_use -= rounded
                device.in_use -= rounded
                allocator.counts[1] -= sizes[entry[1]]
            if transient:  # sampled after its free instead, as when it is handled with its allocation
                transient = False
                fragmentation = device.sampled
            elif device.in_use:
                fragmentation = 0.0
                solo = device.solo
                if solo is not None:  # XLA's GetFragmentation of its one pool, inline: this runs per event
                    free = solo.pool_bytes - solo.bytes_in_use
                    if free > 0:
                        fragmentation = (free - solo._largest_free_block()) / free
                else:
                    fragmentation = device.fragmentation()
                device.sampled = fragmentation
                if device.worst_fragmentation is None or fragmentation > device.worst_fragmentation:
                    device.worst_fragmentation, device.worst_event = fragmentation, index
                    if (
                        fragmentation >= device.mapped + FRAGMENTATION_STEP
                    ):  # at most 1/FRAGMENTATION_STEP maps a device
                        device.fragmented, device.mapped = True, fragmentation
            else:
                fragmentation = device.sampled = 0.0
            if recorded is not None:
                recorded.devices.append(device.code)
                recorded.in_use.append(device.in_use)
                recorded.reserved.append(device.held)
                recorded.fragmentation.append(fragmentation)
        for device in devices.values():
            if device.pending:
                snapshots[device.name] = _snapshot(device, device.peak_event)
            if device.fragmented and oom is None:
                fragmented[device.name] = _snapshot(
                    device, device.worst_event if device.worst_event is not None else -1
                )
        figures = [_device_figures(device, snapshots.get(device.name), trace, spec) for device in devices.values()]
        by_source = {source: SourceFigures(c[0], c[2]) for source, c in sorted(counts.items()) if c[0]}
        replayed = index + 1 if oom is None or not stop_on_oom else oom.event
        return MachineRun(
            spec, len(trace), figures, order, oom, by_source, recorded, snapshots, failure, replayed, fragmented
        )

    # -- allocators ------------------------------------------------------------------------

    def _start(
        self, source: str, process: int, used: list[_Device], counts: dict[str, list[int]], order: list[str]
    ) -> list[tuple[int, _Allocator]]:
        """A framework's allocators on every device it uses, created at its first event: the
        process's context on each (once), then each allocator sized by its framework's rules."""
        setup = self.setups.get(source) or self.setups.get(DEFAULT_SOURCE) or AllocatorSetup(source, "prealloc")
        shared = counts.setdefault(source or "unknown", [0, 0, 0])
        started = []
        for device in used:
            allocator = _Allocator(source, process, setup, device, shared)
            device.allocators.append(allocator)
            context = True
            if process not in device.contexts:
                context = not self.spec.context or device.device.try_allocate(self.spec.context) is not None
                if context:
                    device.contexts.add(process)
            if context:
                pool = allocator.pool = self._pool(setup, device, allocator)
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

    def _pool(self, setup: AllocatorSetup, device: _Device, allocator: _Allocator) -> BFCPool | OnDemandPool:
        sim, capacity = device.device, self.spec.capacity
        if setup.kind == "tensorflow":
            if setup.mode == "limit" or (setup.mode == "growth" and setup.limit is not None):
                limit = setup.limit or 0  # the regime's fraction, under allow_growth too
            else:
                limit = tensorflow_memory_limit(sim.free_bytes(), self.spec.compute_capability, self.spec.environ)
            allocator.limit = limit
            if setup.mode == "ondemand":
                on_demand = OnDemandPool(sim, Policy.of("ondemand"))
                on_demand.bytes_limit = limit
                return on_demand
            if setup.mode == "growth":
                return BFCPool(sim, Policy.of("growth", 1.0), bytes_limit=limit, release_free_regions=setup.collect)
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

    def _out_of_memory(self, error: OutOfMemoryError, allocator: _Allocator, index: int, label: str) -> OutOfMemory:
        figures, device = error.figures, allocator.device
        others = {other.name: other.held() for other in device.allocators if other is not allocator and other.held()}
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
        elif (
            figures.bytes_in_use + figures.rounded > allocator.limit
            or (
                figures.pool_bytes + figures.rounded > allocator.limit and device.device.free_bytes() >= figures.rounded
            )
        ) and not (
            # TensorFlow's limit, taken from what was free, cut by another tenant: it fit alone
            allocator.setup.kind == "tensorflow"
            and allocator.setup.mode in ("default", "growth")
            and allocator.setup.limit is None
            and not allocator.setup.host
            and any(not name.startswith("CUDA context") for name in others)
            and figures.bytes_in_use + figures.rounded
            <= tensorflow_memory_limit(
                self.spec.capacity - (self.spec.context or 0), self.spec.compute_capability, self.spec.environ
            )
        ):
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


def _snapshot(device: _Device, event: int) -> MapSnapshot:
    """The device's pools as they are now: regions and chunks, each chunk in use naming the event
    that allocated it."""
    maps = []
    for allocator in device.allocators:
        pool = allocator.pool
        born = {handle: index for handle, index in allocator.handles.values()}
        if isinstance(pool, BFCPool):
            starts: dict[int, int] = {}
            chunks = []
            for region_start, address, size, in_use, _ in pool.chunks():
                region = starts.setdefault(region_start, len(starts))
                chunks.append(
                    (region, address - region_start, size, born.get(pool.handle_at(address), -1) if in_use else -1)
                )
            maps.append(
                PoolMap(allocator.source, allocator.process, tuple(size for _, size in pool.regions()), tuple(chunks))
            )
        elif isinstance(pool, OnDemandPool):  # each buffer its own allocation from the device
            buffers = sorted((pool.allocated_size(handle), index) for handle, index in born.items())
            maps.append(
                PoolMap(
                    allocator.source,
                    allocator.process,
                    tuple(size for size, _ in buffers),
                    tuple((i, 0, size, index) for i, (size, index) in enumerate(buffers)),
                )
            )
    return MapSnapshot(device.name, event, tuple(maps))


def _device_figures(device: _Device, snapshot: MapSnapshot | None, trace: Trace, spec: MachineSpec) -> DeviceFigures:
    allocators = tuple(
        AllocatorFigures(
            a.source,
            a.process,
            a.setup.describe(),
            a.limit,
            a.asked,
            a.took,
            a.peak_in_use,
            a.peak_held,
            getattr(a.pool, "moved_bytes", 0),
            getattr(a.pool, "compactions", 0),
        )
        for a in device.allocators
    )
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
