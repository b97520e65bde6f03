"""The CUDA driver API through ctypes: no build step, no package beyond the driver itself.

Kept apart from devices.py so that runs without a GPU never load ctypes or libcuda. The driver's
library has another name on each system (`libcuda.so.1` on Linux, `nvcuda.dll` on Windows), and
macOS has none: NVIDIA's last CUDA for macOS was 10.2.
"""

from __future__ import annotations

import ctypes
import sys

from ..errors import DeviceError

_CUDA_SUCCESS = 0  # CUresult values used below
_CUDA_ERROR_OUT_OF_MEMORY = 2
_CUDA_ERROR_NO_DEVICE = 100


def driver_library_names(platform: str | None = None) -> tuple[str, ...]:
    """The names the CUDA driver's library goes by on `platform` (default: this one), most specific
    first: the versioned soname the driver installs, then the development link a toolkit adds."""
    platform = sys.platform if platform is None else platform
    if platform.startswith("linux"):
        return ("libcuda.so.1", "libcuda.so")
    if platform in ("win32", "cygwin"):
        return ("nvcuda.dll",)
    return ()  # macOS and the rest: no CUDA driver


def load_library(names: tuple[str, ...], what: str) -> ctypes.CDLL:
    """The first of `names` that loads; DeviceError naming each one tried and why it failed."""
    if not names:
        raise DeviceError(f"there is no {what} on {sys.platform} (NVIDIA ships it for Linux and Windows only)")
    problems = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            problems.append(f"{name!r}: {exc}")
    raise DeviceError(f"cannot load the {what}: tried " + "; ".join(problems))


class LibCuda:
    """The CUDA driver API through ctypes: no build step, no package beyond the driver itself."""

    def __init__(self, library: str | None = None) -> None:
        self._lib = load_library((library,) if library else driver_library_names(), "CUDA driver library")
        self._check(self._lib.cuInit(0), "cuInit")
        self._contexts: dict[int, ctypes.c_void_p] = {}

    def _check(self, code: int, call: str) -> None:
        if code != _CUDA_SUCCESS:
            message = ctypes.c_char_p()
            self._lib.cuGetErrorString(code, ctypes.byref(message))
            text = message.value.decode() if message.value else "unknown error"
            raise DeviceError(f"{call} failed with CUDA error {code}: {text}")

    def _use(self, index: int) -> None:
        context = self._contexts.get(index)
        if context is None:
            device = ctypes.c_int()
            self._check(self._lib.cuDeviceGet(ctypes.byref(device), index), "cuDeviceGet")
            context = ctypes.c_void_p()
            self._check(self._lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
            self._contexts[index] = context
        self._check(self._lib.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    def device_count(self) -> int:
        count = ctypes.c_int()
        code = self._lib.cuDeviceGetCount(ctypes.byref(count))
        if code == _CUDA_ERROR_NO_DEVICE:
            return 0
        self._check(code, "cuDeviceGetCount")
        return count.value

    def device_name(self, index: int) -> str:
        device = ctypes.c_int()
        self._check(self._lib.cuDeviceGet(ctypes.byref(device), index), "cuDeviceGet")
        buffer = ctypes.create_string_buffer(256)
        self._check(self._lib.cuDeviceGetName(buffer, 256, device), "cuDeviceGetName")
        return buffer.value.decode()

    def compute_capability(self, index: int) -> tuple[int, int]:
        """(major, minor): CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR (75) and _MINOR (76)."""
        device = ctypes.c_int()
        self._check(self._lib.cuDeviceGet(ctypes.byref(device), index), "cuDeviceGet")
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self._lib.cuDeviceGetAttribute(ctypes.byref(major), 75, device), "cuDeviceGetAttribute")
        self._check(self._lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, device), "cuDeviceGetAttribute")
        return major.value, minor.value

    def device_uuid(self, index: int) -> str:
        """The GPU's UUID as NVML and nvidia-smi write it (`GPU-xxxxxxxx-xxxx-...`): unlike the
        CUDA ordinal, it names the same physical GPU under any CUDA_VISIBLE_DEVICES."""
        device = ctypes.c_int()
        self._check(self._lib.cuDeviceGet(ctypes.byref(device), index), "cuDeviceGet")
        raw = (ctypes.c_ubyte * 16)()
        self._check(self._lib.cuDeviceGetUuid(ctypes.byref(raw), device), "cuDeviceGetUuid")
        text = bytes(raw).hex()
        return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    def mem_get_info(self, index: int) -> tuple[int, int]:
        self._use(index)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self._lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value, total.value

    def mem_alloc(self, index: int, nbytes: int) -> int | None:
        self._use(index)
        pointer = ctypes.c_uint64()
        code = self._lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes))
        if code == _CUDA_ERROR_OUT_OF_MEMORY:
            return None
        self._check(code, "cuMemAlloc")
        return pointer.value

    def mem_free(self, index: int, address: int) -> None:
        self._use(index)
        self._check(self._lib.cuMemFree_v2(ctypes.c_uint64(address)), "cuMemFree")
