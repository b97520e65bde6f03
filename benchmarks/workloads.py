"""Generated allocation traces that stand for common device workloads. Seeded: the same trace every run."""

from __future__ import annotations

import random
from collections.abc import Callable

from pytest_devmem.model.trace import ALLOCATE, FREE, Trace, TraceEvent

KiB, MiB, GiB = 2**10, 2**20, 2**30


class _Builder:
    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self._next_pointer = 1

    def alloc(self, size: int) -> int:
        pointer = self._next_pointer
        self._next_pointer += 1
        self.events.append(TraceEvent(ALLOCATE, pointer, size))
        return pointer

    def free(self, pointer: int, size: int) -> None:
        self.events.append(TraceEvent(FREE, pointer, size))


def many_small_tensors(operations: int = 200_000, live_target: int = 4_000, seed: int = 1) -> Trace:
    """Scalars, biases and small activations: 64 B-64 KiB, log-uniform, freed in random order."""
    rng = random.Random(seed)
    b = _Builder()
    live: list[tuple[int, int]] = []
    while len(b.events) < operations:
        if live and (len(live) >= 2 * live_target or rng.random() < len(live) / (2 * live_target)):
            pointer, size = live.pop(rng.randrange(len(live)))
            b.free(pointer, size)
        else:
            size = int(2 ** rng.uniform(6, 16))
            live.append((b.alloc(size), size))
    for pointer, size in live:
        b.free(pointer, size)
    return Trace(b.events)


def mixed_small_and_huge(operations: int = 200_000, seed: int = 2) -> Trace:
    """Mostly small tensors, with now and then an embedding table or attention buffer of 64 MiB-1 GiB."""
    rng = random.Random(seed)
    b = _Builder()
    live: list[tuple[int, int]] = []
    while len(b.events) < operations:
        if live and rng.random() < 0.5:
            pointer, size = live.pop(rng.randrange(len(live)))
            b.free(pointer, size)
        elif rng.random() < 0.002:
            size = int(2 ** rng.uniform(26, 30))
            live.append((b.alloc(size), size))
        else:
            size = int(2 ** rng.uniform(8, 20))
            live.append((b.alloc(size), size))
        if sum(1 for _, s in live[-64:] if s >= 64 * MiB) > 4:  # keep the huge ones from piling up
            big = next(i for i, (_, s) in enumerate(live) if s >= 64 * MiB)
            pointer, size = live.pop(big)
            b.free(pointer, size)
    for pointer, size in live:
        b.free(pointer, size)
    return Trace(b.events)


def training_loop(steps: int = 400, layers: int = 48, seed: int = 3) -> Trace:
    """A model's training steps: weights and optimizer state once, then per step a forward pass that keeps
    each layer's activations (and frees small temporaries at once), a backward pass that frees the
    activations in reverse while producing gradients, and an update that frees the gradients."""
    rng = random.Random(seed)
    b = _Builder()
    widths = [rng.choice([1, 2, 4, 8]) * MiB + rng.randrange(0, 256 * KiB, 256) for _ in range(layers)]
    for width in widths:  # weights and two Adam moments
        for _ in range(3):
            b.alloc(width)
    batch_activation = [rng.choice([2, 4, 6, 8]) * MiB + rng.randrange(0, MiB, 512) for _ in range(layers)]
    while len(b.events) < steps * layers * 6:
        activations = []
        for size in batch_activation:
            temporary = b.alloc(size // 4 + 256)
            activations.append((b.alloc(size), size))
            b.free(temporary, size // 4 + 256)
        gradients = []
        for (pointer, size), width in zip(reversed(activations), reversed(widths)):
            gradient = b.alloc(width)
            upstream = b.alloc(size)
            b.free(pointer, size)
            b.free(upstream, size)
            gradients.append((gradient, width))
        for pointer, width in gradients:
            b.free(pointer, width)
    return Trace(b.events)


WORKLOADS: dict[str, Callable[[], Trace]] = {
    "many-small": many_small_tensors,
    "mixed-small-huge": mixed_small_and_huge,
    "training-loop": training_loop,
}


def jax_step_loop(steps: int = 100_000, seed: int = 4) -> Trace:
    """A loop of jitted steps, as JAX runs one: the parameters once, then per step the step's output
    allocated, its temporary allocated and freed at once, and the previous step's output freed."""
    rng = random.Random(seed)
    events = [TraceEvent(ALLOCATE, 1, 64 * MiB, source="jax", label="params")]
    output_size = 16 * KiB
    previous, pointer = 0, 1
    while len(events) < 3 * steps:
        pointer += 1
        events.append(TraceEvent(ALLOCATE, pointer, output_size, source="jax", label="jit(step)"))
        temporary = pointer + 1
        size = rng.choice([4, 8, 12]) * KiB
        events.append(TraceEvent(ALLOCATE, temporary, size, source="jax", label="jit(step) temp"))
        events.append(TraceEvent(FREE, temporary, size, source="jax", label="jit(step) temp"))
        if previous:
            events.append(TraceEvent(FREE, previous, output_size, source="jax", label="jit(step)"))
        previous, pointer = pointer, temporary
    return Trace(events)


def sharded_step_loop(steps: int = 40_000, devices: int = 4, seed: int = 5) -> Trace:
    """A data-parallel JAX loop over several devices, as the JAX capture records one: per step the
    output's shard on each device, the executable's temporary allocated and freed at once (on the
    first device), and the previous output's shards freed; a TensorFlow input pipeline hands over
    a batch on the first device now and then. Several devices, several allocators on the first,
    and a lane that changes at every event."""
    rng = random.Random(seed)
    names = [f"gpu:{d}" for d in range(devices)]
    events = [
        TraceEvent(ALLOCATE, 1 + d, 32 * MiB, source="jax", label="params", device=name) for d, name in enumerate(names)
    ]
    pointer, previous, previous_size, batch = devices, 0, 0, 0
    while len(events) < steps * (2 * devices + 2):
        if rng.random() < 0.3:  # the input pipeline's next batch
            pointer += 1
            if batch:
                events.append(
                    TraceEvent(FREE, batch, 256 * KiB, source="tensorflow", label="IteratorGetNext", device=names[0])
                )
            batch = pointer
            events.append(
                TraceEvent(ALLOCATE, batch, 256 * KiB, source="tensorflow", label="IteratorGetNext", device=names[0])
            )
        output = pointer + 1
        size = rng.choice([48, 64, 80]) * KiB
        events.extend(
            TraceEvent(ALLOCATE, output + d, size, source="jax", label="jit(step)", device=name)
            for d, name in enumerate(names)
        )
        temporary = output + devices
        temp_size = rng.choice([16, 32, 48]) * KiB
        events.append(TraceEvent(ALLOCATE, temporary, temp_size, source="jax", label="jit(step) temp", device=names[0]))
        events.append(TraceEvent(FREE, temporary, temp_size, source="jax", label="jit(step) temp", device=names[0]))
        if previous:
            freed = previous_size
            events.extend(
                TraceEvent(FREE, previous + d, freed, source="jax", label="jit(step)", device=name)
                for d, name in enumerate(names)
            )
        previous, previous_size, pointer = output, size, temporary
    return Trace(events)


MACHINE_WORKLOADS: dict[str, Callable[[], Trace]] = {
    "jax-step-loop": jax_step_loop,
    **WORKLOADS,
    "sharded-steps": sharded_step_loop,
}
"""Traces for the model of the machine: the pool's workloads (one allocator on one device), a JAX
step loop, and a sharded loop over four devices with two frameworks."""
