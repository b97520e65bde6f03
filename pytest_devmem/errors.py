"""The package's exceptions. Each one states the bad value and what is allowed or what would help."""

from __future__ import annotations

from dataclasses import dataclass

from .units import format_short_of, format_size


class DevmemError(Exception):
    """Base class of every error pytest-devmem raises on purpose."""


class InvalidSettingError(DevmemError, ValueError):
    """A setting (mode, fraction, size, device spec) is outside what is allowed."""


class InvalidRequestError(DevmemError, ValueError):
    """An allocation request that no allocator could honour (zero or negative size, not an int)."""


class InvalidFreeError(DevmemError, ValueError):
    """A free of a pointer this pool does not own: a double free or a foreign pointer."""


class FileFormatError(DevmemError, ValueError):
    """A file given to pytest-devmem (baseline, report, trace) that it cannot read or trust; the
    message names the file, the line where there is one, and the problem."""


class InputError(DevmemError, ValueError):
    """What the devmem command was given and cannot use (a path that is neither a report nor
    baselines, reports that cannot be merged or lined up, a trace without its regime); the message
    names the file and what is wrong."""


class DeviceError(DevmemError, RuntimeError):
    """The device backend itself failed (CUDA driver error, missing library)."""


@dataclass(frozen=True)
class OutOfMemoryFigures:
    """The numbers behind an out-of-memory error, so callers can act on them without parsing text."""

    requested: int
    rounded: int
    bytes_in_use: int
    pool_bytes: int
    largest_free_block: int
    bytes_limit: int
    device_capacity: int
    device_free: int
    regime: str
    device: str

    @property
    def pool_free(self) -> int:
        return self.pool_bytes - self.bytes_in_use


class OutOfMemoryError(DevmemError, MemoryError):
    """An allocation the pool could not serve under its regime.

    The message says what was asked, what is in use and free, the largest free block, the regime,
    and a setting that would help; `figures` holds the same numbers, `memory_map` the pool's layout
    when the pool was asked to dump it.
    """

    def __init__(self, figures: OutOfMemoryFigures, suggestion: str, memory_map: str | None = None) -> None:
        self.figures = figures
        self.suggestion = suggestion
        self.memory_map = memory_map
        super().__init__(self._message())

    def _message(self) -> str:
        f = self.figures
        lines = [
            f"out of device memory: asked {format_size(f.requested)} ({f.requested} bytes, "
            f"{f.rounded} rounded) under regime {f.regime} on {f.device}",
            f"  in use {format_size(f.bytes_in_use)}; pool holds {format_size(f.pool_bytes)} of a "
            f"{format_size(f.bytes_limit)} limit, {format_short_of(f.pool_free, f.rounded)} of it free; "
            f"largest free block {format_short_of(f.largest_free_block, f.rounded)}",
            f"  device: {format_size(f.device_free)} free of {format_size(f.device_capacity)}",
            f"  fix: {self.suggestion}",
        ]
        if self.memory_map:
            lines.append(self.memory_map)
        return "\n".join(lines)

    def __reduce__(self):  # keep the figures when the error crosses a process boundary
        return (OutOfMemoryError, (self.figures, self.suggestion, self.memory_map))
