"""Devices a pool draws memory from: a simulated one with a stated capacity, or a real CUDA GPU.

Both sit behind the small `Device` protocol, so the pool runs the same code path with or without a
GPU. A device hands out address ranges that never overlap and refuses (returns None) once its
capacity is spent, as `cuMemAlloc` does with CUDA_ERROR_OUT_OF_MEMORY.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import Protocol, runtime_checkable

from ..errors import DeviceError, InvalidFreeError, InvalidSettingError
from ..units import format_size, parse_size, round_up
from .tpu_targets import TPU_SPECS, TpuSpec, tpu_spec

DEFAULT_SIM_CAPACITY = 16 * 2**30
"""Capacity of the simulated device when none is given: 16 GiB, a common CI-class GPU size."""

DEVICE_ALIGNMENT = 256
"""Allocation granularity the devices honour; cudaMalloc guarantees 256-byte alignment."""

DEFAULT_COMPUTE_CAPABILITY = (8, 0)
"""A simulated device's CUDA compute capability when no preset names one: an A100's. TensorFlow's
system reserve depends on it (gpu_device.cc MinSystemMemory)."""

MiB_ = 2**20
PRESETS: dict[str, tuple[int, tuple[int, int]]] = {
    # name: (total memory as the driver reports it, compute capability), from the vendors' data sheets
    "H100-80GB": (81559 * MiB_, (9, 0)),
    "H200": (143771 * MiB_, (9, 0)),
    "A100-40GB": (40960 * MiB_, (8, 0)),
    "A100-80GB": (81920 * MiB_, (8, 0)),
    "L4": (23034 * MiB_, (8, 9)),
    "A10G": (23028 * MiB_, (8, 6)),
    "V100-16GB": (16384 * MiB_, (7, 0)),
    "T4": (15360 * MiB_, (7, 5)),
}
"""Simulated GPUs a user would name: `sim:H100-80GB`, `sim:T4`..."""


@runtime_checkable
class Device(Protocol):
    """What a pool needs from a device."""

    name: str
    capacity: int

    def try_allocate(self, nbytes: int) -> int | None:
        """Reserve `nbytes` and return its address, or None if the device has not that much free."""

    def free(self, address: int) -> None:
        """Give back a range returned by `try_allocate`."""

    def free_bytes(self) -> int:
        """Bytes the device could still hand out."""

    @property
    def device_class(self) -> str:
        """A stable label of what kind of device this is, for grouping measurements."""


class SimulatedDevice:
    """A device with a stated capacity and no hardware behind it.

    Addresses come from a bump pointer in a large virtual address space, so ranges never overlap
    and never need to be reused; capacity is enforced on bytes held, as physical memory is on a GPU.
    """

    BASE_ADDRESS = 0x7F00_0000_0000

    def __init__(
        self,
        capacity: int = DEFAULT_SIM_CAPACITY,
        name: str | None = None,
        compute_capability: tuple[int, int] = DEFAULT_COMPUTE_CAPABILITY,
        preset: str | None = None,
        tpu: TpuSpec | None = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise InvalidSettingError(
                f"invalid simulated device capacity {capacity!r}: must be a positive number of bytes"
            )
        self.capacity = capacity
        self.compute_capability = compute_capability
        self.preset = preset
        self.tpu = tpu  # the TPU generation a TPU preset stands for; None for a GPU
        self.name = name or (f"sim:{preset}" if preset else f"sim:{_compact_size(capacity)}")
        self.class_suffix = ""  # where its figures are not its own kind's (JAX sized by another compile)
        self._lock = threading.Lock()
        self._next_address = self.BASE_ADDRESS
        self._ranges: dict[int, int] = {}
        self.used = 0
        self.peak_used = 0

    @property
    def device_class(self) -> str:
        return (f"sim-{self.preset}" if self.preset else f"sim-{_compact_size(self.capacity)}") + self.class_suffix

    def try_allocate(self, nbytes: int) -> int | None:
        size = round_up(nbytes, DEVICE_ALIGNMENT)
        with self._lock:
            if size > self.capacity - self.used:
                return None
            address = self._next_address
            self._next_address += size
            self._ranges[address] = size
            self.used += size
            if self.used > self.peak_used:
                self.peak_used = self.used
            return address

    def free(self, address: int) -> None:
        with self._lock:
            size = self._ranges.pop(address, None)
            if size is None:
                raise InvalidFreeError(
                    f"{self.name}: address {address:#x} was not allocated on this device (or was already freed)"
                )
            self.used -= size

    def free_bytes(self) -> int:
        return self.capacity - self.used

    def __repr__(self) -> str:
        return f"SimulatedDevice({self.name}, used={format_size(self.used)})"


class CudaDriver(Protocol):
    """The few CUDA driver calls a CudaDevice makes; the real one is cuda_driver.LibCuda, tests may fake it."""

    def device_count(self) -> int: ...
    def device_name(self, index: int) -> str: ...
    def mem_get_info(self, index: int) -> tuple[int, int]: ...
    def mem_alloc(self, index: int, nbytes: int) -> int | None: ...
    def mem_free(self, index: int, address: int) -> None: ...


class CudaDevice:
    """GPU `index` through the CUDA driver: real allocations, real free/total figures.

    It remembers what it handed out, so a foreign free is refused here rather than crashing the
    driver, and `close()` returns everything still held.
    """

    def __init__(self, index: int = 0, driver: CudaDriver | None = None) -> None:
        if driver is None:
            from .cuda_driver import LibCuda

            driver = LibCuda()
        self.driver: CudaDriver = driver
        count = self.driver.device_count()
        if not 0 <= index < count:
            raise InvalidSettingError(f"invalid CUDA device cuda:{index}: this machine has {count} GPU(s)")
        self.index = index
        self.model = self.driver.device_name(index)
        self.capacity = self.driver.mem_get_info(index)[1]
        capability = getattr(self.driver, "compute_capability", None)
        self.compute_capability: tuple[int, int] = (
            capability(index) if capability is not None else DEFAULT_COMPUTE_CAPABILITY
        )
        uuid = getattr(self.driver, "device_uuid", None)
        self.uuid: str | None = uuid(index) if uuid is not None else None
        self.name = f"cuda:{index} ({self.model})"
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def device_class(self) -> str:
        return "cuda-" + re.sub(r"[^A-Za-z0-9]+", "-", self.model).strip("-")

    def try_allocate(self, nbytes: int) -> int | None:
        size = round_up(nbytes, DEVICE_ALIGNMENT)
        with self._lock:
            address = self.driver.mem_alloc(self.index, size)
            if address is not None:
                self._held[address] = size
            return address

    def free(self, address: int) -> None:
        with self._lock:
            if self._held.pop(address, None) is None:
                raise InvalidFreeError(
                    f"{self.name}: address {address:#x} was not allocated through this device (or was already freed)"
                )
            self.driver.mem_free(self.index, address)

    def free_bytes(self) -> int:
        return self.driver.mem_get_info(self.index)[0]

    @property
    def used(self) -> int:
        """Bytes this object holds on the GPU (not what other processes hold)."""
        return sum(self._held.values())

    def close(self) -> None:
        """Free everything still held; safe to call twice."""
        with self._lock:
            for address in list(self._held):
                self.driver.mem_free(self.index, address)
            self._held.clear()

    def __repr__(self) -> str:
        return f"CudaDevice({self.name}, capacity={format_size(self.capacity)})"


NVIDIA_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")
"""Where a loaded NVIDIA driver shows itself on Linux (/dev/dxg: WSL); without one, libcuda is not tried."""


def cuda_device_count() -> int:
    """Number of CUDA GPUs visible here; 0 where there is no driver or no GPU (always on macOS)."""
    if not sys.platform.startswith(("linux", "win32", "cygwin")):
        return 0  # NVIDIA ships no CUDA driver for macOS since CUDA 10.2
    if sys.platform.startswith("linux") and not any(os.path.exists(path) for path in NVIDIA_DRIVER_PATHS):
        return 0
    from .cuda_driver import LibCuda

    try:
        return LibCuda().device_count()
    except DeviceError:
        return 0


DEVICE_SPEC_HELP = (
    f"auto, sim, sim:SIZE (e.g. sim:16GiB), sim:PRESET ({', '.join(PRESETS)}, {', '.join(TPU_SPECS)}), cuda or cuda:N"
)


def open_device(spec: str = "auto") -> Device:
    """Build the device a spec names: `auto`, `sim`, `sim:SIZE`, `cuda`, `cuda:N`.

    `auto` takes GPU 0 where the CUDA driver sees one, else a simulated device of DEFAULT_SIM_CAPACITY.
    """
    text = spec.strip().lower() if isinstance(spec, str) else ""
    if text == "auto":
        return CudaDevice(0) if cuda_device_count() > 0 else SimulatedDevice()
    if text == "sim":
        return SimulatedDevice()
    if text.startswith("sim:"):
        tpu = tpu_spec(text)
        if tpu is not None:  # each JAX device is one TPU device with the HBM its compiler says is available
            return SimulatedDevice(tpu.usable_bytes, preset=tpu.preset, tpu=tpu)
        presets = {name.lower(): name for name in PRESETS}
        if text[4:] in presets:
            name = presets[text[4:]]
            capacity, capability = PRESETS[name]
            return SimulatedDevice(capacity, compute_capability=capability, preset=name)
        try:
            capacity = parse_size(spec.strip()[4:])
        except ValueError as exc:
            raise InvalidSettingError(
                f"invalid device {spec!r}: {exc}; or name a preset: {', '.join([*PRESETS, *TPU_SPECS])}"
            ) from None
        if capacity <= 0:
            raise InvalidSettingError(f"invalid device {spec!r}: the capacity must be more than 0 bytes")
        return SimulatedDevice(capacity)
    match = re.fullmatch(r"cuda(?::(\d+))?", text)
    if match:
        return CudaDevice(int(match.group(1) or 0))
    raise InvalidSettingError(f"invalid device {spec!r}: allowed are {DEVICE_SPEC_HELP}")


def _compact_size(nbytes: int) -> str:
    """`16GiB`-style label for a capacity, exact where the capacity is a whole number of a unit."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"
