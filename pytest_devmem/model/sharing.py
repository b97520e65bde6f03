"""Several frameworks (or processes) on one device, simulated in the order they really allocate.

Each participant is one framework in one process, with its own allocation events (from the test's
trace, or a single peak). On one simulated device of the real capacity, in time order:

* a process's first event creates its CUDA context, which holds device memory of its own;
* a framework's first event creates its allocator: JAX (xla/pjrt/gpu/gpu_helpers.cc) sizes it at
  fraction x total memory and, when preallocating, reserves all of it at once; TensorFlow
  (tensorflow/core/common_runtime/gpu/gpu_device.cc) sizes it at the memory free *then* less its
  system reserve (MinSystemMemory, by compute capability; a reserve larger than what is free is
  ignored) or at a set limit, and takes it with its first allocation unless it grows;
* a reservation the device cannot give backs off by x0.9 (bfc_allocator.cc Extend) and the
  framework runs on with less: that is no failure;
* then every allocation and free, in order. A framework fails only when one of its allocations
  cannot be served, and the simulation stops there, as the process would.

When they do not fit, the settings users actually have (a lower JAX fraction, JAX without
preallocation or with the platform allocator, TensorFlow's allow_growth, TensorFlow off the GPU)
are simulated the same way, and only those that fit are offered. No pytest here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from .device import DEFAULT_COMPUTE_CAPABILITY, SimulatedDevice
from ..errors import OutOfMemoryError
from .pool import BFCPool, OnDemandPool, Policy
from .pool.base import Pool
from .pool.policy import DEFAULT_PREALLOC_FRACTION
from .trace import ALLOCATE, FREE, TraceEvent
from .regime import jax_fraction_variable
from ..units import format_size

MiB = 2**20
DEFAULT_CUDA_CONTEXT_BYTES = 512 * MiB
"""Device memory one process's CUDA context holds before any allocator takes a byte. It is about
0.3-0.6 GiB on current GPUs and drivers (kernels loaded, stacks, printf buffers; CUDA's lazy module
loading lowers it); set it with --devmem-cuda-context=SIZE to what nvidia-smi shows for an idle
process on your GPU."""


def tensorflow_system_reserve(available: int, compute_capability: int = DEFAULT_COMPUTE_CAPABILITY[0], environ: Mapping[str, str] | None = None) -> int:
    """The bytes TensorFlow leaves to the system (gpu_device.cc MinSystemMemory): 225 MiB below 2 GiB
    available, else 500, 1050, 1536 or 1800 MiB for compute capability up to 6, 7, 8, or above.
    TF_DEVICE_MIN_SYS_MEMORY_IN_MB overrides it."""
    override = (environ or {}).get("TF_DEVICE_MIN_SYS_MEMORY_IN_MB")
    if override:
        try:
            return max(0, int(override)) * MiB
        except ValueError:  # TensorFlow ignores an invalid value, with a warning
            pass
    if available < 2**31:
        return 225 * MiB
    for major, reserve in ((6, 500), (7, 1050), (8, 1536)):
        if compute_capability <= major:
            return reserve * MiB
    return 1800 * MiB


def tensorflow_memory_limit(available: int, compute_capability: int, environ: Mapping[str, str] | None = None) -> int:
    """TensorFlow's allocator limit when none is set (gpu_device.cc SingleVirtualDeviceMemoryLimit):
    what is free when its device is created, less the system reserve; a reserve that is not
    smaller than what is free is ignored, and TensorFlow takes everything."""
    reserve = tensorflow_system_reserve(available, compute_capability, environ)
    return available - reserve if reserve < available else available


@dataclass(frozen=True)
class FrameworkSetup:
    """How one framework (in one process) uses the device.

    `kind` is "jax" or "tensorflow". JAX modes: prealloc (with `fraction`), growth (capped at the
    fraction), ondemand. TensorFlow modes: default (free memory but the system reserve, taken with
    its first allocation), growth (the same limit, taken as needed), limit (`limit` bytes),
    ondemand (TF_GPU_ALLOCATOR=cuda_malloc_async).
    """

    kind: str
    mode: str
    fraction: float = DEFAULT_PREALLOC_FRACTION
    limit: int | None = None
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or ("JAX" if self.kind == "jax" else "TensorFlow")

    def describe(self) -> str:
        if self.kind == "jax":
            if self.mode == "prealloc":
                return f"prealloc, {jax_fraction_variable()}={self.fraction:g}"
            if self.mode == "ondemand":
                return "XLA_PYTHON_CLIENT_ALLOCATOR=platform"
            return "XLA_PYTHON_CLIENT_PREALLOCATE=false" + (f", fraction {self.fraction:g}" if self.fraction != DEFAULT_PREALLOC_FRACTION else "")
        if self.mode == "growth":
            return "TF_FORCE_GPU_ALLOW_GROWTH=true"
        if self.mode == "limit":
            return f"memory limit {format_size(self.limit or 0)}"
        if self.mode == "ondemand":
            return "TF_GPU_ALLOCATOR=cuda_malloc_async"
        return "default: all free memory but the system reserve"


def jax_setup_from_env(environ: Mapping[str, str], label: str = "") -> FrameworkSetup:
    """JAX's setup as its variables make it (jaxlib's generate_pjrt_gpu_plugin_options; default:
    preallocate 75%)."""
    fraction_text = environ.get("XLA_CLIENT_MEM_FRACTION") or environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    fraction = float(fraction_text) if fraction_text else DEFAULT_PREALLOC_FRACTION
    if environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() == "platform":
        return FrameworkSetup("jax", "ondemand", 1.0, label=label)
    if environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "") in ("false", "False", "0"):
        return FrameworkSetup("jax", "growth", fraction, label=label)  # still capped at the fraction
    return FrameworkSetup("jax", "prealloc", fraction, label=label)


def tensorflow_setup_from_env(environ: Mapping[str, str], limit: int | None = None, label: str = "") -> FrameworkSetup:
    """TensorFlow's setup: cuda_malloc_async, allow_growth (gpu_device.cc matches "true" exactly), a
    set limit when given, else its default."""
    if environ.get("TF_GPU_ALLOCATOR") == "cuda_malloc_async":
        return FrameworkSetup("tensorflow", "ondemand", limit=limit, label=label)
    if environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true":
        return FrameworkSetup("tensorflow", "growth", label=label)
    if limit is not None:
        return FrameworkSetup("tensorflow", "limit", limit=limit, label=label)
    return FrameworkSetup("tensorflow", "default", label=label)


@dataclass(frozen=True)
class Participant:
    """One framework in one process, with its allocation events in its own time order. Participants
    with the same `process` share one CUDA context."""

    setup: FrameworkSetup
    events: tuple[TraceEvent, ...]
    process: int = 0

    @classmethod
    def holding(cls, setup: FrameworkSetup, nbytes: int, process: int = 0, at: float = 0.0) -> Participant:
        """A participant whose whole work is `nbytes` allocated once at time `at` and held."""
        events = (TraceEvent(ALLOCATE, 1, nbytes, at, source=setup.kind),) if nbytes > 0 else ()
        return cls(setup, events, process)

    @property
    def start(self) -> float:
        return self.events[0].time if self.events else math.inf


@dataclass
class FrameworkOutcome:
    setup: FrameworkSetup
    started: bool = False
    limit: int = 0  # the allocator's size: what it may hold at most
    asked: int = 0  # its first region: what it tried to take at once
    reserved: int = 0  # what it held after its first allocation (less than asked where it backed off)
    peak: int = 0  # most bytes in use
    peak_pool: int = 0  # most bytes held from the device
    problem: str = ""  # empty when this framework fitted


@dataclass
class SharingVerdict:
    """Whether the frameworks fit together on the device, where one failed, and what would fix it."""

    capacity: int
    device: str
    outcomes: list[FrameworkOutcome]
    context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES
    processes: int = 1
    failed: str | None = None  # the name of the framework whose allocation failed
    fixes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.failed is None

    @property
    def order(self) -> list[str]:
        return [o.setup.name for o in self.outcomes if o.started]

    def _names(self) -> str:
        unique = list(dict.fromkeys(o.setup.name for o in self.outcomes))
        return " and ".join(unique) if len(unique) <= 2 else ", ".join(unique[:-1]) + " and " + unique[-1]

    def _framework_lines(self) -> list[str]:
        lines = [f"  started in this order: {', then '.join(self.order) or 'none'}; each process's CUDA context holds {format_size(self.context_bytes)} ({self.processes} process(es))"]
        for o in self.outcomes:
            if not o.started:
                lines.append(f"  {o.setup.name} ({o.setup.describe()}): allocated nothing")
                continue
            held = f"took {format_size(o.reserved)} at its first allocation" + (f" (asked {format_size(o.asked)}, backed off: the device had no more)" if o.asked > o.reserved else "")
            line = f"  {o.setup.name} ({o.setup.describe()}): limit {format_size(o.limit)}, {held}, peak in use {format_size(o.peak)}, held at most {format_size(o.peak_pool)}"
            lines.append(line + (f" -- {o.problem}" if o.problem else ""))
        return lines

    def message(self) -> str:
        device = f"{self.device} ({format_size(self.capacity)})"
        if self.fits:
            return "\n".join([f"{self._names()} fit together on {device}", *self._framework_lines()])
        fix = ", or ".join(self.fixes) if self.fixes else "no setting makes them fit: use a larger device, smaller batches, or run them one after the other"
        head = f"{self._names()} cannot share {device}: {self.failed} ran out of memory"
        return "\n".join([head, *self._framework_lines(), "  fix: " + fix])

    def real_oom_message(self) -> str:
        """For a real out-of-memory error on a GPU: the model's reservations, with every setting that
        gives the frameworks more room (the peaks measured were cut short by the failure)."""
        head = f"{self._names()} cannot share {self.device} ({format_size(self.capacity)}): a real out-of-memory error while both held memory"
        fixes = self.fixes or [
            f"lower {jax_fraction_variable()} (its reservation above is what TensorFlow cannot use)",
            "set XLA_PYTHON_CLIENT_PREALLOCATE=false",
            "set TF_FORCE_GPU_ALLOW_GROWTH=true",
            'hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU"))',
        ]
        return "\n".join([head, *self._framework_lines(), "  fix: " + ", or ".join(fixes)])

    def to_json(self) -> dict[str, object]:
        return {
            "fits": self.fits,
            "failed": self.failed,
            "capacity": self.capacity,
            "context_bytes": self.context_bytes,
            "order": self.order,
            "frameworks": [
                {"name": o.setup.name, "setup": o.setup.describe(), "limit": o.limit, "asked": o.asked, "reserved": o.reserved, "peak": o.peak, "peak_pool": o.peak_pool, "problem": o.problem}
                for o in self.outcomes
            ],
            "fixes": self.fixes,
        }


class _Simulation:
    """One run of the participants on one device, event by event."""

    def __init__(self, capacity: int, participants: Sequence[Participant], compute_capability: int, context_bytes: int, environ: Mapping[str, str]) -> None:
        self.device = SimulatedDevice(capacity)
        self.participants = participants
        self.compute_capability = compute_capability
        self.context_bytes = context_bytes
        self.environ = environ
        self.outcomes = [FrameworkOutcome(p.setup) for p in participants]
        self.pools: list[Pool | None] = [None] * len(participants)
        self.contexts: set[int] = set()
        self.failed: str | None = None

    def run(self) -> None:
        timeline = sorted(
            ((event.time, index, position, event) for index, p in enumerate(self.participants) for position, event in enumerate(p.events)),
            key=lambda item: item[:3],
        )
        handles: dict[tuple[int, int], int] = {}
        for _, index, _, event in timeline:
            if event.action == ALLOCATE:
                if not self._allocate(index, event, handles):
                    return
            elif event.action == FREE:
                handle = handles.pop((index, event.pointer), None)
                pool = self.pools[index]
                if handle is not None and pool is not None:
                    pool.free(handle)

    def _allocate(self, index: int, event: TraceEvent, handles: dict[tuple[int, int], int]) -> bool:
        outcome = self.outcomes[index]
        if not outcome.started and not self._start(index):
            return False
        pool = self.pools[index]
        assert pool is not None
        try:
            handles[(index, event.pointer)] = pool.alloc(event.size)
        except OutOfMemoryError as exc:
            figures = exc.figures
            others = sum(self._held(i) for i in range(len(self.participants)) if i != index)
            what = f" ({event.label})" if event.label else ""
            outcome.problem = (
                f"out of memory allocating {format_size(event.size)}{what}: its pool held {format_size(figures.pool_bytes)} "
                f"({format_size(figures.pool_bytes - figures.bytes_in_use)} of it free, largest free block {format_size(figures.largest_free_block)}) "
                f"under a {format_size(figures.bytes_limit)} limit; the other frameworks held {format_size(others)}; the device had {format_size(figures.device_free)} free"
            )
            self.failed = outcome.setup.name
            self._settle(index)
            return False
        if not outcome.reserved:  # its first allocation: what it took then
            outcome.reserved = self._held(index)
        self._settle(index)
        return True

    def _held(self, index: int) -> int:
        pool = self.pools[index]
        if pool is None:
            return 0
        stats = pool.stats()
        return int(stats["pool_bytes"]) or int(stats["bytes_reserved"])

    def _settle(self, index: int) -> None:
        pool = self.pools[index]
        if pool is not None:
            stats = pool.stats()
            outcome = self.outcomes[index]
            outcome.peak = max(outcome.peak, int(stats["peak_bytes_in_use"]))
            outcome.peak_pool = max(outcome.peak_pool, int(stats["peak_pool_bytes"]) or int(stats["peak_bytes_reserved"]))

    def _start(self, index: int) -> bool:
        """The process's CUDA context (once), then the framework's allocator, sized as it sizes it."""
        participant, outcome = self.participants[index], self.outcomes[index]
        outcome.started = True
        if participant.process not in self.contexts:
            self.contexts.add(participant.process)
            if self.context_bytes and self.device.try_allocate(self.context_bytes) is None:
                outcome.problem = f"could not create its process's CUDA context ({format_size(self.context_bytes)}): the device had {format_size(self.device.free_bytes())} free"
                self.failed = outcome.setup.name
                return False
        setup = participant.setup
        capacity = self.device.capacity
        pool: Pool
        if setup.kind == "jax":
            if setup.mode == "ondemand":
                pool = OnDemandPool(self.device, Policy.of("ondemand"))
            elif setup.mode == "growth":
                pool = BFCPool(self.device, Policy.of("growth", setup.fraction))
            else:
                bfc = BFCPool(self.device, Policy.of("prealloc", setup.fraction))
                outcome.asked = bfc.bytes_limit
                outcome.reserved = bfc.preallocate()  # at client creation; backs off when the device has less
                pool = bfc
            outcome.limit = int(pool.stats()["bytes_limit"]) if setup.mode != "ondemand" else int(capacity * setup.fraction)
        else:
            free = self.device.free_bytes()
            if setup.mode == "limit":
                limit = setup.limit or 0
            else:
                limit = tensorflow_memory_limit(free, self.compute_capability, self.environ)
            collect = self.environ.get("TF_ENABLE_GPU_GARBAGE_COLLECTION", "true") != "false"
            if setup.mode == "ondemand":
                pool = OnDemandPool(self.device, Policy.of("ondemand"))
                pool.bytes_limit = limit
            elif setup.mode == "growth":
                pool = BFCPool(self.device, Policy.of("growth", 1.0), bytes_limit=limit, release_free_regions=collect)
            else:
                bfc = BFCPool(self.device, Policy.of("fraction", 1.0), bytes_limit=limit, release_free_regions=collect)
                outcome.asked = bfc.bytes_limit  # the whole limit, taken by its first allocation
                pool = bfc
            outcome.limit = limit
        self.pools[index] = pool
        return True


def simulate(
    capacity: int,
    participants: Sequence[Participant],
    device: str = "",
    compute_capability: int = DEFAULT_COMPUTE_CAPABILITY[0],
    context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES,
    environ: Mapping[str, str] | None = None,
) -> SharingVerdict:
    """Run the participants on one device of `capacity` bytes, in the order their events happened."""
    simulation = _Simulation(capacity, participants, compute_capability, context_bytes, environ or {})
    simulation.run()
    in_start_order = sorted(range(len(participants)), key=lambda i: (not simulation.outcomes[i].started, participants[i].start, i))
    return SharingVerdict(
        capacity,
        device or simulation.device.name,
        [simulation.outcomes[i] for i in in_start_order],
        context_bytes,
        len({p.process for p in participants}),
        simulation.failed,
    )


def check_sharing(
    capacity: int,
    participants: Sequence[Participant],
    device: str = "",
    compute_capability: int = DEFAULT_COMPUTE_CAPABILITY[0],
    context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES,
    environ: Mapping[str, str] | None = None,
) -> SharingVerdict:
    """`simulate`, and when they do not fit, the settings (each simulated) that would make them fit."""
    verdict = simulate(capacity, participants, device, compute_capability, context_bytes, environ)
    if verdict.fits:
        return verdict

    def fits(candidate: Sequence[Participant]) -> bool:
        return simulate(capacity, candidate, device, compute_capability, context_bytes, environ).fits

    verdict.fixes = [description for description, alternative in _alternatives(participants, fits) if fits(alternative)]
    return verdict


def _changed(items: Sequence[Participant], indices: list[int], **changes: object) -> list[Participant]:
    """`items` with the setups at `indices` changed as given."""
    return [replace(p, setup=replace(p.setup, **changes)) if i in indices else p for i, p in enumerate(items)]  # type: ignore[arg-type]


def _alternatives(participants: Sequence[Participant], fits: Callable[[Sequence[Participant]], bool]) -> list[tuple[str, list[Participant]]]:
    """Each setting a user could change, as (what to set, the participants with it set)."""
    options: list[tuple[str, list[Participant]]] = []
    items = list(participants)
    fraction_variable = jax_fraction_variable()
    jax_prealloc = [i for i, p in enumerate(items) if p.setup.kind == "jax" and p.setup.mode == "prealloc"]
    tf_fixed = [i for i, p in enumerate(items) if p.setup.kind == "tensorflow" and p.setup.mode in ("default", "limit")]
    if jax_prealloc:
        top = max(items[i].setup.fraction for i in jax_prealloc)
        for hundredths in range(math.floor(top * 100) - 1, 0, -1):  # the largest fraction that fits
            candidate = _changed(items, jax_prealloc, fraction=hundredths / 100)
            if fits(candidate):
                per = " in each of the JAX processes" if len({items[i].process for i in jax_prealloc}) > 1 else ""
                options.append((f"set {fraction_variable}={hundredths / 100:.2f}{per}", candidate))
                break
        options.append(("set XLA_PYTHON_CLIENT_PREALLOCATE=false", _changed(items, jax_prealloc, mode="growth")))
        options.append(("set XLA_PYTHON_CLIENT_ALLOCATOR=platform", _changed(items, jax_prealloc, mode="ondemand")))
    if tf_fixed:
        options.append(("set TF_FORCE_GPU_ALLOW_GROWTH=true", _changed(items, tf_fixed, mode="growth")))
    if any(p.setup.kind == "tensorflow" for p in items):
        options.append(('hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU"))', [p for p in items if p.setup.kind != "tensorflow"]))
    return options


def process_shares(capacity: int, setup: FrameworkSetup, count: int, context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES) -> list[int]:
    """What each of `count` processes with the same setup holds once all have started, in start
    order (the worst case for the last): the later ones back off to what the earlier ones left."""
    participants = [Participant.holding(setup, 256, process=i, at=float(i)) for i in range(count)]
    simulation = _Simulation(capacity, participants, DEFAULT_COMPUTE_CAPABILITY[0], context_bytes, {})
    simulation.run()
    return [outcome.reserved for outcome in simulation.outcomes]
