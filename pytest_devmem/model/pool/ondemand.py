"""The `ondemand` regime (JAX's `platform` allocator): every request goes to the device, freed at once."""

from __future__ import annotations

from ...errors import InvalidFreeError
from ...units import format_size, round_up
from ..device import DEVICE_ALIGNMENT, Device
from .base import PoolCounters, checked_size
from .policy import Policy


class OnDemandPool(PoolCounters):
    """No pool at all: exact device allocations, so the footprint is the live data and nothing more.

    `pool_bytes` stays 0 (nothing is held in reserve); `bytes_reserved` is what is held from the
    device, which here equals `bytes_in_use`. Fragmentation inside the pool is 0 by construction.
    """

    def __init__(self, device: Device, policy: Policy, *, dump_on_oom: bool = False) -> None:
        super().__init__(device, policy, int(device.capacity * policy.fraction))
        self.dump_on_oom = dump_on_oom
        self._held: dict[int, tuple[int, int]] = {}  # address -> (device bytes, requested bytes)

    def alloc(self, nbytes: int) -> int:
        if type(nbytes) is not int or nbytes <= 0:
            nbytes = checked_size(nbytes)
        size = round_up(nbytes, DEVICE_ALIGNMENT)
        address = self.device.try_allocate(size) if self.bytes_in_use + size <= self.bytes_limit else None
        if address is None:
            raise self._out_of_memory(nbytes, size, self.memory_map() if self.dump_on_oom else None)
        self._held[address] = (size, nbytes)
        self.num_allocs += 1
        self.bytes_in_use += size
        self.requested_bytes_in_use += nbytes
        self.bytes_reserved = self.bytes_in_use
        if self.bytes_in_use > self.peak_bytes_in_use:
            self.peak_bytes_in_use = self.peak_bytes_reserved = self.bytes_in_use
        if self.requested_bytes_in_use > self.peak_requested_bytes_in_use:
            self.peak_requested_bytes_in_use = self.requested_bytes_in_use
        if size > self.largest_alloc_size:
            self.largest_alloc_size = size
        return address

    def free(self, handle: int) -> None:
        try:
            entry = self._held.pop(handle, None)
        except TypeError:  # an unhashable handle ([1], {}): never one of ours
            entry = None
        if entry is None:
            shown = f"{handle:#x}" if isinstance(handle, int) else repr(handle)
            raise InvalidFreeError(f"invalid free of {shown}: this pool never allocated it, or it was already freed")
        self.device.free(handle)
        size, requested = entry
        self.num_frees += 1
        self.bytes_in_use -= size
        self.requested_bytes_in_use -= requested
        self.bytes_reserved = self.bytes_in_use

    def allocated_size(self, handle: int) -> int:
        """Bytes the device holds for `handle` (the request rounded to the device's alignment)."""
        try:
            return self._held[handle][0]
        except KeyError:
            raise InvalidFreeError(f"unknown handle {handle!r}: this pool never allocated it") from None

    def size_of(self, handle: int) -> int:
        """Bytes the caller asked for when `handle` was allocated."""
        try:
            return self._held[handle][1]
        except KeyError:
            raise InvalidFreeError(f"unknown handle {handle!r}: this pool never allocated it") from None

    def memory_map(self, max_buffers: int = 200) -> str:
        lines = [
            f"memory map of {self.policy.label} pool on {self.device.name}: {len(self._held)} buffer(s), "
            f"{format_size(self.bytes_in_use)} held from the device, limit {format_size(self.bytes_limit)}"
        ]
        for address, (size, requested) in sorted(self._held.items())[:max_buffers]:
            lines.append(f"  {address:#x} {size:>12d} B  in use (asked {requested} B)")
        if len(self._held) > max_buffers:
            lines.append(f"  ... {len(self._held) - max_buffers} more buffer(s)")
        return "\n".join(lines)

    def close(self) -> None:
        """Free every buffer still held."""
        for address in list(self._held):
            self.free(address)
