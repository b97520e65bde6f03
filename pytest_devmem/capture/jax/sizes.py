"""What a deviceless compile says of one JAX executable: its sizes per device, or why it has none.

The GPU and TPU sizers (gpu_compile.py, tpu_compile.py) give each executable an `ExecutableSizes`
from the target compiler's memory analysis (or a cache entry, size_cache.py), or an `Unavailable`
with the reason, and the executable keeps its CPU sizes. Imports no framework.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...model.buffers import ProgramBuffers

__all__ = ["ExecutableSizes", "SizerError", "Unavailable", "first_line"]


@dataclass(frozen=True)
class ExecutableSizes:
    """One executable's sizes per device, from the target compiler's memory analysis for `target`."""

    target: str
    devices: int  # devices the executable was compiled for
    temp_bytes: int
    output_bytes: int
    argument_bytes: int
    alias_bytes: int  # outputs that reuse a donated argument's buffer
    code_bytes: int
    compile_seconds: float  # lowering and compiling; 0.0 when the disk cache answered
    source: str  # "compiled" or "disk cache"
    buffers: ProgramBuffers | None = None  # the buffers at its peak, as the compile's dump states them
    buffers_note: str = ""  # why they are not known
    key: str = ""  # the cache key its entry is kept under (compile_store.py); "" where it has none

    def to_json(self) -> dict[str, Any]:
        data = {item.name: getattr(self, item.name) for item in dataclasses.fields(self) if item.name != "key"}
        data["buffers"] = self.buffers.to_json() if self.buffers is not None else None
        return data


@dataclass(frozen=True)
class Unavailable:
    """Why an executable could not be compiled for the target; it keeps its CPU sizes."""

    reason: str


class SizerError(Exception):
    """The target cannot be compiled for at all here; the message says why."""


def first_line(exc: BaseException) -> str:
    """An exception's type and the first line of its message: what a reason quotes of XLA or JAX."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
