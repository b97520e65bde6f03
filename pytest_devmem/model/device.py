"""Devices a pool draws memory from: the `Device` protocol, and a simulated device with a stated capacity.

A real CUDA GPU (`hardware/devices.py`) sits behind the same protocol, so the pool runs the same code path
with or without a GPU. A device hands out address ranges that never overlap and refuses (returns None) once its
capacity is spent, as `cuMemAlloc` does with CUDA_ERROR_OUT_OF_MEMORY.
"""

from __future__ import annotations

import enum
import re
import threading
from typing import Protocol, runtime_checkable

from ..errors import InvalidFreeError, InvalidSettingError
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


class DeviceKind(enum.Enum):
    """What a session's device is, decided once where it is built; every rule that differs by kind
    reads it here, never by probing the device's attributes."""

    SIMULATED = "simulated"
    """A stated capacity (`sim`, `sim:16GiB`): JAX's and TensorFlow's CPU devices stand in."""
    SIMULATED_GPU = "simulated GPU"
    """A GPU preset (`sim:H100-80GB`): its driver's total and compute capability; CPU devices stand in."""
    SIMULATED_TPU = "simulated TPU"
    """A TPU preset (`sim:TPU-v5e`): each CPU device stands for one chip, named `tpu:N`."""
    CUDA = "CUDA GPU"
    """A real GPU through its driver: the frameworks' own devices are the GPUs."""

    @property
    def simulated(self) -> bool:
        return self is not DeviceKind.CUDA

    @property
    def platform(self) -> str:
        """The platform the trace names the session's devices by (`gpu:0`, `tpu:0`, `cpu:0`)."""
        return {DeviceKind.CUDA: "gpu", DeviceKind.SIMULATED_TPU: "tpu"}.get(self, "cpu")


@runtime_checkable
class Device(Protocol):
    """What a pool needs from a device, and what the session reads of it: its kind, the GPU index
    (a real GPU's; None elsewhere), compute capability, the TPU generation (a TPU preset's), the
    suffix a class gets where the figures are not the device's own kind's."""

    name: str
    capacity: int
    kind: DeviceKind
    compute_capability: tuple[int, int]
    class_suffix: str

    @property
    def index(self) -> int | None: ...

    @property
    def tpu(self) -> TpuSpec | None: ...

    @property
    def preset(self) -> str | None: ...

    @property
    def uuid(self) -> str | None:
        """A real GPU's driver UUID (NVML finds the same GPU by it); None elsewhere."""

    def try_allocate(self, nbytes: int) -> int | None:
        """Reserve `nbytes` and return its address, or None if the device has not that much free."""

    def free(self, address: int) -> None:
        """Give back a range returned by `try_allocate`."""

    def free_bytes(self) -> int:
        """Bytes the device could still hand out."""

    @property
    def device_class(self) -> str:
        """A stable label of what kind of device this is, for grouping measurements."""

    def close(self) -> None:
        """Give back what the device still holds (a real GPU's allocations); safe to call twice."""


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
        self.kind = (
            DeviceKind.SIMULATED_TPU
            if tpu is not None
            else DeviceKind.SIMULATED_GPU
            if preset
            else DeviceKind.SIMULATED
        )
        self.index: int | None = None  # no GPU behind it
        self.uuid: str | None = None
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

    def close(self) -> None:
        """Nothing to give back: no hardware behind it."""

    def __repr__(self) -> str:
        return f"SimulatedDevice({self.name}, used={format_size(self.used)})"


DEVICE_SPEC_HELP = (
    f"auto, sim, sim:SIZE (e.g. sim:16GiB), sim:PRESET ({', '.join(PRESETS)}, {', '.join(TPU_SPECS)}), cuda or cuda:N"
)
"""Every device a session may name (`--devmem-device`); `auto` and `cuda:N` are opened by `hardware/`."""


MAX_SIMULATED_CAPACITY = 256 * 2**40
"""The largest `sim:SIZE`: far beyond any device, and well inside the 64-bit addresses the pool hands
out from its base (a larger one failed deep in the replay, as an INTERNALERROR)."""


def open_simulated(spec: str = "sim") -> SimulatedDevice:
    """Build the simulated device a spec names: `sim`, `sim:SIZE`, `sim:PRESET` (a GPU or a TPU).

    The devices a session may name beside these (`auto`, `cuda:N`) are opened by
    `hardware.devices.open_device`.
    """
    text = spec.strip().lower() if isinstance(spec, str) else ""
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
        if capacity > MAX_SIMULATED_CAPACITY:
            raise InvalidSettingError(
                f"invalid device {spec!r}: the capacity must be at most {_compact_size(MAX_SIMULATED_CAPACITY)} "
                "(a device's addresses, as the pool orders its chunks, fit in 64 bits)"
            )
        return SimulatedDevice(capacity)
    raise InvalidSettingError(f"invalid device {spec!r}: allowed are {DEVICE_SPEC_HELP}")


CLASS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def class_suffixes() -> str:
    """What a session may add to its device's class where the figures are not the device's own
    kind's, as a pattern: the CPU's or another preset's sizes (`--devmem-compile-target`), oneDNN."""
    presets = "|".join(re.escape(name) for name in sorted({*PRESETS, *TPU_SPECS}, key=len, reverse=True))
    return rf"(?:-cpu-sizes|-(?:{presets})-sizes)?(?:-onednn)?"


def class_of(device: str) -> str | None:
    """The class a device's name gives, before any suffix (`sim:T4`: `sim-T4`); None if unknown."""
    if device.startswith("sim:"):
        return "sim-" + device[4:]
    if device.startswith("cuda:") and device.endswith(")") and " (" in device:
        return "cuda-" + re.sub(r"[^A-Za-z0-9]+", "-", device[device.index(" (") + 2 : -1]).strip("-")
    return None


def device_class_problem(device_class: object, device: object = None) -> str | None:
    """Why a device class read from a file cannot be believed, or None.

    A class names a folder of the baselines, so it is a plain name. It is made from its device's
    name, so a class edited apart from its device is caught."""
    shown = repr(device_class)[:80]
    if not isinstance(device_class, str) or not CLASS_NAME.fullmatch(device_class):
        return f"device class {shown} is not a plain name (letters, digits, '.', '_', '-'; first a letter or digit)"
    base = class_of(device) if isinstance(device, str) else None
    if base is not None and not re.fullmatch(re.escape(base) + class_suffixes(), device_class):
        return (
            f"device class {shown} is not made from its device {str(device)[:80]!r} "
            f"({base}, or with -cpu-sizes, -PRESET-sizes or -onednn)"
        )
    return None


def _compact_size(nbytes: int) -> str:
    """`16GiB`-style label for a capacity, exact where the capacity is a whole number of a unit."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"
