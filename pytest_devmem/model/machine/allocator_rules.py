"""How a machine replay's allocators start, by their frameworks' rules (`AllocatorRules`, which
`replay.py`'s `Machine` extends with the choice of loop), and what an allocation they could not
serve says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import OutOfMemoryError
from ..frameworks import AllocatorSetup, tensorflow_growth_pool, tensorflow_memory_limit
from ..pool import BFCPool, OnDemandPool, Policy
from ..pool.compacting import CompactingPool
from .device_state import AllocatorState, DeviceState, is_runtime
from .results import DEFAULT_SOURCE, MachineSpec, OutOfMemory, allocator_name


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
            if is_runtime(setup, device.name):  # no CUDA context on a TPU; one allocator per chip and process
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
        order.append(allocator_name(source, process))
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

    @staticmethod
    def _over_limit(allocator: AllocatorState, figures: Any, device: DeviceState) -> bool:
        """Whether the allocator's limit is what stops it: what it has in use and the request are over
        it, or its pool cannot take another region that large within it where the device has room
        (a growing pool's regions are whole: bfc_allocator.cc Extend takes at most the limit less
        what it holds)."""
        if figures.bytes_in_use + figures.rounded > allocator.limit:
            return True
        return figures.pool_bytes + figures.rounded > allocator.limit and device.device.free_bytes() >= figures.rounded

    def _limited_by_others(self, allocator: AllocatorState, needed: int, others: Mapping[str, int]) -> bool:
        """Whether `allocator`'s limit was too low for `needed` only because another tenant held the
        device when it started: TensorFlow's GPU allocator with no limit set takes what is free then,
        less its reserve (`tensorflow_memory_limit`), and would have had room for `needed` on the
        device alone (its process's CUDA context apart)."""
        setup = allocator.setup
        if setup.kind != "tensorflow" or setup.host or setup.limit is not None or setup.mode == "ondemand":
            return False
        if not any(not name.startswith("CUDA context") for name in others):
            return False
        alone = tensorflow_memory_limit(
            self.spec.capacity - (self.spec.context or 0), self.spec.compute_capability, self.spec.environ
        )
        return needed <= alone

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
        # live data, rounded as the pools round it, with what a shared fixture keeps there
        needed = device.in_use + device.kept_before + figures.rounded + contexts
        if needed > self.spec.capacity:
            kind = "capacity"
        elif figures.pool_bytes - figures.bytes_in_use >= figures.rounded:
            kind = "fragmentation"
        elif self._over_limit(allocator, figures, device) and not self._limited_by_others(
            allocator, figures.bytes_in_use + figures.rounded, others
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
            kept_before=device.kept_before,
        )
