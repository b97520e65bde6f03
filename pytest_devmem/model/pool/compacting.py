"""A defragmenting pool: XLA's BFC rules, plus moving live buffers together when an allocation would
otherwise fail although enough bytes are free, as TPU runtimes defragment their memory. JAX on GPUs
has no such allocator; the `compact` regime and the defragmentation what-if ask what it would change.
"""

from __future__ import annotations

from ...errors import InvalidFreeError, OutOfMemoryError
from .bfc import BFCPool, rounded_bytes
from .chunk_table import ChunkTable


class CompactingPool(BFCPool):
    """A BFC pool whose handles are not addresses, so that it can move the buffers behind them.

    When no free chunk fits a request but the pool's free bytes would (counting what moving gives
    back: a chunk handed out whole shrinks to its buffer's rounded size), every live buffer is moved to
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
            needed = rounded_bytes(int(nbytes))
            free = self.pool_bytes - self.bytes_in_use
            if (free < needed and self.pool_bytes - self._packed_bytes() < needed) or not self._compact():
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
            raise InvalidFreeError(
                f"invalid free of {handle!r}: this pool never allocated it, or it was already freed"
            ) from None
        del self._handle_at[address]
        super().free(address)

    def set_buffers(self, chunks_by_address: dict[int, int]) -> None:
        super().set_buffers(chunks_by_address)
        self._address_of = {address: address for address in chunks_by_address}
        self._handle_at = self._address_of.copy()

    def handle_at(self, address: int) -> int:
        return self._handle_at.get(address, 0)

    def allocated_size(self, handle: int) -> int:
        return super().allocated_size(self.address_of(handle))

    def size_of(self, handle: int) -> int:
        return super().size_of(self.address_of(handle))

    def address_of(self, handle: int) -> int:
        """The address of the buffer `handle` names now (it changes when the pool moves its buffers)."""
        try:
            return self._address_of[handle]
        except (KeyError, TypeError):
            raise InvalidFreeError(f"unknown handle {handle!r}: this pool never allocated it") from None

    def _packed_bytes(self) -> int:
        """The bytes the live buffers take once moved together, each at its rounded size: less than
        `bytes_in_use` where a chunk was handed out whole (BFC's rule for a remainder too small to
        split off), which moving them gives back."""
        return sum(rounded_bytes(max(requested, 1)) for _, _, _, in_use, requested in self.chunks() if in_use)

    def _compact(self) -> bool:
        """Move every live buffer to the front of the regions, in order; False (nothing moved) when
        they would not all fit that way."""
        live = [(start, address, requested) for start, address, _, in_use, requested in self.chunks() if in_use]
        regions = list(self.table.regions.items())
        placement: list[tuple[int, int, int]] = []  # (old address, new address, new size)
        index, cursor = 0, regions[0][0] if regions else 0
        for _, address, requested in live:
            size = rounded_bytes(max(requested, 1))
            while index < len(regions) and cursor + size > regions[index][0] + regions[index][1]:
                index += 1
                if index < len(regions):
                    cursor = regions[index][0]
            if index == len(regions):
                return False
            placement.append((address, cursor, size))
            cursor += size
        asked = {address: requested for _, address, requested in live}
        handles = {address: self._handle_at[address] for _, address, _ in live}
        table = self.table = ChunkTable(self.device.name, self.table.regions)  # the same regions, chunks anew
        self._handle_at = {}
        by_region: dict[int, list[tuple[int, int, int]]] = {start: [] for start, _ in regions}
        for old, new, size in placement:
            region = next(start for start, length in regions if start <= new < start + length)
            by_region[region].append((new, size, old))
            if new != old:
                self.moved_bytes += size
        in_use = 0
        for start, length in regions:
            previous, end = 0, start
            for new, size, old in by_region[start]:
                chunk = table.new_chunk(size, new, previous, 0, asked[old])
                if previous:
                    table.next[previous] = chunk
                else:
                    table.first[start] = chunk
                table.in_use[new] = chunk
                self._handle_at[new] = handles[old]
                self._address_of[handles[old]] = new
                previous, end = chunk, new + size
                in_use += size
            if end < start + length:  # the rest of the region, one free chunk (sizes are multiples of 256)
                chunk = table.new_chunk(start + length - end, end, previous, 0, 0)
                if previous:
                    table.next[previous] = chunk
                else:
                    table.first[start] = chunk
                table.link_free(chunk)
        self.bytes_in_use = in_use
        self.compactions += 1
        return True
