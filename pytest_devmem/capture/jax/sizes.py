"""What a deviceless compile says of one JAX executable: its sizes per device, why it has none, or
that the target cannot run it.

The GPU and TPU sizers (gpu_compile.py, tpu_compile.py) give each executable an `ExecutableSizes`
from the target compiler's memory analysis (or a cache entry, size_cache.py), or an `Unavailable`
with the reason, and the executable keeps its CPU sizes.

A program the TPU compiler refuses for HBM ("RESOURCE_EXHAUSTED: Ran out of memory in memory space
hbm ... exceeds available HBM (15.75G)") is a `Refused`: its call raises the compiler's error, as JAX
raises it where the compile for a TPU fails, and never runs on the CPU; the test's record turns it
into an out-of-memory result of kind capacity, at compile time, with the compiler's figures. A
program on a count of devices libtpu forms no topology of is a `NoTopology`, whose call raises an
error naming the counts it forms: never sized by the CPU under a TPU's name. Imports no framework
but where a refusal is raised.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidSettingError
from ...model.buffers import ProgramBuffers

__all__ = [
    "ExecutableSizes",
    "NoTopology",
    "NoTopologyError",
    "NotRunnable",
    "Refused",
    "SizerError",
    "UNUSABLE",
    "Unavailable",
    "first_line",
    "parse_refusal",
]


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


UNUSABLE = "the target's compiler could not start"
"""Words of a reason that no program of the session can be sized for the target (a broken libtpu)."""


def first_line(exc: BaseException) -> str:
    """An exception's type and the first line of its message: what a reason quotes of XLA or JAX."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class NotRunnable:
    """A sizer's answer for a program its target cannot run (the TPU compiler refused it, or no
    topology has its devices): the program's call raises `error()` instead of running, as there."""

    def error(self) -> Exception:
        raise NotImplementedError

    def refusal(self) -> dict[str, object] | None:
        """The compiler's refusal for memory, with its figures, for the record; None for another reason."""
        return None

    def note(self) -> str:
        """Why, where it is no refusal for memory."""
        return ""


_REFUSAL = re.compile(
    r"(?:required for HLO temporaries|Used)\s*\(?\s*([\d.]+)\s*([KMGT]?)\)?.*?available HBM\s*\(\s*([\d.]+)\s*([KMGT]?)\s*\)",
    re.DOTALL,
)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class Refused(NotRunnable):
    """The TPU compiler refused the executable for HBM: its own message and figures."""

    target: str
    message: str  # the compiler's first line
    needed: int | None  # bytes it said the program needs, rounded as it printed them
    available: int | None  # the HBM it said is available
    text: str = field(default="", repr=False, compare=False)  # the compiler's whole message

    def error(self) -> Exception:
        """What the program's call raises: the compiler's error, as JAX raises a failed compile for a
        TPU (`jax.errors.JaxRuntimeError`, "RESOURCE_EXHAUSTED: ..."), before the program would run."""
        import jax  # JAX: imported only where it runs

        return jax.errors.JaxRuntimeError(self.text or self.message)

    def refusal(self) -> dict[str, object]:
        return {"target": self.target, "message": self.message, "needed": self.needed, "available": self.available}


@dataclass(frozen=True)
class NoTopology(NotRunnable):
    """libtpu forms no topology of the program's device count: its call raises, naming the counts it forms."""

    reason: str

    def error(self) -> Exception:
        return InvalidSettingError(self.reason)

    def note(self) -> str:
        return self.reason


def parse_refusal(text: str) -> tuple[int | None, int | None] | None:
    """(needed, available) bytes from XLA:TPU's out-of-memory refusal; None when `text` is none.
    XLA prints them with HumanReadableNumBytes (powers of 1024, two decimals)."""
    if "RESOURCE_EXHAUSTED" not in text or "HBM" not in text:
        return None
    match = _REFUSAL.search(text)
    if match is None:
        return None, None
    needed = round(float(match.group(1)) * _UNITS[match.group(2)])
    available = round(float(match.group(3)) * _UNITS[match.group(4)])
    return needed, available


class NoTopologyError(SizerError):
    """libtpu forms no topology of the count asked for; the message names the counts it forms."""
