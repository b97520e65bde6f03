"""What every pool shares: the protocol callers program against, statistics, request checks, OOM errors."""

from __future__ import annotations

import operator
from typing import Protocol, runtime_checkable

from ...errors import InvalidRequestError, OutOfMemoryError, OutOfMemoryFigures
from ..device import Device
from .advice import suggest_fix
from .policy import Policy

STAT_KEYS = (
    "num_allocs",
    "bytes_in_use",
    "peak_bytes_in_use",
    "largest_alloc_size",
    "bytes_limit",
    "bytes_reserved",
    "peak_bytes_reserved",
    "largest_free_block_bytes",
    "pool_bytes",
    "peak_pool_bytes",
    "fragmentation",
    "fragmentation_at_peak",
    "requested_bytes_in_use",
    "peak_requested_bytes_in_use",
    "internal_fragmentation_bytes",
    "num_frees",
    "num_ooms",
    "num_regions",
)
"""Keys of `Pool.stats()`: XLA's names first, then fragmentation and this package's additions."""


@runtime_checkable
class Pool(Protocol):
    """A device-memory allocator under one policy. Handles are device addresses (ints)."""

    device: Device
    policy: Policy

    def alloc(self, nbytes: int) -> int:
        """Return the address of a new buffer of at least `nbytes`; raise OutOfMemoryError if none fits."""

    def free(self, handle: int) -> None:
        """Give a buffer back; raise InvalidFreeError for a double or foreign free."""

    def stats(self) -> dict[str, int | float]:
        """Current statistics under STAT_KEYS."""

    def reset_peak_stats(self) -> None:
        """Restart peaks and counters from current usage, as XLA's ClearStats does."""

    def memory_map(self) -> str:
        """Human-readable layout of what the pool holds."""

    def close(self) -> None:
        """Return everything the pool holds to the device."""


class PoolCounters:
    """Usage counters kept by every pool, updated inline on the hot path for speed."""

    def __init__(self, device: Device, policy: Policy, bytes_limit: int) -> None:
        self.device = device
        self.policy = policy
        self.bytes_limit = bytes_limit
        self.num_allocs = 0
        self.num_frees = 0
        self.num_ooms = 0
        self.bytes_in_use = 0
        self.peak_bytes_in_use = 0
        self.requested_bytes_in_use = 0
        self.peak_requested_bytes_in_use = 0
        self.largest_alloc_size = 0
        self.pool_bytes = 0
        self.peak_pool_bytes = 0
        self.bytes_reserved = 0
        self.peak_bytes_reserved = 0
        self.fragmentation_at_peak = 0.0
        # Each pool's attributes in a dict of its own from the start: the machine's replay copies pools
        # through their __dict__ (`machine/state.copy_state`), and CPython 3.11 then reads the attributes
        # of a pool whose dict was shared with its class's other instances twice as slowly, in the loops.
        self.__dict__ = dict(self.__dict__)

    def _largest_free_block(self) -> int:
        return 0

    def _num_regions(self) -> int:
        return 0

    def _fragmentation(self) -> float:
        """(free - largest free block) / free, XLA's measure; 0 when nothing is free."""
        free = self.pool_bytes - self.bytes_in_use
        return (free - self._largest_free_block()) / free if free > 0 else 0.0

    def stats(self) -> dict[str, int | float]:
        largest_free = self._largest_free_block()
        return {
            "num_allocs": self.num_allocs,
            "bytes_in_use": self.bytes_in_use,
            "peak_bytes_in_use": self.peak_bytes_in_use,
            "largest_alloc_size": self.largest_alloc_size,
            "bytes_limit": self.bytes_limit,
            "bytes_reserved": self.bytes_reserved,
            "peak_bytes_reserved": self.peak_bytes_reserved,
            "largest_free_block_bytes": largest_free,
            "pool_bytes": self.pool_bytes,
            "peak_pool_bytes": self.peak_pool_bytes,
            "fragmentation": self._fragmentation(),
            "fragmentation_at_peak": self.fragmentation_at_peak,
            "requested_bytes_in_use": self.requested_bytes_in_use,
            "peak_requested_bytes_in_use": self.peak_requested_bytes_in_use,
            "internal_fragmentation_bytes": self.bytes_in_use - self.requested_bytes_in_use,
            "num_frees": self.num_frees,
            "num_ooms": self.num_ooms,
            "num_regions": self._num_regions(),
        }

    def reset_peak_stats(self) -> None:
        self.num_allocs = 0
        self.num_frees = 0
        self.num_ooms = 0
        self.largest_alloc_size = 0
        self.peak_bytes_in_use = self.bytes_in_use
        self.peak_requested_bytes_in_use = self.requested_bytes_in_use
        self.peak_pool_bytes = self.pool_bytes
        self.peak_bytes_reserved = self.bytes_reserved
        self.fragmentation_at_peak = self._fragmentation()

    def _out_of_memory(self, requested: int, rounded: int, memory_map: str | None = None) -> OutOfMemoryError:
        self.num_ooms += 1
        figures = OutOfMemoryFigures(
            requested=requested,
            rounded=rounded,
            bytes_in_use=self.bytes_in_use,
            pool_bytes=self.pool_bytes,
            largest_free_block=self._largest_free_block(),
            bytes_limit=self.bytes_limit,
            device_capacity=self.device.capacity,
            device_free=self.device.free_bytes(),
            regime=self.policy.label,
            device=self.device.name,
        )
        return OutOfMemoryError(figures, suggest_fix(self.policy, figures), memory_map)


def checked_size(nbytes: object) -> int:
    """`nbytes` as a positive int (numpy integers welcome); InvalidRequestError otherwise."""
    if isinstance(nbytes, bool):
        raise InvalidRequestError(f"invalid allocation size {nbytes!r}: must be a positive int, got bool")
    try:
        size = operator.index(nbytes)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidRequestError(
            f"invalid allocation size {nbytes!r}: must be a positive int, got {type(nbytes).__name__}"
        ) from None
    if size <= 0:
        raise InvalidRequestError(f"invalid allocation size {size}: must be a positive number of bytes")
    return size
