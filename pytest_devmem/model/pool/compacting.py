"""A defragmenting pool: XLA's BFC rules, plus moving live buffers together when an allocation would
otherwise fail although enough bytes are free, as TPU runtimes defragment their memory. JAX on GPUs
has no such allocator; the `compact` regime and the defragmentation what-if ask what it would change.
"""

from __future__ import annotations

from ...errors import InvalidFreeError, OutOfMemoryError
from .bfc import MIN_ALLOCATION_SIZE, BFCPool, rounded_bytes


class CompactingPool(BFCPool):
    """A BFC pool whose handles are not addresses, so that it can move the buffers behind them.

    When no free chunk fits a request but the pool's free bytes would, every live buffer is moved to
    the start of the regions, in address order (each to its rounded size), leaving one free chunk at
    the end of each region; then the request is tried again. `moved_bytes` counts the bytes copied,
    `compactions` how often it happened.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._address_of: dict[int, int] = {}  # handle -> chunk address
        self._handle_at: dict[int, int] = {}  # chunk address -> handle
        self._next_handle = 1
        self.moved_bytes = 0
        self.compactions = 0

    def alloc(self, nbytes: int) -> int:
        try:
            address = super().alloc(nbytes)
        except OutOfMemoryError:
            if self.pool_bytes - self.bytes_in_use < rounded_bytes(int(nbytes)) or not self._compact():
                raise
            address = super().alloc(nbytes)
        handle = self._next_handle
        self._next_handle += 1
        self._address_of[handle] = address
        self._handle_at[address] = handle
        return handle

    def free(self, handle: int) -> None:
        try:
            address = self._address_of.pop(handle)
        except (KeyError, TypeError):
            raise InvalidFreeError(f"invalid free of {handle!r}: this pool never allocated it, or it was already freed") from None
        del self._handle_at[address]
        super().free(address)

    def handle_at(self, address: int) -> int:
        return self._handle_at.get(address, 0)

    def allocated_size(self, handle: int) -> int:
        return super().allocated_size(self._address(handle))

    def size_of(self, handle: int) -> int:
        return super().size_of(self._address(handle))

    def _address(self, handle: int) -> int:
        try:
            return self._address_of[handle]
        except (KeyError, TypeError):
            raise InvalidFreeError(f"unknown handle {handle!r}: this pool never allocated it") from None

    def _compact(self) -> bool:
        """Move every live buffer to the front of the regions, in order; False (nothing moved) when
        they would not all fit that way."""
        live = [(start, address) for start, address, _, in_use, _ in self.chunks() if in_use]
        regions = list(self._regions.items())
        placement: list[tuple[int, int, int]] = []  # (old address, new address, new size)
        index, cursor = 0, regions[0][0] if regions else 0
        for _, address in live:
            size = rounded_bytes(max(self._requested[address], 1))
            while index < len(regions) and cursor + size > regions[index][0] + regions[index][1]:
                index += 1
                if index < len(regions):
                    cursor = regions[index][0]
            if index == len(regions):
                return False
            placement.append((address, cursor, size))
            cursor += size
        requested = {address: self._requested[address] for _, address in live}
        handles = {address: self._handle_at[address] for _, address in live}
        self._size, self._prev, self._next, self._requested, self._free_size = {}, {}, {}, {}, {}
        self._free = []
        self._handle_at = {}
        by_region: dict[int, list[tuple[int, int]]] = {start: [] for start, _ in regions}
        owner = {}
        for old, new, size in placement:
            region = next(start for start, length in regions if start <= new < start + length)
            by_region[region].append((new, size))
            owner[new] = old
            if new != old:
                self.moved_bytes += size
        in_use = 0
        for start, length in regions:
            previous = 0
            end = start
            for new, size in by_region[start]:
                self._size[new] = size
                self._prev[new] = previous
                if previous:
                    self._next[previous] = new
                self._next[new] = 0
                old = owner[new]
                self._requested[new] = requested[old]
                self._handle_at[new] = handles[old]
                self._address_of[handles[old]] = new
                previous, end = new, new + size
                in_use += size
            if end < start + length and start + length - end >= MIN_ALLOCATION_SIZE:
                self._size[end] = start + length - end
                self._prev[end] = previous
                self._next[end] = 0
                if previous:
                    self._next[previous] = end
                self._link_free(end, start + length - end)
        self.bytes_in_use = in_use
        self.compactions += 1
        return True
