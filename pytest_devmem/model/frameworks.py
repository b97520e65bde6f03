"""How each framework's allocator takes device memory: its setup under a regime, and the sizing rules
of its source code. The machine model (`machine/`) creates one allocator per framework per device
with these rules. No pytest, no frameworks here.

* JAX (xla/pjrt/gpu/gpu_helpers.cc, CreateBFCAllocator): the allocator is sized at fraction x total
  memory; when preallocating it reserves all of it at client creation, on every device; without
  preallocation it grows in regions, still capped at fraction x total; `platform` allocates exactly.
* TensorFlow (tensorflow/core/common_runtime/gpu/gpu_device.cc, SingleVirtualDeviceMemoryLimit and
  MinSystemMemory): the allocator is sized when TensorFlow creates its devices, at the memory free
  *then* less a system reserve; by default its first allocation takes all of it; under
  TF_FORCE_GPU_ALLOW_GROWTH=true it grows; a virtual-device memory limit replaces the size;
  TF_GPU_ALLOCATOR=cuda_malloc_async allocates on demand. Its BFC allocator gives wholly free regions
  back before failing (garbage collection, on unless TF_ENABLE_GPU_GARBAGE_COLLECTION=false).
* The plugin's own `pool` (the `devmem` fixture) follows the regime's policy exactly.
* On a TPU chip under the TPU runtime's regime (`compact`), JAX and the pool have no allocators of
  their own: the chip has one, the runtime's, which they share (`tpu_runtime_description`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..units import format_size
from .device import DEFAULT_COMPUTE_CAPABILITY, Device
from .framework_rules import FRACTION_VARIABLE, RULES, display_name
from .pool.bfc import BFCPool
from .pool.policy import DEFAULT_PREALLOC_FRACTION, Mode, Policy

MiB = 2**20
DEFAULT_CUDA_CONTEXT_BYTES = 512 * MiB
"""Device memory one process's CUDA context holds before any allocator takes a byte: about
0.3-0.6 GiB on current GPUs and drivers (kernels loaded, stacks, printf buffers; CUDA's lazy module
loading lowers it). Set it with --devmem-cuda-context=SIZE to what nvidia-smi shows for an idle
process on your GPU."""
CONTEXT_SHARE_LIMIT = 8
"""A simulated device is never given a context larger than this fraction (1/8) of its capacity: a
device of a few hundred MiB stands for a GPU scaled down, and so does its context."""


def context_bytes_for(capacity: int, context_bytes: int | None = None) -> int:
    """The context one process holds on a device of `capacity`: as set, else the default capped at
    an eighth of the device."""
    if context_bytes is not None:
        return context_bytes
    return min(DEFAULT_CUDA_CONTEXT_BYTES, capacity // CONTEXT_SHARE_LIMIT)


@dataclass(frozen=True)
class AllocatorSetup:
    """How one framework's allocator uses a device.

    `kind` is the trace source it serves: "jax", "tensorflow" or "pool". JAX and pool modes:
    prealloc (with `fraction`), growth (capped at the fraction), ondemand, compact (prealloc whose
    allocator moves live buffers together when an allocation would otherwise fail, as TPU runtimes
    do). TensorFlow modes: default (free memory less the system reserve, taken with its first
    allocation), growth (the same limit, taken as needed), limit (`limit` bytes, taken at once),
    ondemand (cuda_malloc_async). `collect`: TensorFlow's BFC gives free regions back before failing.
    """

    kind: str
    mode: str
    fraction: float = DEFAULT_PREALLOC_FRACTION
    limit: int | None = None
    collect: bool = False
    host: bool = False  # TensorFlow's CPU allocator (its tensors on the host), not a device's

    @property
    def name(self) -> str:
        return display_name(self.kind) if self.kind else "allocator"

    @property
    def policy(self) -> Policy:
        """The pool policy a JAX-style allocator of this setup follows."""
        if self.mode == "ondemand":
            return Policy.of("ondemand")
        if self.mode == "growth":
            return Policy.of("growth", self.fraction)
        if self.mode == "compact":
            return Policy.of("compact", self.fraction)
        return Policy.of("prealloc", self.fraction)

    def describe(self, fraction_variable: str = FRACTION_VARIABLE) -> str:
        """The settings behind this setup, as a user would write them."""
        if self.kind == "tensorflow":
            if self.host:
                return f"its CPU allocator: BFC growing to at most {format_size(self.limit or 0)} ({TF_CPU_LIMIT_VARIABLE})"
            if self.mode == "growth":
                return "TF_FORCE_GPU_ALLOW_GROWTH=true"
            if self.mode == "limit":
                return f"memory limit {format_size(self.limit or 0)}"
            if self.mode == "ondemand":
                return "TF_GPU_ALLOCATOR=cuda_malloc_async"
            return "default: all free memory but the system reserve"
        if self.kind == "pool":
            return f"regime {self.policy.label}" + (" with compaction" if self.mode == "compact" else "")
        if self.mode == "ondemand":
            return "XLA_PYTHON_CLIENT_ALLOCATOR=platform"
        if self.mode == "growth":
            return "XLA_PYTHON_CLIENT_PREALLOCATE=false" + (
                f", {fraction_variable}={self.fraction:g}" if self.fraction != DEFAULT_PREALLOC_FRACTION else ""
            )
        text = f"preallocate, {fraction_variable}={self.fraction:g}"
        return text + (", with compaction" if self.mode == "compact" else "")


def setup_for_policy(kind: str, policy: Policy) -> AllocatorSetup:
    """A JAX-style allocator (JAX, the pool) under a regime's policy."""
    if policy.mode is Mode.ONDEMAND:
        return AllocatorSetup(kind, "ondemand", 1.0)
    if policy.mode is Mode.GROWTH:
        return AllocatorSetup(kind, "growth", policy.fraction)
    if policy.mode is Mode.COMPACT:
        return AllocatorSetup(kind, "compact", policy.fraction)
    return AllocatorSetup(kind, "prealloc", policy.fraction)


def tpu_runtime_description(sources: Iterable[str]) -> str:
    """The setup of a TPU chip's one allocator, the TPU runtime's, which every source of a process
    allocates from (the machine model gives a chip one under the `compact` regime): JAX does not
    preallocate on a TPU, and the runtime defragments HBM when an allocation does not fit
    (jax-ml/jax #9064)."""
    names = ", ".join(display_name(source) or "unknown" for source in sources)
    return f"the TPU runtime's: all usable HBM, defragmented when an allocation does not fit; used by {names}"


def tensorflow_fraction_limit(capacity: int, fraction: float) -> int:
    """TensorFlow's memory limit under a `fraction` regime, as the plugin sets it on a GPU: a logical
    device's `memory_limit`, which is whole MiB (plugin/environment.py, `LogicalDeviceConfiguration`)."""
    return int(capacity * fraction) // MiB * MiB


def tensorflow_setup(policy: Policy, capacity: int, environ: Mapping[str, str] | None = None) -> AllocatorSetup:
    """TensorFlow's allocator under a regime, where TensorFlow's own variables win (the plugin keeps
    a variable the user set): cuda_malloc_async, allow_growth (gpu_device.cc matches "true"
    exactly), else the regime's mapping (prealloc: its default; fraction: a memory limit of
    fraction x capacity, in whole MiB; growth; ondemand). The fraction's limit holds under
    allow_growth too: the plugin sets it on TensorFlow's devices whatever the variables say, and
    TensorFlow then grows up to it."""
    env = environ or {}
    collect = env.get("TF_ENABLE_GPU_GARBAGE_COLLECTION", "true") != "false"
    allocator, growth = env.get("TF_GPU_ALLOCATOR"), env.get("TF_FORCE_GPU_ALLOW_GROWTH")
    limit = tensorflow_fraction_limit(capacity, policy.fraction) if policy.mode is Mode.FRACTION else None
    if allocator == "cuda_malloc_async" or (allocator is None and growth is None and policy.mode is Mode.ONDEMAND):
        return AllocatorSetup("tensorflow", "ondemand", collect=collect)
    if growth == "true" or (growth is None and policy.mode is Mode.GROWTH):
        return AllocatorSetup("tensorflow", "growth", limit=limit, collect=collect)
    if limit is not None:
        return AllocatorSetup("tensorflow", "limit", limit=limit, collect=collect)
    return AllocatorSetup("tensorflow", "default", collect=collect)


TF_CPU_LIMIT_VARIABLE = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
DEFAULT_TF_CPU_LIMIT_MB = 1 << 16
"""TensorFlow's CPU BFC limit when the variable is not set: 64 GiB (process_state.cc)."""


def tensorflow_cpu_setup(environ: Mapping[str, str] | None = None) -> AllocatorSetup:
    """TensorFlow's CPU allocator under TF_CPU_ALLOCATOR_USE_BFC=true (ProcessState::GetCPUAllocator,
    tensorflow/core/common_runtime/process_state.cc): a BFC allocator with `allow_growth` always on,
    so its first region is 2 MiB (or the limit, if smaller) and regions double from there; its limit
    is TF_CPU_BFC_MEM_LIMIT_IN_MB x 2^20 (64 GiB when unset), not the memory free; and the other
    options keep their defaults: no garbage collection (free regions are never given back) and
    splitting at 128 MiB of waste. Where a GPU's allocator differs: XLA's preallocates the whole
    fraction unless told to grow, TensorFlow's takes the memory free less a system reserve, and
    TensorFlow's GPU allocator gives free regions back before failing."""
    value = (environ or {}).get(TF_CPU_LIMIT_VARIABLE)
    try:
        megabytes = int(value) if value is not None else DEFAULT_TF_CPU_LIMIT_MB
    except ValueError:  # TensorFlow logs the error and keeps its default
        megabytes = DEFAULT_TF_CPU_LIMIT_MB
    return AllocatorSetup("tensorflow", "growth", limit=megabytes * MiB, collect=False, host=True)


def tensorflow_growth_pool(setup: AllocatorSetup, device: Device, limit: int) -> BFCPool:
    """TensorFlow's BFC allocator growing under `limit` on `device` (allow_growth: its GPU allocator
    under TF_FORCE_GPU_ALLOW_GROWTH=true, its CPU allocator always)."""
    return BFCPool(device, Policy.of("growth", 1.0), bytes_limit=limit, release_free_regions=setup.collect)


def setups_for(
    policy: Policy, capacity: int, environ: Mapping[str, str] | None = None, *, tpu: bool = False
) -> dict[str, AllocatorSetup]:
    """Each trace source's allocator under a regime: JAX and the pool follow its policy, TensorFlow
    its own variables, then the regime. On a TPU (`tpu`) TensorFlow's tensors stay on the host
    (model/tpu_devices.py), where its allocator is its CPU allocator (`tensorflow_cpu_setup`): no
    GPU's system reserve, no regime of the chips."""
    return {rules.source: SETUPS[rules.source](policy, capacity, environ or {}, tpu) for rules in RULES}


SETUPS: dict[str, Callable[[Policy, int, Mapping[str, str], bool], AllocatorSetup]] = {
    "jax": lambda policy, capacity, environ, tpu: setup_for_policy("jax", policy),
    "pool": lambda policy, capacity, environ, tpu: setup_for_policy("pool", policy),
    "tensorflow": lambda policy, capacity, environ, tpu: (
        tensorflow_cpu_setup(environ) if tpu else tensorflow_setup(policy, capacity, environ)
    ),
}
"""Each framework's allocator under a regime (policy, device capacity, the process's environment,
whether the device is a TPU chip), by trace source: one per row of `framework_rules.RULES`."""


def tensorflow_system_reserve(
    available: int, compute_capability: int = DEFAULT_COMPUTE_CAPABILITY[0], environ: Mapping[str, str] | None = None
) -> int:
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


def tensorflow_memory_limit(
    available: int, compute_capability: int = DEFAULT_COMPUTE_CAPABILITY[0], environ: Mapping[str, str] | None = None
) -> int:
    """TensorFlow's allocator size when none is set (gpu_device.cc SingleVirtualDeviceMemoryLimit):
    what is free when its device is created, less the system reserve; a reserve that is not
    smaller than what is free is ignored, and TensorFlow takes everything."""
    reserve = tensorflow_system_reserve(available, compute_capability, environ)
    return available - reserve if reserve < available else available
