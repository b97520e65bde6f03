"""What the TPU compiler says of a program beyond its sizes: a refusal for HBM, with its figures, or no
topology of the program's device count; and what the TPU sizing cost the session.

A program the TPU compiler refuses for HBM ("RESOURCE_EXHAUSTED: Ran out of memory in memory space
hbm ... exceeds available HBM (15.75G)") is a `Refused`: its call raises the compiler's error, as JAX
raises it where the compile for a TPU fails, and never runs on the CPU; the test's record turns it
into an out-of-memory result of kind capacity, at compile time, with the compiler's figures. A
program on a count of devices libtpu forms no topology of is a `NoTopology`, whose call raises an
error naming the counts it forms: never sized by the CPU under a TPU's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...errors import InvalidSettingError
from .executables import NotRunnable
from .sizes import SizerError

__all__ = ["NoTopology", "NoTopologyError", "Refused", "SizingCosts", "parse_refusal"]

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


@dataclass
class SizingCosts:
    """Where a session's TPU sizing spent its time, measured: what a cold run pays beyond the CPU's
    own compiles (benchmarks/bench_tpu.py prints it)."""

    client_start_seconds: float = 0.0  # loading libtpu and starting its compile-only client (first topology)
    topologies: int = 0  # topologies made after the first (2x2, 2x4...)
    topology_seconds: float = 0.0
    executables_compiled: int = 0  # lowered again and compiled by XLA:TPU
    executable_seconds: float = 0.0  # lowering and compiling
    executable_lowering_seconds: float = 0.0  # of which JAX's lowering for the TPU (Python)
    executables_from_disk: int = 0
    executables_from_session: int = 0  # the same program (module text and jaxpr) compiled earlier in the session
    arrays_compiled: int = 0  # (shard shape, dtype) sized by the compile of a program that holds one
    array_seconds: float = 0.0
    arrays_from_disk: int = 0
    entries_from_store: int = 0  # of those from disk (executables and arrays): stored beside the baselines
    compiled: list[tuple[str, int, float]] = field(default_factory=list)  # (executable, devices, seconds)

    def to_json(self) -> dict[str, float | int]:
        return {name: round(value, 4) if isinstance(value, float) else value for name, value in vars(self).items()}


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
