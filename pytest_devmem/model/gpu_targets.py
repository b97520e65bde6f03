"""The simulated GPUs as XLA's compiler sees them: one `GpuSpec` per preset, written out as the
`GpuTargetConfigProto` text that XLA:GPU compiles against when no GPU is present.

XLA decides fusion, tiling, split-K and so its temporary buffers from these figures (SM count,
shared memory, registers, L2, bandwidth), so a compile for a target sizes buffers as that GPU's
compile would. Field names are those of `stream_executor.GpuTargetConfigProto` and
`GpuDeviceInfoProto` (xla/stream_executor/device_description.proto, as built into jaxlib 0.10's CUDA
plugin); the layout follows XLA's own specs in xla/tools/hlo_opt/gpu_specs/*.txtpb.

Per-SM limits come from the CUDA C++ Programming Guide's table of compute capabilities (threads,
shared memory, registers); SM counts, FP32 lanes per SM, L2, boost clock and bandwidth from each
GPU's data sheet; memory sizes are the presets' (`device.PRESETS`), so a compile for a preset sees
the capacity the simulated device has. Pure data: no framework is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InvalidSettingError
from .device import DEFAULT_SIM_CAPACITY, PRESETS

KiB = 2**10
MiB = 2**20


@dataclass(frozen=True)
class ComputeCapabilityLimits:
    """What the CUDA C++ Programming Guide ("Features and Technical Specifications") fixes per
    compute capability, whatever the board."""

    threads_per_sm: int
    shared_memory_per_sm: int  # the largest carve-out
    shared_memory_per_block_optin: int  # what a kernel may opt in to (cudaFuncAttributeMaxDynamicSharedMemorySize)


CAPABILITY_LIMITS: dict[tuple[int, int], ComputeCapabilityLimits] = {
    (7, 0): ComputeCapabilityLimits(2048, 96 * KiB, 96 * KiB),
    (7, 5): ComputeCapabilityLimits(1024, 64 * KiB, 64 * KiB),
    (8, 0): ComputeCapabilityLimits(2048, 164 * KiB, 163 * KiB),
    (8, 6): ComputeCapabilityLimits(1536, 100 * KiB, 99 * KiB),
    (8, 9): ComputeCapabilityLimits(1536, 100 * KiB, 99 * KiB),
    (9, 0): ComputeCapabilityLimits(2048, 228 * KiB, 227 * KiB),
}

THREADS_PER_BLOCK = 1024
THREADS_PER_WARP = 32
SHARED_MEMORY_PER_BLOCK = 48 * KiB  # without opt-in, every capability since 2.0
REGISTERS_PER_SM = 64 * KiB  # 32-bit registers, every capability since 5.0
REGISTERS_PER_BLOCK = 64 * KiB
BLOCK_DIM_LIMITS = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: what XLA:GPU needs to compile for it."""

    preset: str  # the name users type after `sim:`
    description: str  # the name the driver reports
    compute_capability: tuple[int, int]
    sm_count: int
    fp32_lanes_per_sm: int
    l2_cache_bytes: int
    boost_clock_ghz: float
    memory_bandwidth: int  # bytes per second
    memory_bytes: int

    @property
    def memory_per_device(self) -> int:
        """What one GPU of the target holds (as TpuSpec's)."""
        return self.memory_bytes

    @property
    def limits(self) -> ComputeCapabilityLimits:
        return CAPABILITY_LIMITS[self.compute_capability]

    def with_memory(self, memory_bytes: int) -> GpuSpec:
        """The same GPU with another memory size (a `sim:SIZE` device compiled for this model)."""
        if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int) or memory_bytes <= 0:
            raise InvalidSettingError(
                f"invalid memory size {memory_bytes!r} for {self.preset}: must be a positive number of bytes"
            )
        return replace(self, memory_bytes=memory_bytes)

    def target_config(self) -> str:
        """This GPU as `GpuTargetConfigProto` text (what `get_topology_desc(target_config=...)` reads)."""
        limits = self.limits
        major, minor = self.compute_capability
        capability = f"cuda_compute_capability {{ major: {major} minor: {minor} }}"
        fields: list[tuple[str, object]] = [
            ("threads_per_block_limit", THREADS_PER_BLOCK),
            ("threads_per_warp", THREADS_PER_WARP),
            ("shared_memory_per_block", SHARED_MEMORY_PER_BLOCK),
            ("shared_memory_per_core", limits.shared_memory_per_sm),
            ("threads_per_core_limit", limits.threads_per_sm),
            ("core_count", self.sm_count),
            ("fpus_per_core", self.fp32_lanes_per_sm),
            ("block_dim_limit_x", BLOCK_DIM_LIMITS[0]),
            ("block_dim_limit_y", BLOCK_DIM_LIMITS[1]),
            ("block_dim_limit_z", BLOCK_DIM_LIMITS[2]),
            ("memory_bandwidth", self.memory_bandwidth),
            ("l2_cache_size", self.l2_cache_bytes),
            ("clock_rate_ghz", self.boost_clock_ghz),
            ("device_memory_size", self.memory_bytes),
            ("shared_memory_per_block_optin", limits.shared_memory_per_block_optin),
            ("registers_per_core_limit", REGISTERS_PER_SM),
            ("registers_per_block_limit", REGISTERS_PER_BLOCK),
        ]
        lines = ["gpu_device_info {"]
        lines += [f"  {name}: {value}" for name, value in fields]
        lines += [f"  {capability}", "}", 'platform_name: "CUDA"', f'device_description_str: "{self.description}"']
        return "\n".join(lines) + "\n"


def _memory(preset: str) -> int:
    return PRESETS[preset][0]


def _spec(
    preset: str, description: str, sm_count: int, fp32_lanes: int, l2: int, clock: float, bandwidth_gb_s: float
) -> GpuSpec:
    return GpuSpec(
        preset=preset,
        description=description,
        compute_capability=PRESETS[preset][1],
        sm_count=sm_count,
        fp32_lanes_per_sm=fp32_lanes,
        l2_cache_bytes=l2,
        boost_clock_ghz=clock,
        memory_bandwidth=int(bandwidth_gb_s * 10**9),
        memory_bytes=_memory(preset),
    )


GPU_SPECS: dict[str, GpuSpec] = {
    spec.preset: spec
    for spec in (
        # preset, driver name, SMs, FP32 lanes/SM, L2, boost clock GHz, bandwidth GB/s (data sheets)
        _spec("H100-80GB", "NVIDIA H100 80GB HBM3", 132, 128, 50 * MiB, 1.98, 3352.32),
        _spec("H200", "NVIDIA H200", 132, 128, 50 * MiB, 1.98, 4800.0),
        _spec("A100-40GB", "NVIDIA A100-SXM4-40GB", 108, 64, 40 * MiB, 1.41, 1555.2),
        _spec("A100-80GB", "NVIDIA A100-SXM4-80GB", 108, 64, 40 * MiB, 1.41, 2039.04),
        _spec("L4", "NVIDIA L4", 58, 128, 48 * MiB, 2.04, 300.0),
        _spec("A10G", "NVIDIA A10G", 80, 128, 6 * MiB, 1.71, 600.0),
        _spec("V100-16GB", "Tesla V100-SXM2-16GB", 80, 64, 6 * MiB, 1.53, 898.048),
        _spec("T4", "Tesla T4", 40, 64, 4 * MiB, 1.59, 320.0),
    )
}
"""Every preset of `device.PRESETS`, as a GPU XLA can compile for."""

DEFAULT_TARGET = "A100-80GB"
"""The GPU a `sim:SIZE` device compiles for: an A100, the compute capability simulated devices take
when no preset names one (`device.DEFAULT_COMPUTE_CAPABILITY`), with the device's own memory size."""


def gpu_spec(preset: str | None, memory_bytes: int | None = None) -> GpuSpec:
    """The GPU to compile for: a preset by name (any case), or the default target with
    `memory_bytes` (a `sim:SIZE` device; DEFAULT_SIM_CAPACITY for `sim`)."""
    if preset is None:
        return GPU_SPECS[DEFAULT_TARGET].with_memory(memory_bytes or DEFAULT_SIM_CAPACITY)
    names = {name.lower(): name for name in GPU_SPECS}
    name = names.get(preset.strip().lower()) if isinstance(preset, str) else None
    if name is None:
        raise InvalidSettingError(f"unknown GPU {preset!r}: allowed are {', '.join(GPU_SPECS)}")
    spec = GPU_SPECS[name]
    return spec if memory_bytes is None else spec.with_memory(memory_bytes)
