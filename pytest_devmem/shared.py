"""Several frameworks (or processes) on one device: will their reservations and peaks fit together?

Each framework gets its own BFC pool under its own regime on one simulated device of the real
capacity. The pools start in order (reserving what their regime reserves at start-up, backing off
as the BFC allocator does when the device has less), then each is charged its measured peak. When
that fails, the alternatives users actually have (a lower XLA_PYTHON_CLIENT_MEM_FRACTION, JAX without
preallocation or with the platform allocator, TF_FORCE_GPU_ALLOW_GROWTH=true, TensorFlow off the GPU)
are simulated the same way, and those that fit are offered as the fix. No pytest here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from .device import SimulatedDevice
from .errors import OutOfMemoryError
from .pool import BFCPool, OnDemandPool, Policy
from .pool.policy import DEFAULT_PREALLOC_FRACTION
from .units import format_size

MiB = 2**20
DEFAULT_COMPUTE_CAPABILITY = 8
"""Assumed CUDA compute capability (major) for TensorFlow's system reserve on a simulated device: A100-class."""


def tensorflow_system_reserve(available: int, compute_capability: int = DEFAULT_COMPUTE_CAPABILITY, environ: Mapping[str, str] | None = None) -> int:
    """The bytes TensorFlow leaves to the system when it sizes its GPU pool (its MinSystemMemory rule).

    TF_DEVICE_MIN_SYS_MEMORY_IN_MB overrides it; otherwise 225 MiB below 2 GiB available, else 500,
    1050, 1536 or 1800 MiB for compute capability up to 6, 7, 8, or above.
    """
    override = (environ or {}).get("TF_DEVICE_MIN_SYS_MEMORY_IN_MB")
    if override:
        return int(float(override) * MiB)
    if available < 2**31:
        return 225 * MiB
    for major, reserve in ((6, 500), (7, 1050), (8, 1536)):
        if compute_capability <= major:
            return reserve * MiB
    return 1800 * MiB


@dataclass(frozen=True)
class FrameworkSetup:
    """How one framework (in one process) uses the device.

    `kind` is "jax" or "tensorflow". JAX modes: prealloc (with `fraction`), growth, ondemand.
    TensorFlow modes: default (all free memory but the system reserve, taken at start-up), growth
    (the same limit, taken as needed), limit (`limit` bytes, taken at start-up).
    """

    kind: str
    mode: str
    fraction: float = DEFAULT_PREALLOC_FRACTION
    limit: int | None = None
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or ("JAX" if self.kind == "jax" else "TensorFlow")

    def describe(self, capacity: int) -> str:
        if self.kind == "jax":
            if self.mode == "prealloc":
                return f"prealloc, XLA_PYTHON_CLIENT_MEM_FRACTION={self.fraction:g}"
            if self.mode == "ondemand":
                return "XLA_PYTHON_CLIENT_ALLOCATOR=platform"
            return "XLA_PYTHON_CLIENT_PREALLOCATE=false" + (f", fraction {self.fraction:g}" if self.fraction < 1 else "")
        if self.mode == "growth":
            return "TF_FORCE_GPU_ALLOW_GROWTH=true"
        if self.mode == "limit":
            return f"memory limit {format_size(self.limit or 0)}"
        return "default: all free memory but the system reserve"


def jax_setup_from_env(environ: Mapping[str, str], label: str = "") -> FrameworkSetup:
    """JAX's setup as its XLA_PYTHON_CLIENT_* variables make it (defaults: preallocate 75%)."""
    fraction_text = environ.get("XLA_CLIENT_MEM_FRACTION") or environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    fraction = float(fraction_text) if fraction_text else DEFAULT_PREALLOC_FRACTION
    if environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() == "platform":
        return FrameworkSetup("jax", "ondemand", 1.0, label=label)
    if environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() in ("false", "0"):
        return FrameworkSetup("jax", "growth", fraction, label=label)  # still capped at the fraction (gpu_helpers.cc)
    return FrameworkSetup("jax", "prealloc", fraction, label=label)


def tensorflow_setup_from_env(environ: Mapping[str, str], limit: int | None = None, label: str = "") -> FrameworkSetup:
    """TensorFlow's setup: growth when TF_FORCE_GPU_ALLOW_GROWTH=true, a set limit when given, else default."""
    if environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true":  # gpu_device.cc matches "true" exactly
        return FrameworkSetup("tensorflow", "growth", label=label)
    if limit is not None:
        return FrameworkSetup("tensorflow", "limit", limit=limit, label=label)
    return FrameworkSetup("tensorflow", "default", label=label)


@dataclass
class FrameworkOutcome:
    setup: FrameworkSetup
    peak: int
    asked: int = 0
    reserved: int = 0
    problem: str = ""  # empty when this framework fitted


@dataclass
class SharingVerdict:
    """Whether the frameworks fit together on the device, where they failed, and what would fix it."""

    capacity: int
    device: str
    outcomes: list[FrameworkOutcome]
    phase: str | None = None  # "start-up" or "peak" where they do not fit
    fixes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.phase is None

    def _names(self) -> str:
        """'JAX and TensorFlow', or 'A, B and C' for more than two."""
        unique = list(dict.fromkeys(o.setup.name for o in self.outcomes))
        return " and ".join(unique) if len(unique) <= 2 else ", ".join(unique[:-1]) + " and " + unique[-1]

    def _framework_lines(self) -> list[str]:
        lines = []
        for o in self.outcomes:
            line = (
                f"  {o.setup.name} ({o.setup.describe(self.capacity)}): reserves {format_size(o.reserved)} at start-up"
                + (f" (asked {format_size(o.asked)})" if o.asked and o.asked != o.reserved else "")
                + f", peak {format_size(o.peak)}"
            )
            lines.append(line + (f" -- {o.problem}" if o.problem else ""))
        return lines

    def message(self) -> str:
        device = f"{self.device} ({format_size(self.capacity)})"
        if self.fits:
            return "\n".join([f"{self._names()} fit together on {device}", *self._framework_lines()])
        fix = ", or ".join(self.fixes) if self.fixes else "no setting makes them fit: use a larger device, smaller batches, or run them one after the other"
        head = f"{self._names()} cannot share {device}: out of memory at {self.phase}"
        return "\n".join([head, *self._framework_lines(), "  fix: " + fix])

    def real_oom_message(self) -> str:
        """For a real out-of-memory error on a GPU: the peaks measured were cut short by the failure, so
        the model's reservations are shown with every setting that gives the frameworks more room."""
        head = f"{self._names()} cannot share {self.device} ({format_size(self.capacity)}): a real out-of-memory error while both held memory"
        fixes = self.fixes or [
            "lower XLA_PYTHON_CLIENT_MEM_FRACTION (its reservation above is what TensorFlow cannot use)",
            "set XLA_PYTHON_CLIENT_PREALLOCATE=false",
            "set TF_FORCE_GPU_ALLOW_GROWTH=true",
            'hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU"))',
        ]
        return "\n".join([head, *self._framework_lines(), "  fix: " + ", or ".join(fixes)])

    def to_json(self) -> dict[str, object]:
        return {
            "fits": self.fits,
            "phase": self.phase,
            "capacity": self.capacity,
            "frameworks": [
                {"name": o.setup.name, "setup": o.setup.describe(self.capacity), "asked": o.asked, "reserved": o.reserved, "peak": o.peak, "problem": o.problem}
                for o in self.outcomes
            ],
            "fixes": self.fixes,
        }


def simulate(capacity: int, frameworks: Sequence[tuple[FrameworkSetup, int]], device: str = "", compute_capability: int = DEFAULT_COMPUTE_CAPABILITY, environ: Mapping[str, str] | None = None) -> SharingVerdict:
    """Start each framework's pool in order on one device, then charge each its peak."""
    shared = SimulatedDevice(capacity)
    verdict = SharingVerdict(capacity, device or shared.name, [])
    pools = []
    for setup, peak in frameworks:
        outcome = FrameworkOutcome(setup, peak)
        verdict.outcomes.append(outcome)
        pool = _start(shared, setup, outcome, compute_capability, environ)
        pools.append(pool)
        if outcome.problem and verdict.phase is None:
            verdict.phase = "start-up"
    if verdict.phase is None:
        for pool, outcome in zip(pools, verdict.outcomes):
            if pool is None or outcome.peak <= 0:
                continue
            try:
                pool.alloc(outcome.peak)
            except OutOfMemoryError as exc:
                f = exc.figures
                outcome.problem = f"out of memory at its peak: needs {format_size(outcome.peak)}, its pool can give {format_size(f.pool_free + max(0, min(f.device_free, f.bytes_limit - f.pool_bytes)))}"
                verdict.phase = verdict.phase or "peak"
    return verdict


def _start(device: SimulatedDevice, setup: FrameworkSetup, outcome: FrameworkOutcome, compute_capability: int, environ: Mapping[str, str] | None) -> BFCPool | OnDemandPool | None:
    """Create a framework's pool and make its start-up reservation; note a shortfall in `outcome`."""
    if setup.kind == "jax":
        if setup.mode == "ondemand":
            return OnDemandPool(device, Policy.of("ondemand"))
        if setup.mode == "growth":
            return BFCPool(device, Policy.of("growth", setup.fraction))
        pool = BFCPool(device, Policy.of("prealloc", setup.fraction))
        outcome.asked = pool.bytes_limit
        outcome.reserved = pool.preallocate()
        if outcome.reserved < outcome.asked:
            outcome.problem = f"could preallocate only {format_size(outcome.reserved)} of {format_size(outcome.asked)}: the device had no more free"
        return pool
    free = device.free_bytes()
    if setup.mode == "limit":
        limit = setup.limit or 0
    else:
        limit = free - tensorflow_system_reserve(free, compute_capability, environ)
        if limit <= 0:
            outcome.problem = f"found {format_size(free)} free, less than the {format_size(free - limit)} it leaves to the system"
            return None
    policy = Policy.of("growth", 1.0) if setup.mode == "growth" else Policy.of("fraction", 1.0)
    pool = BFCPool(device, policy, bytes_limit=limit)
    if setup.mode != "growth":
        outcome.asked = pool.bytes_limit
        outcome.reserved = pool.preallocate()
        if outcome.reserved < outcome.asked:
            outcome.problem = f"could reserve only {format_size(outcome.reserved)} of its {format_size(outcome.asked)} limit"
    return pool


def check_sharing(capacity: int, frameworks: Sequence[tuple[FrameworkSetup, int]], device: str = "", compute_capability: int = DEFAULT_COMPUTE_CAPABILITY, environ: Mapping[str, str] | None = None) -> SharingVerdict:
    """`simulate`, and when it does not fit, the settings (computed and simulated) that would make it fit."""
    verdict = simulate(capacity, frameworks, device, compute_capability, environ)
    if verdict.fits:
        return verdict

    def fits(candidate: Sequence[tuple[FrameworkSetup, int]]) -> bool:
        return simulate(capacity, candidate, device, compute_capability, environ).fits

    verdict.fixes = [description for description, alternative in _alternatives(frameworks, fits) if fits(alternative)]
    return verdict


Frameworks = list[tuple[FrameworkSetup, int]]


def _changed(items: Frameworks, indices: list[int], **changes: object) -> Frameworks:
    """`items` with the setups at `indices` changed as given."""
    return [(replace(setup, **changes), peak) if i in indices else (setup, peak) for i, (setup, peak) in enumerate(items)]  # type: ignore[arg-type]


def _alternatives(frameworks: Sequence[tuple[FrameworkSetup, int]], fits: Callable[[Sequence[tuple[FrameworkSetup, int]]], bool]) -> list[tuple[str, Frameworks]]:
    """Each setting a user could change, as (what to set, the frameworks with it set)."""
    options: list[tuple[str, Frameworks]] = []
    items = list(frameworks)
    jax_prealloc = [i for i, (s, _) in enumerate(items) if s.kind == "jax" and s.mode == "prealloc"]
    tf_fixed = [i for i, (s, _) in enumerate(items) if s.kind == "tensorflow" and s.mode != "growth"]
    if jax_prealloc:
        top = max(items[i][0].fraction for i in jax_prealloc)
        for hundredths in range(math.floor(top * 100) - 1, 0, -1):  # the largest fraction that fits
            candidate = _changed(items, jax_prealloc, fraction=hundredths / 100)
            if fits(candidate):
                per = " in each of the JAX processes" if len(jax_prealloc) > 1 else ""
                options.append((f"set XLA_PYTHON_CLIENT_MEM_FRACTION={hundredths / 100:.2f}{per}", candidate))
                break
        options.append(("set XLA_PYTHON_CLIENT_PREALLOCATE=false", _changed(items, jax_prealloc, mode="growth")))
        options.append(("set XLA_PYTHON_CLIENT_ALLOCATOR=platform", _changed(items, jax_prealloc, mode="ondemand")))
    if tf_fixed:
        options.append(("set TF_FORCE_GPU_ALLOW_GROWTH=true", _changed(items, tf_fixed, mode="growth")))
    if any(s.kind == "tensorflow" for s, _ in items):
        options.append(('hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU"))', [(s, p) for s, p in items if s.kind != "tensorflow"]))
    return options
