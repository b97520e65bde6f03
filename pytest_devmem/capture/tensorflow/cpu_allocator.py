"""TensorFlow's CPU allocator made a BFC allocator, so that it keeps statistics and records every
allocation on every CPU.

TensorFlow reads `TF_CPU_ALLOCATOR_USE_BFC` when it creates its CPU device (`ProcessState::
GetCPUAllocator`, tensorflow/core/common_runtime/process_state.cc), at its first op rather than at
import. Without it, its CPU allocator is oneDNN's where oneDNN is on (`TF_ENABLE_ONEDNN_OPTS`, on by
default only on CPUs with AVX-512 and its successors), which records only its large allocations,
or a plain one that keeps no statistics and records nothing: figures would depend on the CPU. The
plugin sets the variable before any conftest or test module can import TensorFlow, unless the user
set it.

oneDNN also changes what TensorFlow's allocator sees: its convolution kernels take their scratch
outside it (a convolution training step measures 22 MiB with oneDNN on, 53 MiB with it off, where
TensorFlow's own kernels take about 39 MiB of scratch from the allocator, as cuDNN's workspace is
taken from it on a GPU). So the plugin also sets TF_ENABLE_ONEDNN_OPTS=0, unless the user set it:
the same figures on every CPU, and the ones a GPU's kernels would give. oneDNN only changes CPU
kernels; on a GPU its setting does not touch device memory. TensorFlow is looked up here, never
imported.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from dataclasses import dataclass

VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def _on(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true")  # as TensorFlow's ReadBoolFromEnvVar reads it


@dataclass(frozen=True)
class CpuAllocatorSetting:
    """What this session did with TF_CPU_ALLOCATOR_USE_BFC, and whether it could still matter."""

    value: str | None  # the value in effect for the session
    set_here: bool  # pytest-devmem set it (the user had not)
    too_late: bool  # TensorFlow had already created its CPU device, with the allocator it had
    onednn: str | None = "0"  # TF_ENABLE_ONEDNN_OPTS in effect
    onednn_set_here: bool = False

    @property
    def effective(self) -> bool:
        return _on(self.value) and not self.too_late

    def describe(self) -> str:
        """One line for the pytest header and the report's session."""
        if self.too_late:
            return f"TensorFlow had started before pytest-devmem could set {VARIABLE}=true: its CPU allocator is the one it started with"
        if self.set_here:
            text = f"TensorFlow's CPU allocator: BFC ({VARIABLE}=true, set by pytest-devmem)"
        elif _on(self.value):
            text = f"TensorFlow's CPU allocator: BFC ({VARIABLE}={self.value}, set before pytest-devmem)"
        else:
            text = f"TensorFlow's CPU allocator: not BFC ({VARIABLE}={self.value}, yours): on CPU its allocations are traced only in part, or not at all"
        if self.onednn_set_here:
            return text + f"; oneDNN off ({ONEDNN_VARIABLE}=0, set by pytest-devmem: the same figures on every CPU)"
        if self.onednn_on:
            return (
                text
                + f"; oneDNN as you set it ({ONEDNN_VARIABLE}={self.onednn}): its kernels' scratch is outside TensorFlow's allocator, and on CPUs without AVX-512 it is off"
            )
        return text

    def problem(self) -> str | None:
        """What the session summary must say, or None."""
        if self.too_late:
            return (
                f"TensorFlow had started before pytest-devmem could set {VARIABLE}=true, so its CPU allocator keeps statistics "
                "and records its allocations only where oneDNN is on, and then only the large ones: "
                "TensorFlow's figures here are what could be measured"
            )
        if not _on(self.value):
            return (
                f"{VARIABLE}={self.value} (yours): TensorFlow's CPU allocations are traced only in part, or not at all"
            )
        if self.onednn_on:
            return (
                f"{ONEDNN_VARIABLE}={self.onednn} (yours): oneDNN's kernels take their scratch outside TensorFlow's allocator, "
                "so TensorFlow's figures here are lower than a GPU's and can differ between CPUs; a simulated device's baselines "
                f"are kept apart (its class ends in -onednn). Unset {ONEDNN_VARIABLE} to measure as a GPU's kernels allocate"
            )
        return None

    @property
    def onednn_on(self) -> bool:
        return self.onednn is not None and self.onednn.strip() not in ("0", "false", "False")


def tensorflow_started() -> bool:
    """Whether TensorFlow has created its devices in this process (so its CPU allocator is fixed)."""
    if "tensorflow" not in sys.modules:
        return False
    context = sys.modules.get("tensorflow.python.eager.context")
    try:
        current = context.context_safe() if context is not None else None
        return bool(current is not None and current._initialized)
    except Exception:
        return True  # a TensorFlow this cannot read: assume the worst, and say so


def prepare_cpu_allocator(environ: MutableMapping[str, str]) -> CpuAllocatorSetting:
    """Set TF_CPU_ALLOCATOR_USE_BFC=true and TF_ENABLE_ONEDNN_OPTS=0 in `environ` unless the user
    set them."""
    onednn = environ.get(ONEDNN_VARIABLE)
    onednn_set_here = onednn is None
    if onednn_set_here:
        environ[ONEDNN_VARIABLE] = onednn = "0"
    value = environ.get(VARIABLE)
    if value is not None:
        return CpuAllocatorSetting(
            value, set_here=False, too_late=False, onednn=onednn, onednn_set_here=onednn_set_here
        )
    environ[VARIABLE] = "true"
    return CpuAllocatorSetting(
        "true", set_here=True, too_late=tensorflow_started(), onednn=onednn, onednn_set_here=onednn_set_here
    )
