"""NVML as a source: the GPU's real memory use, for this process and the whole device, polled in the
background so short peaks are caught. Needs nvidia-ml-py (imported as pynvml) and a GPU."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from .base import Reading, unavailable
from .sampler import Sampler


class NvmlSource:
    """Peak bytes used on GPU `index` during a test, per process where NVML can tell, else per device.

    NVML numbers the physical GPUs, CUDA only the visible ones: under CUDA_VISIBLE_DEVICES (which
    pytest-devmem itself sets for xdist workers) CUDA's device 0 may be NVML's device 3. So the GPU
    is found by its `uuid` where the CUDA device gives one, and by index only otherwise.
    `nvml` is the pynvml module or anything with the same functions (unit tests pass a fake); by
    default pynvml is imported when the source opens.
    """

    name = "nvml"

    def __init__(
        self, sampler: Sampler, index: int = 0, nvml: ModuleType | Any = None, uuid: str | None = None
    ) -> None:
        self.index = index
        self.uuid = uuid
        self.available = False
        self.note = ""
        self._sampler = sampler
        self._nvml = nvml
        self._handle: Any = None
        self._pid = os.getpid()
        self._device_start = self._device_peak = 0
        self._process_start = self._process_peak = 0
        self._process_known = False
        self.total = 0
        self._open()

    def _open(self) -> None:
        if self._nvml is None:
            try:
                import pynvml  # NVML's bindings: the nvml extra, optional
            except ImportError:
                self.note = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
                return
            self._nvml = pynvml
        try:
            self._nvml.nvmlInit()
            if self.uuid is not None:
                self._handle = self._nvml.nvmlDeviceGetHandleByUUID(self.uuid)
            else:
                count = self._nvml.nvmlDeviceGetCount()
                if self.index >= count:
                    self.note = f"NVML sees {count} GPU(s), none with index {self.index}"
                    return
                self._handle = self._nvml.nvmlDeviceGetHandleByIndex(self.index)
            self.total = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).total)
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.note = f"NVML is not usable here: {exc}"
            return
        self.available = True
        self._sampler.add(self._probe)

    def _read(self) -> tuple[int, int | None]:
        device_used = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        process_used = None
        try:
            for process in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                if process.pid == self._pid and process.usedGpuMemory is not None:
                    process_used = int(process.usedGpuMemory)
        except Exception:  # some drivers or containers refuse per-process queries
            process_used = None
        return device_used, process_used

    def _probe(self) -> None:
        device_used, process_used = self._read()
        if device_used > self._device_peak:
            self._device_peak = device_used
        if process_used is not None:
            self._process_known = True
            if process_used > self._process_peak:
                self._process_peak = process_used

    def start(self) -> None:
        if not self.available:
            return
        device_used, process_used = self._read()
        self._device_start = self._device_peak = device_used
        self._process_start = self._process_peak = process_used or 0
        self._process_known = process_used is not None

    def stop(self) -> Reading:
        if not self.available:
            return unavailable(self.name, self.note)
        self._probe()
        figures: dict[str, int | float | str] = {
            "device_total_bytes": self.total,
            "device_used_start_bytes": self._device_start,
            "device_used_peak_bytes": self._device_peak,
        }
        if self._process_known:
            figures["process_used_start_bytes"] = self._process_start
            figures["process_used_peak_bytes"] = self._process_peak
            peak = self._process_peak - self._process_start
            note = ""
        else:
            peak = self._device_peak - self._device_start
            note = "NVML gave no per-process figure here; device-wide use is reported"
        # what the driver gave the process (its allocators' regions and its CUDA context): memory held
        # from the device, reserved; NVML cannot see what an allocator handed out of it, so no "in use"
        return Reading(self.name, True, note, peak_bytes_reserved=peak, figures=figures)

    def close(self) -> None:
        if self.available:
            self._sampler.remove(self._probe)
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self.available = False
