"""The devices a session opens by name: a real CUDA GPU through its driver, or one of the model's simulated
devices (`model/device.py`).

`CudaDevice` sits behind the model's `Device` protocol, so a pool runs the same code on either. The driver's
library is loaded only when a GPU is asked for or looked for (`cuda_driver.py`), never on import.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import Protocol

from ..errors import DeviceError, InvalidFreeError, InvalidSettingError
from ..model.device import (
    DEVICE_ALIGNMENT,
    DEVICE_SPEC_HELP,
    Device,
    DeviceKind,
    SimulatedDevice,
    class_of,
    open_simulated,
)
from ..model.tpu_targets import TpuSpec
from ..units import format_size, round_up
from .cuda_driver import LibCuda

__all__ = ["CudaDevice", "CudaDriver", "cuda_device_count", "open_device"]


class CudaDriver(Protocol):
    """The few CUDA driver calls a CudaDevice makes; the real one is cuda_driver.LibCuda, tests may fake it."""

    def device_count(self) -> int: ...
    def device_name(self, index: int) -> str: ...
    def mem_get_info(self, index: int) -> tuple[int, int]: ...
    def mem_alloc(self, index: int, nbytes: int) -> int | None: ...
    def mem_free(self, index: int, address: int) -> None: ...
    def compute_capability(self, index: int) -> tuple[int, int]: ...
    def device_uuid(self, index: int) -> str | None: ...


class CudaDevice:
    """GPU `index` through the CUDA driver: real allocations, real free/total figures.

    It remembers what it handed out, so a foreign free is refused here rather than crashing the
    driver, and `close()` returns everything still held.
    """

    def __init__(self, index: int = 0, driver: CudaDriver | None = None) -> None:
        if driver is None:
            driver = LibCuda()
        self.driver: CudaDriver = driver
        count = self.driver.device_count()
        if not 0 <= index < count:
            raise InvalidSettingError(f"invalid CUDA device cuda:{index}: this machine has {count} GPU(s)")
        self.kind = DeviceKind.CUDA
        self.index = index
        self.tpu: TpuSpec | None = None
        self.preset: str | None = None
        self.class_suffix = ""  # a real GPU's figures are always its own
        self.model = self.driver.device_name(index)
        self.capacity = self.driver.mem_get_info(index)[1]
        self.compute_capability: tuple[int, int] = self.driver.compute_capability(index)
        self.uuid: str | None = self.driver.device_uuid(index)
        self.name = f"cuda:{index} ({self.model})"
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def device_class(self) -> str:
        return str(class_of(self.name))

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

    try:
        return LibCuda().device_count()
    except DeviceError:
        return 0


def open_device(spec: str = "auto") -> Device:
    """Build the device a spec names: `auto`, `sim`, `sim:SIZE`, `cuda`, `cuda:N`.

    `auto` takes GPU 0 where the CUDA driver sees one, else a simulated device of DEFAULT_SIM_CAPACITY.
    """
    text = spec.strip().lower() if isinstance(spec, str) else ""
    if text == "auto":
        return CudaDevice(0) if cuda_device_count() > 0 else SimulatedDevice()
    if text == "sim" or text.startswith("sim:"):
        return open_simulated(spec)
    match = re.fullmatch(r"cuda(?::(\d+))?", text)
    if match:
        return CudaDevice(int(match.group(1) or 0))
    raise InvalidSettingError(f"invalid device {spec!r}: allowed are {DEVICE_SPEC_HELP}")
