"""A trace's devices named as the TPU chips they stand for.

Under a TPU preset the test runs on CPU devices, and each JAX device it uses stands for one device
of the generation's topology (one chip on v5e, v5p and v6e; one TensorCore on v4). The captures name
the device that ran the work (`cpu:2`); the record, the terminal summary, the reports and the
targets table name the device it stands for (`tpu:2`), as JAX names a TPU device (platform `tpu`,
its id). Events that name no device are the session's first device's (`tpu:0`). A trace's other
platforms are left as they are, and so are TensorFlow's events: its figures are its CPU allocator's
(no TPU compile sizes its tensors), so they stay on the host device, never on a chip. No frameworks
here.
"""

from __future__ import annotations

import re
from array import array

from .trace import Trace

__all__ = ["HOST_SOURCES", "TPU_PLATFORM", "as_tpu_chips", "chip_label"]

TPU_PLATFORM = "tpu"
_CPU_DEVICE = re.compile(r"cpu:(\d+)")


def chip_label(device: str) -> str:
    """The chip a CPU device (`cpu:N`, or empty for the first device) stands for: `tpu:N`."""
    if not device:
        return f"{TPU_PLATFORM}:0"
    found = _CPU_DEVICE.fullmatch(device)
    return f"{TPU_PLATFORM}:{found.group(1)}" if found else device


HOST_SOURCES = ("tensorflow",)
"""Sources whose buffers stay on the host device they were measured on: no TPU compile sizes
TensorFlow's tensors, so its CPU allocator's figures are never counted as a chip's HBM."""


def as_tpu_chips(trace: Trace) -> Trace:
    """`trace` with each CPU device renamed as the chip it stands for, in place (returned), but for
    TensorFlow's events (HOST_SOURCES), which keep their CPU device. Only the devices' names change:
    sources and labels that read like a device stay as they are."""
    renamed: dict[int, int] = {}
    for code in dict.fromkeys(trace.devices):
        name = trace.names[code]
        chip = chip_label(name)
        if chip != name:
            renamed[code] = trace.name_code(chip)
    if not renamed:
        return trace
    host = {trace.names.index(name) for name in HOST_SOURCES if name in trace.names}
    if host and any(code in host for code in dict.fromkeys(trace.sources)):
        devices = (
            code if source in host else renamed.get(code, code) for code, source in zip(trace.devices, trace.sources)
        )
    else:
        devices = (renamed.get(code, code) for code in trace.devices)
    trace.devices = array(trace.devices.typecode, devices)
    return trace
