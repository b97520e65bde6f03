"""Which NVIDIA driver is installed, which CUDA it supports and how many GPUs it lists, without
initialising CUDA: `cuInit` would fix CUDA_VISIBLE_DEVICES for this process before pytest-devmem can
give each xdist worker its own GPU, and would take a CUDA context's memory on every GPU.

NVML (the library `nvidia-smi` uses, installed with the driver on Linux and Windows) answers all three
without a context. Where it cannot be loaded, Linux's /proc/driver/nvidia names the driver version and
lists the GPUs, and the CUDA driver's `cuDriverGetVersion`, one of the few calls allowed before
`cuInit`, names the CUDA version. What none of them can tell is None, never a guess.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError
from .cuda_driver import driver_library_names, load_library

NVIDIA_PROC_DIR = "/proc/driver/nvidia"
"""Where Linux's NVIDIA kernel module shows itself: `version` and one entry per GPU under `gpus/`."""

_NVML_SUCCESS = 0
_VERSION_BUFFER = 96  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80


@dataclass(frozen=True)
class DriverInfo:
    """What the driver says; each field None where it could not be found out."""

    gpus: int | None = None  # physical GPUs, whatever CUDA_VISIBLE_DEVICES says
    driver_version: str | None = None  # e.g. "550.54.15"
    cuda_version: str | None = None  # the newest CUDA this driver supports, e.g. "12.4"


def nvml_library_names(platform: str | None = None) -> tuple[str, ...]:
    """NVML's names on `platform`: Linux's soname, Windows' DLL in System32 or, with older drivers,
    under Program Files (where pynvml looks too); none on macOS."""
    platform = sys.platform if platform is None else platform
    if platform.startswith("linux"):
        return ("libnvidia-ml.so.1", "libnvidia-ml.so")
    if platform in ("win32", "cygwin"):
        program_files = os.environ.get("ProgramFiles", "C:\\Program Files")
        return ("nvml.dll", os.path.join(program_files, "NVIDIA Corporation", "NVSMI", "nvml.dll"))
    return ()


def cuda_version_text(encoded: int) -> str:
    """CUDA's integer version (1000 × major + 10 × minor) as people write it: 12040 -> "12.4"."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


Loader = Callable[[tuple[str, ...], str], Any]


def query_nvml(load: Loader | None = None) -> DriverInfo | None:
    """The GPU count and versions through NVML; None where NVML cannot be loaded or started.
    `load` opens a library (default: load_library; unit tests pass a fake)."""
    try:
        lib = (load or load_library)(nvml_library_names(), "NVML library")
    except DeviceError:
        return None
    try:
        if lib.nvmlInit_v2() != _NVML_SUCCESS:
            return None
    except (AttributeError, OSError):
        return None
    try:
        count = ctypes.c_uint()
        gpus = count.value if _call(lib, "nvmlDeviceGetCount_v2", ctypes.byref(count)) else None
        buffer = ctypes.create_string_buffer(_VERSION_BUFFER)
        driver = None
        if _call(lib, "nvmlSystemGetDriverVersion", buffer, _VERSION_BUFFER):
            driver = buffer.value.decode(errors="replace") or None
        encoded = ctypes.c_int()
        cuda = (
            cuda_version_text(encoded.value)
            if _call(lib, "nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(encoded)) and encoded.value > 0
            else None
        )
    finally:
        _call(lib, "nvmlShutdown")
    return DriverInfo(gpus, driver, cuda)


def _call(lib: Any, name: str, *args: object) -> bool:
    """Whether `name(*args)` exists in `lib` and succeeded (an older driver may lack a `_v2` call)."""
    try:
        return bool(getattr(lib, name)(*args) == _NVML_SUCCESS)
    except (AttributeError, OSError):
        return False


def proc_driver_version(directory: str | None = None) -> str | None:
    """The version in Linux's `/proc/driver/nvidia/version` ("NVRM version: NVIDIA UNIX x86_64 Kernel
    Module  550.54.15  ..."); None where there is no such file (no driver, not Linux)."""
    try:
        with open(os.path.join(directory or NVIDIA_PROC_DIR, "version"), encoding="utf-8", errors="replace") as handle:
            text = handle.read(4096)
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def proc_gpu_count(directory: str | None = None) -> int | None:
    """GPUs listed under Linux's `/proc/driver/nvidia/gpus`; None where there is no such directory."""
    try:
        return len(os.listdir(os.path.join(directory or NVIDIA_PROC_DIR, "gpus")))
    except OSError:
        return None


def cuda_driver_version(load: Loader | None = None) -> str | None:
    """The CUDA version the driver supports, from `cuDriverGetVersion` (allowed before cuInit, so no
    context is created); None where the driver library is absent or does not answer."""
    try:
        lib = (load or load_library)(driver_library_names(), "CUDA driver library")
        encoded = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(encoded)) != 0 or encoded.value <= 0:
            return None
    except (DeviceError, AttributeError, OSError):
        return None
    return cuda_version_text(encoded.value)


def driver_info(load: Loader | None = None, proc_directory: str | None = None) -> DriverInfo:
    """NVML first; for what it could not say, /proc (Linux) and then the CUDA driver library."""
    nvml = query_nvml(load) or DriverInfo()
    gpus = nvml.gpus if nvml.gpus is not None else proc_gpu_count(proc_directory)
    driver = nvml.driver_version or proc_driver_version(proc_directory)
    cuda = nvml.cuda_version
    if cuda is None and (driver is not None or not sys.platform.startswith("linux")):
        cuda = cuda_driver_version(load)  # on Linux only where a driver shows itself: no stray stub library
    return DriverInfo(gpus, driver, cuda)
